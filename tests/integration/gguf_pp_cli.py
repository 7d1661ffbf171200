#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""`mpirun -np 2 tessel generate --pp 2 -m model.gguf` reads only each rank's stage and equals one
process on the same file.

A random GPT-2 of 3 blocks (tied head: the last stage reads token_embd too, vocabulary 259) and a
LLaMA of 5 blocks (grouped-query heads, untied head, an MLP of 96), both 256 wide so the k-quants
fit, are quantized by `tessel quantize` to F16, Q8_0 and Q4_K_M GGUF files. For each file: greedy
ids of `generate --pp 2` equal one process's, both ranks say which blocks they run and how many
of the file's tensor bytes they read (each less than the file, together at least all of it once
the tied embedding is counted, some matrices as views of the mapping). The Q8_0 LLaMA also runs as
--pp 2 --tp 2 on 4 ranks (MLP of 192, split on Q8_0 blocks) and with --weights int8 under --pp 2,
both equal to their one-process counterparts. Then `serve --pp 2` of the Q4_K_M LLaMA answers
concurrent completions with one process's `generate` text, and SIGTERM to rank 0 ends the job 0.
A Q8_0 Mixtral (3 experts, stacked in llama.cpp's layout) under --pp 2 equals one process too.
Usage: gguf_pp_cli.py TESSEL MPIEXEC WORKDIR
"""
import json
import os
import re
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gguf_tp_cli import quantize, serve_matches, write_model  # noqa: E402

PROMPT = "5,9,12,40,77,3,101,250,7,19,64,2,33"


def fail(message):
    print(f"GGUF pp test: {message}", file=sys.stderr)
    sys.exit(1)


def run(command, env):
    r = subprocess.run(command, capture_output=True, text=True, env=env, timeout=300)
    if r.returncode != 0:
        fail(f"{' '.join(command[-18:])} exited {r.returncode}: {r.stderr[-2000:]}")
    return json.loads(r.stdout)["generated_ids"], r.stderr


def stages(err):
    """rank -> (first block, last block, bytes read, file bytes, views)."""
    return {int(r): tuple(int(x) for x in rest) for r, *rest in re.findall(
        r"pipeline rank (\d+) runs blocks \[(\d+), (\d+)\) and read (\d+) of the file's (\d+) "
        r"tensor bytes \(its stage; (\d+) matrices as views", err)}


def peaks(err):
    """rank -> peak resident set (VmHWM), from the memory line every rank prints."""
    return {int(r): f"{v} {u}" for r, v, u in re.findall(r"rank (\d+) peak RSS ([\d.]+) (\w+) "
                                                           r"\(VmHWM\)", err)}


def pp_matches(tessel, mpiexec, gguf, env, tp=1, extra=()):
    gen = [tessel, "generate", "-m", gguf, "--prompt-ids", PROMPT, "-n", "20", "--temp", "0",
           "--ignore-eos", "--format", "json", *extra]
    want, _ = run(gen, env)
    if len(set(want)) < 4:
        fail(f"{os.path.basename(gguf)}: only {len(set(want))} distinct ids {want}")
    ranks = 2 * tp
    mpirun = [mpiexec, "--oversubscribe", "--bind-to", "none", "-np", str(ranks)]
    got, err = run(mpirun + gen + ["--pp", "2", "--tp", str(tp)], env)
    name = " ".join([os.path.basename(gguf), *extra])
    if got != want:
        fail(f"{name}: --pp 2 ids {got} != one process's {want}")
    read = stages(err)
    if set(read) != set(range(ranks)):
        fail(f"{name}: expected every rank to say what it read, got {read}: {err[-2000:]}")
    blocks = sorted({(a, b) for a, b, _, _, _ in read.values()})
    if len(blocks) != 2 or blocks[0][0] != 0 or blocks[0][1] != blocks[1][0]:
        fail(f"{name}: the stages' blocks {blocks} do not tile the model")
    total = read[0][3]
    for rank, (_, _, n, _, views) in read.items():
        if n >= total or n <= 0:
            fail(f"{name}: rank {rank} read {n} of the file's {total} tensor bytes: each rank "
                 "should read its stage only")
    if tp == 1 and sum(n for _, _, n, _, _ in read.values()) < total * 0.9:
        fail(f"{name}: the stages read {read} of {total} bytes together: not the whole model")
    if tp == 1 and not any(v >= 1 for *_, v in read.values()):
        fail(f"{name}: no matrix bound as a view of the mapped file: {read}")
    print(f"generate --pp 2 --tp {tp} {name}: {len(want)} ids equal to one process's, stages "
          f"{blocks}, ranks read { {r: v[2] for r, v in read.items()} } of {total} tensor bytes, "
          f"peak resident { peaks(err) }")


def mixtral_matches(tessel, mpiexec, work, env):
    """A Mixtral file: each stage binds its blocks' expert stacks to the file's Q8_0 bytes."""
    mixtral = write_model(tessel, work, "mixtral", {
        "architectures": ["MixtralForCausalLM"], "model_type": "mixtral", "vocab_size": 258,
        "hidden_size": 64, "intermediate_size": 64, "num_hidden_layers": 2,
        "num_attention_heads": 4, "num_key_value_heads": 2, "max_position_embeddings": 64,
        "rms_norm_eps": 1e-5, "rope_theta": 10000.0, "num_local_experts": 3,
        "num_experts_per_tok": 2, "router_aux_loss_coef": 0.01, "tie_word_embeddings": False,
        "initializer_range": 0.3, "bos_token_id": 257, "eos_token_id": 257}, 8)
    pp_matches(tessel, mpiexec, quantize(tessel, mixtral, "q8_0", env), env)


def main():
    tessel, mpiexec, work = sys.argv[1:4]
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    env = dict(os.environ, TESSEL_NUM_THREADS="1", OMP_NUM_THREADS="1")
    llama = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "vocab_size": 258,
             "hidden_size": 256, "intermediate_size": 96, "num_hidden_layers": 5,
             "num_attention_heads": 4, "num_key_value_heads": 2, "max_position_embeddings": 64,
             "rms_norm_eps": 1e-5, "rope_theta": 10000.0, "initializer_range": 0.5,
             "tie_word_embeddings": False, "bos_token_id": 257, "eos_token_id": 257}
    try:
        gpt2 = write_model(tessel, work, "gpt2", {
            "architectures": ["GPT2LMHeadModel"], "model_type": "gpt2", "vocab_size": 259,
            "n_positions": 64, "n_embd": 256, "n_head": 4, "n_layer": 3,
            "initializer_range": 0.5, "bos_token_id": 257, "eos_token_id": 257}, 5)
        small = write_model(tessel, work, "llama", llama, 6)
        for model in (gpt2, small):
            for kind in ("f16", "q8_0", "q4_k_m"):
                pp_matches(tessel, mpiexec, quantize(tessel, model, kind, env), env)
        wide = write_model(tessel, work, "wide", dict(llama, intermediate_size=192), 7)
        q8 = quantize(tessel, wide, "q8_0", env)
        pp_matches(tessel, mpiexec, q8, env, tp=2)
        pp_matches(tessel, mpiexec, q8, env, extra=("--weights", "int8"))
        mixtral_matches(tessel, mpiexec, work, env)
        serve_matches(tessel, [mpiexec, "--oversubscribe", "--bind-to", "none", "-np", "2"],
                      f"{small}-q4_k_m.gguf", env, "--pp", stages)
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
