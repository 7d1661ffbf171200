#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""`mpirun -np 2 tessel generate|serve --ep 2 -m mixtral.gguf`: experts from a GGUF file over the
ranks equal one process.

A random Mixtral (6 experts, top-2, GQA, rows of 64 and 96 so Q8_0 quantizes every matrix and
stack) written by `tessel init` and exported by `tessel quantize` as F32, F16 and Q8_0 in
llama.cpp's layout. Checks:
- the F32 file's greedy ids equal the safetensors model's;
- `generate --ep 2` of each file gives one process's 24 greedy ids (the quantized stacks computed
  in place on both), and each rank says it read less than the file's tensor bytes (the dense part
  and its experts' byte ranges), the two together at least all of them;
- Hugging Face's JavaScript GGUF reader (npm @huggingface/gguf, the GGUF reference test's fixture)
  reads the Q8_0 file as llama.cpp's Mixtral: architecture llama, llama.expert_count 6,
  llama.expert_used_count 2, stacked blk.N.ffn_{gate,up,down}_exps of dims [in, out, experts] in
  Q8_0 and the router blk.N.ffn_gate_inp [hidden, experts] in F32;
- a GGUF Mixtral of 5 experts under --ep 2 is refused with one error for the job;
- `serve --ep 2` of the Q8_0 file answers concurrent completions with one process's texts and
  token logprobs (serve_ep_http.py's check).
Usage: gguf_ep_cli.py TESSEL MPIEXEC WORKDIR NODE READER_SCRIPT PACKAGE_DIR
"""
import json
import os
import re
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gguf_tp_cli import quantize, run, write_model  # noqa: E402
from serve_ep_http import check_family  # noqa: E402

PROMPT = "5,9,12,40,77,3,101,250,7,7,7,64,33"


def fail(message):
    print(f"gguf --ep test: {message}", file=sys.stderr)
    sys.exit(1)


def mixtral(experts):
    return {"architectures": ["MixtralForCausalLM"], "model_type": "mixtral",
            "vocab_size": 258, "hidden_size": 64, "intermediate_size": 96,
            "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
            "max_position_embeddings": 128, "rms_norm_eps": 1e-5, "rope_theta": 10000.0,
            "num_local_experts": experts, "num_experts_per_tok": 2,
            "router_aux_loss_coef": 0.01, "tie_word_embeddings": False,
            "initializer_range": 0.3, "bos_token_id": 257, "eos_token_id": 257}


def check_javascript_reading(node, script, package, gguf, work):
    r = subprocess.run([node, script, package, gguf], capture_output=True, text=True, timeout=120)
    if r.returncode != 0:
        fail(f"the JavaScript reader failed on {gguf}: {r.stderr[-2000:]}")
    theirs = json.loads(r.stdout)
    meta, tensors = theirs["metadata"], {t["name"]: t for t in theirs["tensors"]}

    def value(key):
        if key not in meta:
            fail(f"the JavaScript reader has no {key}: {sorted(meta)}")
        v = meta[key]["value"]
        return v["number"] if isinstance(v, dict) else v

    want = {"general.architecture": "llama", "llama.expert_count": 6,
            "llama.expert_used_count": 2, "llama.block_count": 2, "llama.embedding_length": 64,
            "llama.feed_forward_length": 96}
    for key, v in want.items():
        got = value(key)
        if str(got) != str(v):
            fail(f"the JavaScript reader sees {key} = {got!r}, expected {v!r}")
    kq8, kf32 = 8, 0  # ggml type ids
    for b in range(2):
        for name, dims, kind in [(f"blk.{b}.ffn_gate_exps.weight", ["64", "96", "6"], kq8),
                                 (f"blk.{b}.ffn_up_exps.weight", ["64", "96", "6"], kq8),
                                 (f"blk.{b}.ffn_down_exps.weight", ["96", "64", "6"], kq8),
                                 (f"blk.{b}.ffn_gate_inp.weight", ["64", "6"], kf32)]:
            t = tensors.get(name)
            if t is None or t["dims"] != dims or t["type"] != kind:
                fail(f"the JavaScript reader sees {name} as {t}, expected dims {dims} type {kind}")
    print(f"@huggingface/gguf reads {os.path.basename(gguf)} as llama.cpp's Mixtral "
          f"({len(meta)} keys, {len(tensors)} tensors)")


def main():
    tessel, mpiexec, work, node, script, package = sys.argv[1:7]
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    env = dict(os.environ, TESSEL_NUM_THREADS="1", OMP_NUM_THREADS="1")
    mpirun = [mpiexec, "--oversubscribe", "--bind-to", "none", "-np", "2"]
    gen = ["generate", "--prompt-ids", PROMPT, "-n", "24", "--temp", "0", "--ignore-eos",
           "--format", "json"]
    try:
        model = write_model(tessel, work, "mixtral", mixtral(6), 5)
        dense, _ = run([tessel] + gen + ["-m", model], env)
        if len(set(dense)) < 4:
            fail(f"only {len(set(dense))} distinct ids {dense}")
        files = {kind: quantize(tessel, model, kind, env) for kind in ["f32", "f16", "q8_0"]}
        for kind, gguf in files.items():
            want, _ = run([tessel] + gen + ["-m", gguf], env)
            if kind == "f32" and want != dense:
                fail(f"F32 GGUF ids {want} != the safetensors model's {dense}")
            got, err = run(mpirun + [tessel] + gen + ["-m", gguf, "--ep", "2"], env)
            if got != want:
                fail(f"{kind}: ep 2 ids {got} != one process's {want}")
            lines = re.findall(r"expert-parallel rank (\d+) read (\d+) of the file's (\d+) tensor "
                               r"bytes", err)
            read = {int(r): int(n) for r, n, _ in lines}
            total = int(lines[0][2]) if lines else 0
            if set(read) != {0, 1} or any(n >= total for n in read.values()) or \
                    sum(read.values()) < total:
                fail(f"{kind}: ranks read {read} of {total} tensor bytes: each should read only "
                     f"its part, together all of it: {err[-2000:]}")
            print(f"generate --ep 2 {kind}: {len(want)} ids equal to one process's "
                  f"({len(set(want))} distinct), ranks read {read} of {total} tensor bytes")
        check_javascript_reading(node, script, package, files["q8_0"], work)
        odd = quantize(tessel, write_model(tessel, work, "odd", mixtral(5), 3), "q8_0", env)
        r = subprocess.run(mpirun + [tessel] + gen + ["-m", odd, "--ep", "2"],
                           capture_output=True, text=True, env=env, timeout=120)
        message = "has 5 experts, which --ep 2 ranks cannot split"
        said = (r.stdout + r.stderr).count(message)
        if r.returncode == 0 or said != 1:
            fail(f"5 experts: exit {r.returncode}, {message!r} printed {said} times: "
                 f"{r.stderr[-2000:]}")
        print("generate --ep 2 of a 5-expert GGUF: refused with one error")
        check_family(tessel, mpirun, env, files["q8_0"])
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
