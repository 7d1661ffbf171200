#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Runs the binary on CPUs this machine is not: QEMU's user-mode emulator presents an AVX2-only
CPU (Haswell: x86-64-v3) and an x86-64-v2 one (Nehalem: SSE4.2, no AVX). On each, tessel must
choose the best kernel set that CPU runs, refuse a higher one by name, and pass op-harness cases
in every set it runs: an AVX or AVX-512 instruction that leaked into code those CPUs execute
would stop the program with SIGILL. The cases are the small odd-shaped ones (emulated AVX2 runs
about a hundred times slower than the real thing), plus the quantized matmul's byte dot products
(QuantDot.*, a few fused products): on the emulated Haswell the avx2 set must take the
vpmaddubsw path, as an AVX2 CPU without AVX-VNNI does. QEMU 7.2's TCG does not implement
AVX-VNNI (it drops the feature when asked for it), so the VEX vpdpbusd path is tested on real
CPUs that have it only (tests/kernels/quant_dot_test.cpp).

usage: emulated_cpus.py <qemu-x86_64> <tessel> <tessel_kernels_tests>
"""
import os
import subprocess
import sys

CPUS = {"Haswell": ("avx2", ["baseline", "avx2"]), "Nehalem": ("baseline", ["baseline"])}
CASES = (
    "Cpu/OpHarness.MatchesReference/*_7x13_f32:KernelSets.*:StreamRead.*:QuantDot.*"
    ":QuantFused.RowsAloneEqualRowsInABatch")


def run(cmd, env):
    p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
    out = "\n".join(l for l in (p.stdout + p.stderr).splitlines()
                    if "TCG doesn't support" not in l)
    return p.returncode, out


def main():
    qemu, tessel, kernel_tests = sys.argv[1:4]
    # The passive wait policy is set here so that tessel does not re-execute itself, which would
    # leave the emulator.
    base = dict(os.environ, OMP_WAIT_POLICY="PASSIVE", TESSEL_NUM_THREADS="2")
    base.pop("TESSEL_KERNELS", None)
    failures = []
    for cpu, (best, runs) in CPUS.items():
        rc, out = run([qemu, "-cpu", cpu, tessel, "--version"], base)
        if rc != 0 or f"kernels {best} (best this CPU runs)" not in out:
            failures.append(f"{cpu}: --version should choose {best}: rc {rc}: {out[-400:]}")
        rc, out = run([qemu, "-cpu", cpu, tessel, "--version"], dict(base, TESSEL_KERNELS="avx512"))
        if rc == 0 or "cannot run the avx512 kernel set" not in out:
            failures.append(f"{cpu}: TESSEL_KERNELS=avx512 should be refused: rc {rc}: {out[-400:]}")
        rc, out = run([qemu, "-cpu", cpu, kernel_tests, "--gtest_brief=1",
                       f"--gtest_filter={CASES}"], base)
        # f32 cases are supported in every set, so a skipped case of a set this CPU runs means
        # the set was not chosen to run.
        skipped = [s for s in runs if f"SKIPPED ] Cpu/OpHarness.MatchesReference/{s}_" in out]
        if skipped:
            failures.append(f"{cpu}: the {' '.join(skipped)} cases were skipped, not run")
        if rc != 0 or "[  PASSED  ]" not in out:
            failures.append(f"{cpu}: op harness cases failed (rc {rc}; -{-rc} is a signal "
                            f"such as SIGILL=4): {out[-1500:]}")
        else:
            passed = next(l for l in out.splitlines() if l.startswith("[  PASSED  ]"))
            print(f"{cpu}: kernels {best}; cases of {' '.join(runs)}: {passed.strip()}")
    for f in failures:
        print("FAIL", f)
    print(f"{len(CPUS) - len({f.split(':')[0] for f in failures})} passed, "
          f"{len({f.split(':')[0] for f in failures})} failed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
