#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Checks the built kernel-set objects (kernels/cpu/isa_region.h): an object compiled for the avx2
or avx512 set may define AVX code only in its own namespace (tessel::kernels::<set>). An inline
function of a shared header compiled with AVX instructions would be one of several definitions of
the same symbol, and the linker may pick it for baseline code that then crashes on an older CPU.
Also checks that each set's objects do use their instructions (the target region took effect).

usage: isa_isolation.py <kernels CMakeFiles dir> <set>...
"""
import pathlib
import re
import subprocess
import sys

AVX = re.compile(r"^\s*[0-9a-f]+:\s+(v[a-z0-9]+)\b|%[yz]mm\d+|%k[1-7]\b")
EVEX_ONLY = re.compile(r"%zmm\d+|%[xy]mm(1[6-9]|2\d|3[01])\b|%k[1-7]\b")
YMM = re.compile(r"%ymm\d+")


def exported_functions(obj):
    out = subprocess.run(["nm", "--defined-only", "--extern-only", obj],
                         check=True, capture_output=True, text=True).stdout
    return {line.split()[-1] for line in out.splitlines() if line.split()[1] in "TWi"}


def functions(obj):
    """(mangled name, instruction lines) per function in the object's text sections."""
    out = subprocess.run(["objdump", "-d", "--no-show-raw-insn", obj],
                         check=True, capture_output=True, text=True).stdout
    name, body = None, []
    for line in out.splitlines():
        m = re.match(r"^[0-9a-f]+ <(.+)>:$", line)
        if m:
            if name:
                yield name, body
            name, body = m.group(1), []
        elif name:
            body.append(line)
    if name:
        yield name, body


def demangle(names):
    out = subprocess.run(["c++filt"], input="\n".join(names), check=True,
                         capture_output=True, text=True).stdout
    return dict(zip(names, out.splitlines()))


def main():
    root = pathlib.Path(sys.argv[1])
    failures, checked = [], 0
    for kernel_set in sys.argv[2:]:
        objs = sorted((root / f"tessel_kernels_{kernel_set}.dir").rglob("*.o"))
        if not objs:
            failures.append(f"{kernel_set}: no objects under {root}")
            continue
        namespace = f"tessel::kernels::{kernel_set}::"
        uses = {"ymm": False, "evex": False}
        for obj in objs:
            exported = exported_functions(obj)
            fns = list(functions(obj))
            names = demangle([n for n, _ in fns])
            for mangled, body in fns:
                text = "\n".join(body)
                uses["ymm"] |= bool(YMM.search(text))
                uses["evex"] |= bool(EVEX_ONLY.search(text))
                if mangled not in exported or namespace in names[mangled]:
                    continue
                checked += 1
                bad = [l.strip() for l in body if AVX.search(l)]
                if bad:
                    failures.append(f"{obj.name}: {names[mangled]} is shared with other objects "
                                    f"but compiled with {kernel_set} instructions, e.g. {bad[0]}")
        if kernel_set in ("avx2", "avx512") and not uses["ymm"]:
            failures.append(f"{kernel_set}: no 256-bit instruction in its objects: the target "
                            "region did not take effect")
        if kernel_set == "avx512" and not uses["evex"]:
            failures.append("avx512: no AVX-512-only register in its objects: the target region "
                            "did not take effect")
    for f in failures:
        print("FAIL", f)
    print(f"{checked} shared functions checked in the {' '.join(sys.argv[2:])} objects, "
          f"{len(failures)} problems")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
