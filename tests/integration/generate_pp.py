#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""`mpirun -np N tessel generate --pp N` loads only each rank's stage and equals one process.

For a random GPT-2 of 3 blocks (tied head: the last stage reads the embedding too) and a LLaMA of
5 blocks with grouped-query heads and an untied head: greedy ids of `generate --pp 2` (and for the
LLaMA --pp 3, and --pp 2 --tp 2 on 4 ranks) must equal one process's, every rank must say which
blocks it runs and how many weight values it read (each fewer than the file holds, together at
least all of them). `--weights int8` (GPT-2) and `--weights bf16` (LLaMA) under --pp 2 convert each
stage's own matrices and equal one process's `--weights`. --pp with more stages than blocks, and
with a --tp that cannot split the heads are refused.
Usage: generate_pp.py TESSEL MPIEXEC WORKDIR
"""
import json
import os
import re
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from serve_http_common import write_hf_model  # noqa: E402
from serve_http_common import ranks_read, stored_values  # noqa: E402

PROMPT = "5,9,12,40,77,3,101,250,7"


def fail(message):
    print(f"generate --pp test: {message}", file=sys.stderr)
    sys.exit(1)


def models(tessel, work):
    gpt2 = {"architectures": ["GPT2LMHeadModel"], "model_type": "gpt2", "vocab_size": 257,
            "n_positions": 64, "n_embd": 24, "n_head": 3, "n_layer": 3,
            "initializer_range": 0.5, "bos_token_id": 256, "eos_token_id": 256}
    llama = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "vocab_size": 258,
             "hidden_size": 24, "intermediate_size": 38, "num_hidden_layers": 5,
             "num_attention_heads": 4, "num_key_value_heads": 2, "max_position_embeddings": 64,
             "rms_norm_eps": 1e-5, "rope_theta": 10000.0, "initializer_range": 0.5,
             "tie_word_embeddings": False, "bos_token_id": 256, "eos_token_id": 256}
    # (model, [(stages, tensor-parallel ranks per stage)])
    return [(write_hf_model(tessel, work, "gpt2", gpt2, 5), [(2, 1)]),
            (write_hf_model(tessel, work, "llama", llama, 6), [(2, 1), (3, 1), (2, 2)])]


def run(command, env):
    return subprocess.run(command, capture_output=True, text=True, env=env, timeout=300)


def generate(command, env):
    r = run(command, env)
    if r.returncode != 0:
        fail(f"{' '.join(command[-14:])} exited {r.returncode}: {r.stderr[-2000:]}")
    return json.loads(r.stdout)["generated_ids"], r.stderr


def refused(command, env, message):
    r = run(command, env)
    said = (r.stdout + r.stderr).count(message)
    if r.returncode == 0 or said < 1:
        fail(f"{' '.join(command[-8:])}: exit {r.returncode}, expected the error {message!r}: "
             f"{r.stderr[-2000:]}")


def main():
    tessel, mpiexec, work = sys.argv[1:4]
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    env = dict(os.environ, TESSEL_NUM_THREADS="1", OMP_NUM_THREADS="1")

    def mpirun(n):
        return [mpiexec, "--oversubscribe", "--bind-to", "none", "-np", str(n)]

    try:
        for model, stage_counts in models(tessel, work):
            whole = stored_values(model)
            name = os.path.basename(model)
            gen = [tessel, "generate", "-m", model, "--prompt-ids", PROMPT, "-n", "20",
                   "--temp", "0", "--ignore-eos", "--format", "json"]
            want, _ = generate(gen, env)
            if len(set(want)) < 4:
                fail(f"{name}: only {len(set(want))} distinct ids {want}")
            for pp, tp in stage_counts:
                got, err = generate(mpirun(pp * tp) + gen + ["--pp", str(pp), "--tp", str(tp)],
                                    env)
                if got != want:
                    fail(f"{name}: pp {pp} tp {tp} ids {got} != one process's {want}")
                stage = (r"pipeline rank (\d+) runs blocks \[(\d+), (\d+)\) and read (\d+) weight "
                         r"values")
                said = re.findall(stage, err)
                read = ranks_read(err, stage, pp * tp, whole, fail, f"{name} pp {pp}")
                blocks = sorted({(int(a), int(b)) for _, a, b, _ in said})
                if [b[0] for b in blocks][1:] != [b[1] for b in blocks][:-1] or blocks[0][0] != 0:
                    fail(f"{name} pp {pp}: the stages' blocks {blocks} do not tile the model")
                print(f"generate --pp {pp} --tp {tp} {name}: {len(want)} ids equal to one process's, "
                      f"stages {blocks}, ranks read {read} of {whole} values")
        for name, weights in (("gpt2", "int8"), ("llama", "bf16")):
            gen = [tessel, "generate", "-m", os.path.join(work, name), "--prompt-ids", PROMPT,
                   "-n", "20", "--temp", "0", "--ignore-eos", "--format", "json", "--weights",
                   weights]
            want, _ = generate(gen, env)
            got, err = generate(mpirun(2) + gen + ["--pp", "2"], env)
            if got != want:
                fail(f"{name} --weights {weights}: pp 2 ids {got} != one process's {want}")
            converted = re.findall(rf"--weights {weights}: (\d+) of its matrices converted", err)
            if len(converted) != 2 or min(int(n) for n in converted) < 1:
                fail(f"{name} --weights {weights}: expected both stages to convert their "
                     f"matrices, got {converted}: {err[-2000:]}")
            print(f"generate --pp 2 --weights {weights} {name}: {len(want)} ids equal to one "
                  f"process's, the stages converted {converted} matrices")
        model = os.path.join(work, "gpt2")
        base = [tessel, "generate", "-m", model, "--prompt-ids", PROMPT, "-n", "3", "--format",
                "json"]
        refused(base + ["--pp", "4"], env, "--pp 4 stages for a model of 3 blocks")
        refused(base + ["--pp", "2", "--tp", "2"], env, "n_head = 3 is not divisible by tp = 2")
        print("generate --pp: 4 stages of 3 blocks, and 3 heads on --tp 2 refused")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
