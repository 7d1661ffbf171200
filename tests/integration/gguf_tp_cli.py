#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""`mpirun -np 2 tessel generate|serve --tp 2 -m model.gguf` equal one process on the same file.

A random GPT-2 (tied head, vocabulary 259 padded to 260) and a LLaMA with grouped-query heads
(untied head), both 64 wide with an MLP of 256 / 128 so that every row-parallel split falls on a
32-weight block, are quantized by `tessel quantize` to Q8_0 and F16 GGUF files (tokenizer inside).
For each: greedy ids of `generate --tp 2` equal one process's, and each rank says it read less than
the file's tensor bytes, some matrices as views of the mapping. Then `serve --tp 2` of the Q8_0
LLaMA answers concurrent completions with one process's `generate` text, and SIGTERM to rank 0
ends the job with 0. A LLaMA whose MLP of 96 would split inside a Q8_0 block is refused with the
error naming the tensor, width, block and tp.
Usage: gguf_tp_cli.py TESSEL MPIEXEC WORKDIR
"""
import json
import os
import re
import shutil
import signal
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from serve_http_common import (byte_vocab, completion, concurrent_completions,  # noqa: E402
                               generate_greedy, mpi_ranks, start_server, stop_mpi_job,
                               write_hf_model)

PROMPT = "5,9,12,40,77,3,101,250,7,19,64,2,33"


def fail(message):
    print(f"GGUF tp test: {message}", file=sys.stderr)
    sys.exit(1)


def write_model(tessel, work, name, config, seed):
    """`tessel init` of `config` with a byte-level tokenizer that has one merge and an end token
    (258 ids): GGUF stores a BPE tokenizer by its merges, so the file carries it."""
    model = write_hf_model(tessel, work, name, config, seed)
    vocab = byte_vocab()
    vocab["he"] = 256
    vocab["<|endoftext|>"] = 257
    with open(os.path.join(model, "vocab.json"), "w") as f:
        json.dump(vocab, f)
    with open(os.path.join(model, "merges.txt"), "w") as f:
        f.write("#version: 0.2\nh e\n")
    return model


def llama_config(intermediate):
    return {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "vocab_size": 258,
            "hidden_size": 64, "intermediate_size": intermediate, "num_hidden_layers": 2,
            "num_attention_heads": 4, "num_key_value_heads": 2, "max_position_embeddings": 64,
            "rms_norm_eps": 1e-5, "rope_theta": 10000.0, "initializer_range": 0.5,
            "tie_word_embeddings": False, "bos_token_id": 257, "eos_token_id": 257}


def quantize(tessel, model, kind, env):
    out = f"{model}-{kind}.gguf"
    r = subprocess.run([tessel, "quantize", "-m", model, "--type", kind, "-o", out, "-q"],
                       env=env, capture_output=True, text=True, timeout=300)
    if r.returncode != 0:
        fail(f"quantize {model} --type {kind} exited {r.returncode}: {r.stderr[-2000:]}")
    return out


def run(command, env):
    r = subprocess.run(command, capture_output=True, text=True, env=env, timeout=300)
    if r.returncode != 0:
        fail(f"{' '.join(command[-16:])} exited {r.returncode}: {r.stderr[-2000:]}")
    return json.loads(r.stdout)["generated_ids"], r.stderr


def shares(err):
    return {int(r): (int(a), int(b), int(v)) for r, a, b, v in re.findall(
        r"tensor-parallel rank (\d+) read (\d+) of the file's (\d+) tensor bytes \(its share; "
        r"(\d+) matrices as views", err)}


def generate_matches(tessel, mpirun, gguf, env):
    gen = [tessel, "generate", "-m", gguf, "--prompt-ids", PROMPT, "-n", "20", "--temp", "0",
           "--ignore-eos", "--format", "json"]
    want, _ = run(gen, env)
    got, err = run(mpirun + gen + ["--tp", "2"], env)
    name = os.path.basename(gguf)
    if got != want:
        fail(f"{name}: tp 2 ids {got} != one process's {want}")
    if len(set(want)) < 4:
        fail(f"{name}: only {len(set(want))} distinct ids {want}")
    read = shares(err)
    if set(read) != {0, 1}:
        fail(f"{name}: expected both ranks to say what they read, got {read}: {err[-2000:]}")
    for rank, (n, total, views) in read.items():
        if n >= total or views < 1:
            fail(f"{name}: rank {rank} read {n} of {total} bytes with {views} views: each rank "
                 "should read only its share, some of it in place")
    print(f"generate --tp 2 {name}: {len(want)} ids equal to one process's, ranks read "
          f"{ {r: v[0] for r, v in read.items()} } of {read[0][1]} tensor bytes")


def serve_matches(tessel, mpirun, gguf, env, flag="--tp", said=shares):
    """`serve FLAG 2` of `gguf` answers as one-process generate, both ranks say what they read (in
    the lines `said` parses), and SIGTERM to rank 0 ends the job 0."""
    prompts = ["The sea", "Once upon a time, there", "abc abc abc abc abc abc abc abc x"]
    expected = generate_greedy(tessel, gguf, prompts, 9, env)
    server, url = start_server(
        mpirun + [tessel, "serve", flag, "2", "-m", gguf, "--port", "0", "--block-size", "4",
                  "--max-batch-tokens", "11", "--drain-timeout", "20"], env, fail)
    try:
        texts = concurrent_completions(url, prompts, 9)
        for i, p in enumerate(prompts):
            if texts[i] != expected[i]:
                fail(f"{p!r}: server {texts[i]!r} != one-process generate {expected[i]!r}")
        if completion(url, prompts[1], 9) != expected[1]:
            fail("a repeated prompt (prefix-cache hit) gave other text")
        err = stop_mpi_job(server, mpi_ranks(server, 2, fail), fail)
        if set(said(err)) != {0, 1}:
            fail(f"serve: expected both ranks to say what they read: {err[-2000:]}")
    finally:
        if server.poll() is None:
            os.killpg(server.pid, signal.SIGKILL)
            server.wait()
    print(f"serve {flag} 2 {os.path.basename(gguf)}: 4 completions equal to one process's "
          "generate, SIGTERM on rank 0 ended the job 0")


def main():
    tessel, mpiexec, work = sys.argv[1:4]
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    env = dict(os.environ, TESSEL_NUM_THREADS="1", OMP_NUM_THREADS="1")
    mpirun = [mpiexec, "--oversubscribe", "--bind-to", "none", "-np", "2"]
    try:
        gpt2 = write_model(tessel, work, "gpt2", {
            "architectures": ["GPT2LMHeadModel"], "model_type": "gpt2", "vocab_size": 259,
            "n_positions": 64, "n_embd": 64, "n_head": 4, "n_layer": 2,
            "initializer_range": 0.5, "bos_token_id": 257, "eos_token_id": 257}, 5)
        llama = write_model(tessel, work, "llama", llama_config(128), 6)
        for model in (gpt2, llama):
            for kind in ("q8_0", "f16"):
                generate_matches(tessel, mpirun, quantize(tessel, model, kind, env), env)
        serve_matches(tessel, mpirun, f"{llama}-q8_0.gguf", env)

        narrow = quantize(tessel, write_model(tessel, work, "narrow", llama_config(96), 7),
                          "q8_0", env)
        r = subprocess.run(mpirun + [tessel, "generate", "--tp", "2", "-m", narrow, "--prompt-ids",
                                     PROMPT, "-n", "4", "--format", "json"],
                           capture_output=True, text=True, env=env, timeout=120)
        expected = ("blk.0.ffn_down.weight (q8_0, rows of 96 weights in blocks of 32) is "
                    "row-parallel, and tp = 2 splits its rows at weight 48")
        if r.returncode == 0 or expected not in r.stdout + r.stderr:
            fail(f"an MLP of 96 in Q8_0 over 2 ranks: exit {r.returncode}, expected "
                 f"'{expected}': {r.stderr[-2000:]}")
        print("generate --tp 2 of an MLP of 96 in Q8_0: refused, naming tensor, width, block, tp")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
