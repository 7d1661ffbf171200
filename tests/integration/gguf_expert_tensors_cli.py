#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Older llama.cpp Mixtral files, one tensor per expert (blk.N.ffn_gate.E.weight), run as the
stacked files do: on one process, under `--ep 2`, under `--pp 2` and (F32) under `--tp 2`.

A random Mixtral (6 experts, top-2, GQA; rows of 64 and 96 so Q8_0 quantizes every matrix and
stack) written by `tessel init` is exported by `tessel quantize` as F32 and Q8_0 in llama.cpp's
stacked layout, and each file rewritten by gguf_split_experts.py with every stack split into its
experts' tensors. Checks:
- Hugging Face's JavaScript GGUF reader (npm @huggingface/gguf) reads the split Q8_0 file: the
  experts' tensors of dims [in, out] in Q8_0, no stacked tensor;
- greedy ids of each split file equal the stacked file's on one process (and the F32 file's equal
  the safetensors model's);
- `generate --ep 2` and `generate --pp 2` of each split file give those ids too, and
  `generate --tp 2` of the F32 one (each expert's FFN columns read from the experts' tensors);
- a split file missing one expert's tensor is refused naming it, and the layout that asked:
  "pipeline parallelism: load LLaMA GGUF ..." under --pp 2 (never "tensor parallelism"),
  "expert parallelism: ..." under --ep 2, no prefix on one process.
Usage: gguf_expert_tensors_cli.py TESSEL MPIEXEC WORKDIR NODE READER_SCRIPT PACKAGE_DIR
"""
import json
import os
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gguf_ep_cli import PROMPT, mixtral  # noqa: E402
from gguf_split_experts import split  # noqa: E402
from gguf_tp_cli import quantize, run, write_model  # noqa: E402


def fail(message):
    print(f"GGUF per-expert test: {message}", file=sys.stderr)
    sys.exit(1)


def check_javascript_reading(node, script, package, gguf):
    r = subprocess.run([node, script, package, gguf], capture_output=True, text=True, timeout=120)
    if r.returncode != 0:
        fail(f"the JavaScript reader failed on {gguf}: {r.stderr[-2000:]}")
    tensors = {t["name"]: t for t in json.loads(r.stdout)["tensors"]}
    stacked = [n for n in tensors if "_exps" in n]
    if stacked:
        fail(f"the split file still has stacks {stacked}")
    kq8 = 8
    for b in range(2):
        for e in range(6):
            for proj, dims in [("gate", ["64", "96"]), ("up", ["64", "96"]),
                               ("down", ["96", "64"])]:
                name = f"blk.{b}.ffn_{proj}.{e}.weight"
                t = tensors.get(name)
                if t is None or t["dims"] != dims or t["type"] != kq8:
                    fail(f"the JavaScript reader sees {name} as {t}, expected dims {dims} Q8_0")
    print(f"@huggingface/gguf reads {os.path.basename(gguf)}: {len(tensors)} tensors, 36 of "
          "them experts")


def refusals(tessel, mpirun, gen, stacked, env):
    """A file without blk.1.ffn_up.2.weight: each layout's loader names itself and the tensor."""
    broken = stacked.replace(".gguf", "-no-expert.gguf")
    split(stacked, broken, drop={"blk.1.ffn_up.2.weight"})
    detail = (f"load LLaMA GGUF {broken}: 1 missing: blk.1.ffn_up.2.weight [96, 64] (expert of "
              "blk.1.ffn_up_exps.weight)")
    for launch, layout in [([tessel], ""), (mpirun + [tessel], "--pp"),
                           (mpirun + [tessel], "--ep")]:
        flags = [layout, "2"] if layout else []
        r = subprocess.run(launch + gen + ["-m", broken] + flags, capture_output=True, text=True,
                           env=env, timeout=300)
        named = {"": "error: ", "--pp": "error: pipeline parallelism: ",
                 "--ep": "error: expert parallelism: "}[layout]
        if r.returncode == 0 or named + detail not in r.stderr or \
                "tensor parallelism" in r.stderr:
            fail(f"{layout or 'one process'}: expected a refusal containing {named + detail!r} "
                 f"(exit {r.returncode}): {r.stderr[-2000:]}")
    print("a per-expert file missing an expert: refused naming it, under --pp as pipeline "
          "parallelism, under --ep as expert parallelism")


def main():
    tessel, mpiexec, work, node, script, package = sys.argv[1:7]
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    env = dict(os.environ, TESSEL_NUM_THREADS="1", OMP_NUM_THREADS="1")
    mpirun = [mpiexec, "--oversubscribe", "--bind-to", "none", "-np", "2"]
    gen = ["generate", "--prompt-ids", PROMPT, "-n", "20", "--temp", "0", "--ignore-eos",
           "--format", "json"]
    try:
        model = write_model(tessel, work, "mixtral", mixtral(6), 5)
        dense, _ = run([tessel] + gen + ["-m", model], env)
        if len(set(dense)) < 4:
            fail(f"only {len(set(dense))} distinct ids {dense}")
        for kind in ["f32", "q8_0"]:
            stacked = quantize(tessel, model, kind, env)
            per_expert = stacked.replace(".gguf", "-experts.gguf")
            split(stacked, per_expert)
            if kind == "q8_0":
                check_javascript_reading(node, script, package, per_expert)
            want, _ = run([tessel] + gen + ["-m", stacked], env)
            if kind == "f32" and want != dense:
                fail(f"F32 GGUF ids {want} != the safetensors model's {dense}")
            got, _ = run([tessel] + gen + ["-m", per_expert], env)
            if got != want:
                fail(f"{kind}: per-expert file's ids {got} != the stacked file's {want}")
            # --tp 2 splits each expert's FFN columns; Q8_0's down columns (96 / 2) would cut a
            # block (refused by design), so only the F32 file.
            for flag in ["--ep", "--pp"] + (["--tp"] if kind == "f32" else []):
                got, err = run(mpirun + [tessel] + gen + ["-m", per_expert, flag, "2"], env)
                if got != want:
                    fail(f"{kind}: {flag} 2 ids of the per-expert file {got} != one process's "
                         f"{want}: {err[-1000:]}")
            if kind == "q8_0":
                refusals(tessel, mpirun, gen, stacked, env)
            print(f"{kind}: per-expert file = stacked file ({len(want)} ids, "
                  f"{len(set(want))} distinct) on one process, --ep 2, --pp 2"
                  f"{' and --tp 2' if kind == 'f32' else ''}")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
