#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""`--device` on the commands that run models: cpu is accepted, a malformed value is refused, and
`--device cuda` / `cuda:N` ends the program before any work with one line that says why it cannot
run there: "built without CUDA" in a build without it, "no CUDA device visible: <driver's error>"
on a machine without a GPU, and (with a GPU) that the command does not run on CUDA yet (train and
generate, which do, go on to their next missing argument).
Usage: device_choice_check.py TESSEL_BINARY ON|OFF (whether the build has CUDA)"""
import re
import subprocess
import sys

COMMANDS = [["train"], ["generate"], ["eval"], ["serve"], ["bench"], ["bench", "train"],
            ["bench", "generate"], ["bench", "serve"]]


def visible_gpus():
    """CUDA devices the driver reports (0 without a driver or a device), as tessel would see."""
    try:
        import ctypes
        cuda = ctypes.CDLL("libcuda.so.1")
        count = ctypes.c_int(0)
        if cuda.cuInit(0) != 0 or cuda.cuDeviceGetCount(ctypes.byref(count)) != 0:
            return 0
        return count.value
    except OSError:
        return 0


def run(binary, args):
    p = subprocess.run([binary] + args, capture_output=True, text=True, timeout=60)
    return p.returncode, p.stdout, p.stderr


def main():
    binary, cuda = sys.argv[1], sys.argv[2] == "ON"
    gpus = visible_gpus() if cuda else 0
    failures = []
    for cmd in COMMANDS:
        for device in ["cuda", "cuda:1"]:
            code, out, err = run(binary, cmd + ["--device", device])
            lines = err.strip().splitlines()
            what = " ".join(cmd) + " --device " + device
            if code == 0 or len(lines) != 1 or not lines[0].startswith("tessel: error: "):
                failures.append(f"{what}: exit {code}, stderr {err!r}: want one error line")
                continue
            line = lines[0]
            if not cuda:
                ok = re.fullmatch(r"tessel: error: device cuda:\d+: tessel was built without CUDA "
                                  r"\(.+\)", line)
            elif gpus == 0:
                ok = re.fullmatch(r"tessel: error: no CUDA device visible: \S.*", line)
            elif device == "cuda:1" and gpus == 1:
                ok = re.fullmatch(r"tessel: error: cuda:1: only 1 CUDA device visible .*", line)
            elif cmd in (["train"], ["generate"]):
                # These run on CUDA: the device is accepted and the next missing argument speaks.
                ok = "does not run on CUDA" not in line and "CUDA device" not in line
            else:
                ok = re.fullmatch(r"tessel: error: --device cuda:\d: `tessel [a-z ]+` does not "
                                  r"run on CUDA yet .*", line)
            if not ok:
                failures.append(f"{what}: unexpected line {line!r}")
            print(f"{what}: {line}")
        code, out, err = run(binary, cmd + ["--device", "tpu"])
        if code == 0 or "expected cpu, cuda or cuda:N" not in err:
            failures.append(f"{' '.join(cmd)} --device tpu: exit {code}, stderr {err!r}")
    # cpu is the default and is accepted: the command then fails (or not) for its own reasons.
    code, out, err = run(binary, ["eval", "--device", "cpu"])
    if "--device" in err or "CUDA" in err:
        failures.append(f"eval --device cpu: {err!r}")
    for f in failures:
        print("FAIL:", f)
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
