#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Runs a command (an mpirun job) and checks how it ended: exit status and output.

Usage: expect_run.py [--exit zero|nonzero|N] [--match REGEX]... [--absent REGEX]...
                     [--timeout S] -- COMMAND...
Prints the command's combined output, then one line per unmet expectation; exits 1 if any.
"""
import argparse
import re
import subprocess
import sys


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--exit", default="zero")
    p.add_argument("--match", action="append", default=[])
    p.add_argument("--absent", action="append", default=[])
    p.add_argument("--timeout", type=float, default=60)
    p.add_argument("command", nargs=argparse.REMAINDER)
    a = p.parse_args()
    cmd = a.command[1:] if a.command and a.command[0] == "--" else a.command
    try:
        r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                           timeout=a.timeout, text=True, errors="replace")
    except subprocess.TimeoutExpired as e:
        out = e.stdout or ""
        print(out if isinstance(out, str) else out.decode(errors="replace"))
        print(f"expect_run: the job did not end within {a.timeout} s")
        return 1
    print(r.stdout)
    problems = []
    if a.exit == "zero" and r.returncode != 0:
        problems.append(f"exit status {r.returncode}, expected 0")
    elif a.exit == "nonzero" and r.returncode == 0:
        problems.append("exit status 0, expected non-zero")
    elif a.exit not in ("zero", "nonzero") and r.returncode != int(a.exit):
        problems.append(f"exit status {r.returncode}, expected {a.exit}")
    for rx in a.match:
        if not re.search(rx, r.stdout, re.S):
            problems.append(f"output lacks /{rx}/")
    for rx in a.absent:
        if re.search(rx, r.stdout, re.S):
            problems.append(f"output contains /{rx}/")
    for line in problems:
        print("expect_run: " + line)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
