#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Checks tessel's layering: #include lines in src/, tests/ and bench/, private subfolders, and
each layer library's CMake link list, against the layer table of DESIGN.md.

Rules (docs/DECISIONS.md, "Layers and includes", says why):
1. Layers. A file in src/tessel/<layer>/ may include "tessel/<dep>/..." for its own layer, the
   layers DIRECT lists for it, and (transitively) what those list: ops lists autograd and
   kernels, so it may also include tensor and core.
2. Tests and benchmarks. A file in tests/<layer>/ (any depth) follows its layer's rule, plus the
   test helpers of its own folder and of tests/common/. The test folders that are not a layer
   (TEST_FOLDERS: parity, integration, common, ...) may include every layer, and bench/ may too
   (plus the op harness in tests/kernels/, whose cases feed the benchmarks). A test helper is
   named from the including file's folder ("gradcheck.h") or from tests/, the one test include
   directory ("common/tolerance.h", "dist/common/collective_checks.h"); never with "..". What a
   helper includes counts as included by every file that includes it, so a helper in
   tests/common/ that includes tessel/dist/ cannot be used by tests/core/. TEST_EXTRA and
   TEST_HELPERS list the few test folders that may include more than that, each with its reason.
3. Private subfolders. "tessel/<layer>/<sub>/..." for a <layer>/<sub> in PRIVATE may be included
   only by the owning layer (its sources and its tests) and by the readers PRIVATE names: a layer
   (its sources and its tests), "tests" (every test) or "bench". Other subfolders are public.
4. Link lists. target_link_libraries(tessel_<layer> ...) in src/tessel/<layer>/CMakeLists.txt
   links exactly the layer's direct dependencies: none that DIRECT does not list, and every listed
   one that the layer's sources include (what a dependency builds on comes through its PUBLIC
   links). Other libraries of the folder (tessel_<layer>_<name>) may link only their own layer and
   its direct dependencies. cli (the `tessel` executable) may link every layer.
5. The allow-lists stay short: an entry of TEST_EXTRA, TEST_HELPERS or a PRIVATE reader that no
   include needs any more is reported, so it is removed with its last use.

Usage: check_layers.py ROOT      (ROOT holds src/tessel/, tests/, bench/; exit 1 and one line per
                                  violation)
       check_layers.py --self-test (plants each kind of violation in a temporary tree and proves
                                  it is rejected, and that a clean tree passes)
