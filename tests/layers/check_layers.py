#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Rejects any #include "tessel/<layer>/..." that the layer table in DESIGN.md forbids.

A layer may include itself, the layers it lists, and (transitively) what those list: ops lists
autograd and kernels, so it may also include tensor and core, which they build on.
Usage: check_layers.py SRC_DIR     (exit 1 and one line per violation)
       check_layers.py --self-test (proves the checker catches a violation)
"""
import os
import re
import sys
import tempfile

# Direct dependencies, exactly as DESIGN.md's layer table lists them.
DIRECT = {
    "core": [],
    "tensor": ["core"],
    "kernels": ["core", "tensor"],
    "autograd": ["tensor", "kernels"],
    "ops": ["autograd", "kernels"],
    "nn": ["ops"],
    "io": ["tensor"],
    "models": ["nn", "io"],
    "dist": ["core", "tensor"],
    "sharding": ["dist", "ops"],
    "parallel": ["nn", "sharding"],
    "memory": ["tensor", "autograd", "dist"],
    "train": ["models", "parallel", "memory", "io"],
    "plan": ["models", "sharding"],
    "serve": ["models", "parallel", "memory", "io"],
    "cli": None,  # everything
}

INCLUDE = re.compile(r'^\s*#\s*include\s+"tessel/([a-z_]+)/')


def allowed(layer):
    if DIRECT[layer] is None:
        return set(DIRECT)
    seen, todo = {layer}, list(DIRECT[layer])
    while todo:
        dep = todo.pop()
        if dep not in seen:
            seen.add(dep)
            todo.extend(DIRECT[dep] or [])
    return seen


def check(src_dir):
    violations = []
    for layer in sorted(os.listdir(src_dir)):
        path = os.path.join(src_dir, layer)
        if not os.path.isdir(path):
            continue
        if layer not in DIRECT:
            violations.append(f"{path}: folder '{layer}' is not a layer in the table")
            continue
        ok = allowed(layer)
        for root, _, files in os.walk(path):
            for name in files:
                if not name.endswith((".h", ".hpp", ".cpp", ".cc", ".cu", ".cuh")):
                    continue
                file = os.path.join(root, name)
                with open(file, encoding="utf-8") as f:
                    for lineno, line in enumerate(f, 1):
                        m = INCLUDE.match(line)
                        if m and m.group(1) not in ok:
                            violations.append(
                                f"{file}:{lineno}: layer '{layer}' may not include "
                                f"'tessel/{m.group(1)}/' (allowed: {', '.join(sorted(ok))})")
    return violations


def self_test():
    with tempfile.TemporaryDirectory() as d:
        os.makedirs(os.path.join(d, "tensor"))
        with open(os.path.join(d, "tensor", "bad.h"), "w") as f:
            f.write('#include "tessel/core/error.h"\n#include "tessel/autograd/node.h"\n')
        v = check(d)
        if len(v) != 1 or "may not include 'tessel/autograd/'" not in v[0]:
            print("self-test failed: expected exactly one violation, got", v)
            return 1
    print("self-test passed: a tensor -> autograd include is rejected")
    return 0


def main():
    if sys.argv[1:] == ["--self-test"]:
        return self_test()
    if len(sys.argv) != 2:
        print(__doc__)
        return 2
    violations = check(sys.argv[1])
    for v in violations:
        print(v)
    print(f"check_layers: {len(violations)} violation(s)")
    return 1 if violations else 0


if __name__ == "__main__":
    sys.exit(main())