"""
import os
import re
import shutil
import sys
import tempfile

# Direct dependencies, exactly as DESIGN.md's layer table lists them (None: every layer).
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

# Private subfolders: "<layer>/<sub>" -> (readers besides the owning layer, why). A reader is a
# layer (its sources and tests/<layer>/), "tests" (every test) or "bench".
PRIVATE = {
    "kernels/cpu": (["bench"], "the CPU backend is reached through kernels/backend.h; "
                    "bench/attention_bench.cpp builds its unfused baseline from the fused "
                    "kernel's own tiles and vector exp"),
    "kernels/reference": (["tests"], "the fp64 oracle is for tests only (DESIGN.md); "
                          "benchmarks reach its cases through tests/kernels/op_harness.h"),
    "dist/mpi": (["cli"], "communicators come from dist/world.h; `tessel bench comm` times raw "
                 "MPI calls on the world's own MPI communicator"),
    "dist/tcp": ([], "communicators come from dist/world.h"),
    "dist/nccl": ([], "communicators come from dist/world.h"),
    "dist/threads": (["tests"], "communicators come from dist/world.h; ThreadWorld runs ranks as "
                     "threads for fast tests of every layer built on communication"),
}

# Test folders that are not a layer: they may include every layer (private subfolders still
# apply, with the reader "tests").
TEST_FOLDERS = {
    "common": "helpers shared by the test folders (checked again at each file that includes them)",
    "parity": "whole models against PyTorch",
    "integration": "the layout matrix and other runs of the whole program",
    "layers": "this checker",
    "fixtures": "data files",
}

# Test folders allowed layers beyond their own layer's rule: (folder, layer) -> why.
TEST_EXTRA = {
    ("autograd", "ops"): "the tape is exercised through the differentiable ops that record it "
                         "(autograd itself has none)",
    ("parallel", "models"): "the parallel styles are tested on a real model (GPT-2), as a "
                            "parallel/ user would apply them",
    ("parallel", "train"): "ZeRO is compared with the one-process train::AdamW and grad_clip",
}

# Test folders allowed another test folder's helpers: (folder, helper folder) -> why.
TEST_HELPERS = {
    ("train", "parallel"): "model_tensor_parallel_test.cpp runs tests/parallel's tiny GPT-2 on a "
                           "thread world; the helper moves to tests/common/ once GPT-2 leaves "
                           "train/ (issues 13 and 17)",
}

# Helper folders bench/ may include besides tests/common/: the op cases feed the benchmarks.
BENCH_HELPERS = ["kernels"]

SOURCE_SUFFIXES = (".h", ".hpp", ".cpp", ".cc", ".cu", ".cuh")
INCLUDE = re.compile(r'^\s*#\s*include\s*([<"])([^>"]+)[>"]')
TESSEL = re.compile(r"^tessel/([a-z_0-9]+)/(?:([a-z_0-9]+)/)?")


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


class Rule:
    """What the files of one folder may include."""

    def __init__(self, name, layers, readers, helper_roots, extra=None, extra_helpers=None):
        self.name = name                  # e.g. "layer 'ops'", "tests/parallel"
        self.layers = layers              # layers it may include
        self.readers = readers            # identities for PRIVATE: layer names, "tests", "bench"
        self.helper_roots = helper_roots  # folders (absolute) whose test helpers it may include
        self.extra = extra or {}          # layer -> its TEST_EXTRA key
        self.extra_helpers = extra_helpers or {}  # helper root -> its TEST_HELPERS key


def sources(folder):
    for root, dirs, files in os.walk(folder):
        dirs[:] = sorted(d for d in dirs if d != "__pycache__")
        for name in sorted(files):
            if name.endswith(SOURCE_SUFFIXES):
                yield os.path.join(root, name)


def includes(file):
    with open(file, encoding="utf-8", errors="replace") as f:
        for lineno, line in enumerate(f, 1):
            m = INCLUDE.match(line)
            if m:
                yield lineno, m.group(1), m.group(2)


class Checker:
    def __init__(self, root):
        self.root = os.path.abspath(root)
        self.src = os.path.join(self.root, "src", "tessel")
        self.tests = os.path.join(self.root, "tests")
        self.bench = os.path.join(self.root, "bench")
        self.violations = []
        self.seen = set()
        self.used = set()  # allow-list entries some include needed

    def rel(self, path):
        return os.path.relpath(path, self.root)

    def report(self, key, message):
        if key not in self.seen:
            self.seen.add(key)
            self.violations.append(message)

    # -- rules 1 and 3: one "tessel/..." include -------------------------------------------------
    def check_tessel(self, rule, file, lineno, path, via):
        m = TESSEL.match(path)
        if not m:
            return
        where = f"{self.rel(file)}:{lineno}: "
        suffix = f" (included from {self.rel(via)})" if via else ""
        layer, sub = m.group(1), m.group(2)
        if layer not in DIRECT:
            self.report((file, lineno, "unknown"),
                        f"{where}'tessel/{layer}/' is not a layer in the table{suffix}")
            return
        if layer not in rule.layers:
            self.report((file, lineno, rule.name),
                        f"{where}{rule.name} may not include 'tessel/{layer}/' (allowed: "
                        f"{', '.join(sorted(rule.layers))}){suffix}")
            return
        if layer in rule.extra:
            self.used.add(("TEST_EXTRA", rule.extra[layer]))
        private = PRIVATE.get(f"{layer}/{sub}") if sub else None
        if private and layer not in rule.readers:
            readers = rule.readers & set(private[0])
            if not readers:
                self.report((file, lineno, rule.name, "private"),
                            f"{where}{rule.name} may not include 'tessel/{layer}/{sub}/': private "
                            f"to {layer}/{' and ' + ', '.join(private[0]) if private[0] else ''} "
                            f"({private[1]}){suffix}")
            for reader in readers:
                self.used.add(("PRIVATE", (f"{layer}/{sub}", reader)))

    # -- rule 1 (+3) for src/ ----------------------------------------------------------------------
    def check_src(self):
        if not os.path.isdir(self.src):
            self.violations.append(f"{self.rel(self.src)}: no such folder")
            return
        for layer in sorted(os.listdir(self.src)):
            path = os.path.join(self.src, layer)
            if not os.path.isdir(path):
                continue
            if layer not in DIRECT:
                self.violations.append(f"{self.rel(path)}: folder '{layer}' is not a layer in "
                                       "the table")
                continue
            rule = Rule(f"layer '{layer}'", allowed(layer), {layer}, [])
            for file in sources(path):
                for lineno, _, inc in includes(file):
                    if inc.startswith("../") or "/../" in inc:
                        self.report((file, lineno, "up"),
                                    f"{self.rel(file)}:{lineno}: relative include '{inc}' reaches "
                                    "out of its folder; name it \"tessel/<layer>/...\"")
                    self.check_tessel(rule, file, lineno, inc, None)

    # -- rule 2 for tests/ and bench/ --------------------------------------------------------------
    def test_rule(self, folder):
        common = os.path.join(self.tests, "common")
        own = os.path.join(self.tests, folder)
        if folder in DIRECT:
            base = allowed(folder)
            extra = {l: (f, l) for (f, l) in TEST_EXTRA if f == folder and l not in base}
            helpers = {os.path.join(self.tests, h): (f, h) for (f, h) in TEST_HELPERS
                       if f == folder}
            return Rule(f"tests/{folder}", base | set(extra), {folder, "tests"},
                        [own, common] + list(helpers), extra, helpers)
        return Rule(f"tests/{folder}", set(DIRECT), {"tests"}, [own, common])

    def resolve(self, file, inc):
        """The files `inc` names beside `file` and under tests/ (the compiler takes the first)."""
        found = []
        for base in (os.path.dirname(file), self.tests):
            candidate = os.path.normpath(os.path.join(base, inc))
            if os.path.isfile(candidate) and candidate not in found:
                found.append(candidate)
        return found

    def check_test_file(self, rule, file, via=None, stack=()):
        for lineno, bracket, inc in includes(file):
            where = f"{self.rel(file)}:{lineno}: "
            suffix = f" (included from {self.rel(via)})" if via else ""
            if TESSEL.match(inc):
                self.check_tessel(rule, file, lineno, inc, via)
                continue
            if bracket != '"':
                continue
            if inc.startswith("../") or "/../" in inc:
                self.report((file, lineno, "up"),
                            f"{where}relative include '{inc}' reaches out of its folder; name a "
                            "test helper from tests/ (e.g. \"common/tolerance.h\")")
                continue
            found = self.resolve(file, inc)
            if not found:
                self.report((file, lineno, "unresolved"),
                            f"{where}'{inc}' is neither beside the file nor under tests/")
                continue
            if len(found) > 1:
                self.report((file, lineno, "ambiguous"),
                            f"{where}'{inc}' names both {self.rel(found[0])} and "
                            f"{self.rel(found[1])}; rename one")
                continue
            target = found[0]
            for root, key in rule.extra_helpers.items():
                if target.startswith(root + os.sep):
                    self.used.add(("TEST_HELPERS", key))
            if not any(target.startswith(r + os.sep) for r in rule.helper_roots):
                self.report((file, lineno, rule.name, "helper"),
                            f"{where}{rule.name} may not include {self.rel(target)}: a test "
                            "folder's helpers are its own; shared ones live in tests/common/"
                            f"{suffix}")
                continue
            if target not in stack:
                self.check_test_file(rule, target, via or file, stack + (file,))

    def check_tests(self):
        if os.path.isdir(self.tests):
            for folder in sorted(os.listdir(self.tests)):
                path = os.path.join(self.tests, folder)
                if not os.path.isdir(path) or folder == "__pycache__":
                    continue
                if folder not in DIRECT and folder not in TEST_FOLDERS:
                    self.violations.append(
                        f"{self.rel(path)}: test folder '{folder}' is neither a layer nor in "
                        "TEST_FOLDERS (add it there with its rule)")
                    continue
                rule = self.test_rule(folder)
                for file in sources(path):
                    self.check_test_file(rule, file)
        if os.path.isdir(self.bench):
            roots = [self.bench, os.path.join(self.tests, "common")]
            roots += [os.path.join(self.tests, h) for h in BENCH_HELPERS]
            rule = Rule("bench", set(DIRECT), {"bench"}, roots)
            for file in sources(self.bench):
                self.check_test_file(rule, file)

    # -- rule 4: link lists ------------------------------------------------------------------------
    @staticmethod
    def link_calls(text):
        """{target: [linked items]} for every target_link_libraries call, comments removed."""
        out, quoted, i, clean = {}, False, 0, []
        while i < len(text):
            c = text[i]
            if c == "\\" and quoted:
                clean.append(text[i:i + 2])
                i += 2
                continue
            if c == '"':
                quoted = not quoted
            elif c == "#" and not quoted:
                while i < len(text) and text[i] != "\n":
                    i += 1
                continue
            clean.append(c)
            i += 1
        for m in re.finditer(r"\btarget_link_libraries\s*\(([^)]*)\)", "".join(clean)):
            words = m.group(1).split()
            if words:
                out.setdefault(words[0], []).extend(words[1:])
        return out

    @staticmethod
    def library_layer(name):
        """The layer whose library (or sub-library tessel_<layer>_<x>) `name` is, else None."""
        if not name.startswith("tessel_"):
            return None
        rest = name[len("tessel_"):]
        best = None
        for layer in DIRECT:
            if rest == layer or rest.startswith(layer + "_"):
                if best is None or len(layer) > len(best):
                    best = layer
        return best

    def included_layers(self, layer):
        found = set()
        for file in sources(os.path.join(self.src, layer)):
            for _, _, inc in includes(file):
                m = TESSEL.match(inc)
                if m and m.group(1) in DIRECT and m.group(1) != layer:
                    found.add(m.group(1))
        return found

    def check_links(self):
        if not os.path.isdir(self.src):
            return
        for layer in sorted(os.listdir(self.src)):
            cmake = os.path.join(self.src, layer, "CMakeLists.txt")
            if layer not in DIRECT or not os.path.isfile(cmake):
                continue
            with open(cmake, encoding="utf-8") as f:
                text = f.read()
            calls = self.link_calls(text)
            main = "tessel" if layer == "cli" else f"tessel_{layer}"
            if DIRECT[layer] is None:
                continue
            direct = set(DIRECT[layer])
            defined = set(re.findall(r"\badd_(?:library|executable)\s*\(\s*([A-Za-z0-9_]+)",
                                     text))
            for target in sorted(defined):
                if target != main and self.library_layer(target) != layer:
                    continue
                linked = {self.library_layer(w) for w in calls.get(target, [])} - {None}
                extra = sorted(linked - direct - {layer})
                missing = []
                if target == main:
                    missing = sorted(direct & self.included_layers(layer) - linked)
                if not extra and not missing:
                    continue
                parts = []
                if extra:
                    parts.append("links " + ", ".join(f"tessel_{l}" for l in extra) +
                                 " (not a direct dependency)")
                if missing:
                    parts.append("lacks " + ", ".join(f"tessel_{l}" for l in missing) +
                                 " (a direct dependency it includes)")
                self.violations.append(
                    f"{self.rel(cmake)}: {target} {'; '.join(parts)}; the table lists: "
                    f"{', '.join(f'tessel_{l}' for l in DIRECT[layer]) or 'none'}")

    # -- the allow-lists stay short: an entry nothing needs is reported ----------------------------
    def check_stale(self):
        entries = [("TEST_EXTRA", k) for k in TEST_EXTRA]
        entries += [("TEST_HELPERS", k) for k in TEST_HELPERS]
        entries += [("PRIVATE", (sub, r)) for sub, (readers, _) in PRIVATE.items() for r in readers]
        for table, key in entries:
            if (table, key) not in self.used:
                what = f"reader '{key[1]}' of {key[0]}/" if table == "PRIVATE" else repr(key)
                self.violations.append(f"tests/layers/check_layers.py: {table} entry {what} is "
                                       "no longer needed by any include; remove it")

    def run(self):
        self.check_src()
        self.check_tests()
        self.check_links()
        self.check_stale()
        return self.violations


def check(root):
    return Checker(root).run()


# -- self-test -------------------------------------------------------------------------------------
CLEAN_TREE = {
    "src/tessel/core/error.h": "#pragma once\n",
    "src/tessel/core/CMakeLists.txt": "add_library(tessel_core STATIC error.cpp)\n",
    "src/tessel/tensor/tensor.h": '#include "tessel/core/error.h"\n',
    "src/tessel/tensor/CMakeLists.txt":
        "add_library(tessel_tensor STATIC tensor.cpp)\n"
        "target_link_libraries(tessel_tensor PUBLIC tessel_core)\n",
    "src/tessel/kernels/backend.h": '#include "tessel/tensor/tensor.h"\n',
    "src/tessel/kernels/cpu/loops.h": '#include "tessel/kernels/backend.h"\n',
    "src/tessel/kernels/reference/reference_backend.h": '#include "tessel/kernels/cpu/loops.h"\n',
    "src/tessel/kernels/CMakeLists.txt":
        "# target_link_libraries(tessel_kernels PUBLIC tessel_nn)  (a comment: not read)\n"
        "add_library(tessel_kernels STATIC backend.cpp)\n"
        "target_link_libraries(tessel_kernels PUBLIC tessel_core tessel_tensor\n"
        "  PRIVATE tessel_dep_dnnl)  # not a layer\n"
        "add_library(tessel_kernels_reference STATIC reference/gemm.cpp)\n"
        "target_link_libraries(tessel_kernels_reference PUBLIC tessel_kernels)\n",
    "src/tessel/autograd/node.h": '#include "tessel/kernels/backend.h"\n',
    "src/tessel/ops/matmul.h":
        '#include "tessel/autograd/node.h"\n#include "tessel/kernels/backend.h"\n',
    "src/tessel/ops/CMakeLists.txt":
        "add_library(tessel_ops STATIC matmul.cpp)\n"
        "target_link_libraries(tessel_ops PUBLIC tessel_autograd tessel_kernels)\n",
    "src/tessel/dist/threads/thread_world.h": '#include "tessel/tensor/tensor.h"\n',
    "src/tessel/dist/world.cpp": '#include "tessel/dist/threads/thread_world.h"\n',
    "tests/common/tolerance.h": '#include "tessel/core/error.h"\n',
    "tests/common/thread_checks.h": '#include "tessel/dist/threads/thread_world.h"\n',
    "tests/core/error_test.cpp": '#include "common/tolerance.h"\n#include "tessel/core/error.h"\n',
    "tests/kernels/op_harness.h": '#include "tessel/kernels/backend.h"\n',
    "tests/kernels/cases/cases.h":
        '#include "kernels/op_harness.h"\n'
        '#include "tessel/kernels/reference/reference_backend.h"\n',
    "tests/kernels/cpu_test.cpp":
        '#include "tessel/kernels/cpu/loops.h"\n#include "cases/cases.h"\n',
    "tests/ops/grad_test.cpp": '#include "tessel/kernels/reference/reference_backend.h"\n',
    "tests/dist/mesh_test.cpp": '#include "common/thread_checks.h"\n',
    "tests/parity/gpt2_parity_test.cpp": '#include "tessel/ops/matmul.h"\n',
    "bench/op_bench.cpp": '#include "kernels/op_harness.h"\n#include "tessel/ops/matmul.h"\n',
    # One use of each allow-list entry (an unused entry is itself reported).
    "tests/autograd/engine_test.cpp": '#include "tessel/ops/matmul.h"\n',
    "tests/parallel/parallel_test_util.h": '#include "tessel/models/gpt2.h"\n',
    "tests/parallel/zero_test.cpp":
        '#include "parallel_test_util.h"\n#include "tessel/train/optim/adamw.h"\n',
    "tests/train/tp_test.cpp": '#include "parallel/parallel_test_util.h"\n',
    "src/tessel/cli/bench_comm.cpp": '#include "tessel/dist/mpi/mpi_communicator.h"\n',
    "bench/attention_bench.cpp": '#include "tessel/kernels/cpu/loops.h"\n',
}

# (what is planted, files added or replaced, what the one violation line must contain)
PLANTS = [
    ("an upward include from src/",
     {"src/tessel/tensor/bad.h":
          '#include "tessel/core/error.h"\n#include "tessel/autograd/node.h"\n'},
     "src/tessel/tensor/bad.h:2: layer 'tensor' may not include 'tessel/autograd/'"),
    ("a relative include out of a src/ folder",
     {"src/tessel/ops/bad.cpp": '#include "../kernels/backend.h"\n'},
     "src/tessel/ops/bad.cpp:1: relative include '../kernels/backend.h' reaches out of its folder"),
    ("a forbidden include from tests/",
     {"tests/core/bad_test.cpp": '#include "tessel/ops/matmul.h"\n'},
     "tests/core/bad_test.cpp:1: tests/core may not include 'tessel/ops/'"),
    ("a forbidden include from tests/ through a tests/common/ helper",
     {"tests/core/bad_test.cpp": '#include "common/thread_checks.h"\n'},
     "tests/common/thread_checks.h:1: tests/core may not include 'tessel/dist/' (allowed: core) "
     "(included from tests/core/bad_test.cpp)"),
    ("an upward relative include from tests/",
     {"tests/ops/bad_test.cpp": '#include "../common/tolerance.h"\n'},
     "tests/ops/bad_test.cpp:1: relative include '../common/tolerance.h' reaches out of its "
     "folder"),
    ("a test including another test folder's helper",
     {"tests/ops/bad_test.cpp": '#include "kernels/op_harness.h"\n'},
     "tests/ops/bad_test.cpp:1: tests/ops may not include tests/kernels/op_harness.h"),
    ("a forbidden include from bench/",
     {"bench/bad_bench.cpp": '#include "dist/mesh_test.cpp"\n'},
     "bench/bad_bench.cpp:1: bench may not include tests/dist/mesh_test.cpp"),
    ("a subfolder-privacy violation from src/",
     {"src/tessel/ops/bad.cpp": '#include "tessel/kernels/cpu/loops.h"\n'},
     "src/tessel/ops/bad.cpp:1: layer 'ops' may not include 'tessel/kernels/cpu/': private to "
     "kernels/ and bench"),
    ("a subfolder-privacy violation from bench/",
     {"bench/bad_bench.cpp": '#include "tessel/dist/threads/thread_world.h"\n'},
     "bench/bad_bench.cpp:1: bench may not include 'tessel/dist/threads/': private to dist/ and "
     "tests"),
    ("a link list with an extra and a missing library",
     {"src/tessel/ops/CMakeLists.txt":
          "add_library(tessel_ops STATIC matmul.cpp)\n"
          "target_link_libraries(tessel_ops PUBLIC tessel_autograd\n  tessel_nn)\n"},
     "src/tessel/ops/CMakeLists.txt: tessel_ops links tessel_nn (not a direct dependency); "
     "lacks tessel_kernels (a direct dependency it includes); the table lists: tessel_autograd, "
     "tessel_kernels"),
    ("a sub-library linking above its layer",
     {"src/tessel/kernels/CMakeLists.txt":
          CLEAN_TREE["src/tessel/kernels/CMakeLists.txt"].replace(
              "PUBLIC tessel_kernels)", "PUBLIC tessel_kernels tessel_ops)")},
     "src/tessel/kernels/CMakeLists.txt: tessel_kernels_reference links tessel_ops"),
    ("an allow-list entry nothing needs any more",
     {"src/tessel/cli/bench_comm.cpp": '#include "tessel/dist/world.h"\n'},
     "tests/layers/check_layers.py: PRIVATE entry reader 'cli' of dist/mpi/ is no longer needed "
     "by any include; remove it"),
]


def write_tree(root, files):
    for rel, text in files.items():
        path = os.path.join(root, rel)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w", encoding="utf-8") as f:
            f.write(text)


def self_test():
    failures = 0
    with tempfile.TemporaryDirectory() as d:
        clean = os.path.join(d, "clean")
        write_tree(clean, CLEAN_TREE)
        v = check(clean)
        if v:
            print("self-test failed: the clean tree has violations:", *v, sep="\n  ")
            failures += 1
        else:
            print("self-test: a clean tree passes")
        for i, (what, files, expected) in enumerate(PLANTS):
            tree = os.path.join(d, f"plant{i}")
            shutil.copytree(clean, tree)
            write_tree(tree, files)
            v = check(tree)
            if len(v) == 1 and expected in v[0]:
                print(f"self-test: {what} is rejected: {v[0]}")
            else:
                print(f"self-test failed: {what}: expected one line containing\n  {expected}\n"
                      "got:", *v, sep="\n  ")
                failures += 1
    print("self-test " + ("failed" if failures else "passed"))
    return 1 if failures else 0


def main():
    if sys.argv[1:] == ["--self-test"]:
        return self_test()
    if len(sys.argv) != 2 or not os.path.isdir(os.path.join(sys.argv[1], "src", "tessel")):
        print(__doc__)
        return 2
    violations = check(sys.argv[1])
    for v in violations:
        print(v)
    print(f"check_layers: {len(violations)} violation(s)")
    return 1 if violations else 0


if __name__ == "__main__":
    sys.exit(main())
