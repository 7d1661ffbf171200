#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""`mpirun -np 2 tessel serve --tp 2` end to end on loopback.

Writes a small random GPT-2 with a byte-level tokenizer (`tessel init`), starts the two-rank server
on a free port, sends concurrent greedy completions and requires each text to equal one-rank
`tessel generate` for the same prompt, then sends SIGTERM to rank 0 alone: it must drain, tell rank
1 to stop, and the whole job must exit 0 with no process of it left. Each rank loads the model
directory by reading only its share of the safetensors file: both say how many weight values they
read, each fewer than the file holds, together at least all of them. Also: a model whose 3 heads
cannot be split over 2 ranks is refused with one error message and a non-zero exit.
Usage: serve_tp_http.py TESSEL MPIEXEC WORKDIR
"""
import os
import shutil
import signal
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from serve_http_common import (completion, concurrent_completions, generate_greedy,  # noqa: E402
                               mpi_ranks, ranks_read, start_server, stored_values, stop_mpi_job,
                               write_hf_model)


def fail(message):
    print(f"serve --tp test: {message}", file=sys.stderr)
    sys.exit(1)


def write_model(tessel, work, name, heads, family="gpt2"):
    if family == "gpt2":
        config = {"architectures": ["GPT2LMHeadModel"], "model_type": "gpt2", "vocab_size": 257,
                  "n_positions": 128, "n_embd": 24, "n_head": heads, "n_layer": 2,
                  "initializer_range": 0.2, "bos_token_id": 256, "eos_token_id": 256}
    else:
        # Grouped-query heads (6 query, 2 key/value: one of each per rank), an untied head whose
        # 258 rows split evenly.
        config = {"architectures": ["LlamaForCausalLM"], "model_type": "llama",
                  "vocab_size": 258, "hidden_size": 24, "intermediate_size": 38,
                  "num_hidden_layers": 2, "num_attention_heads": heads, "num_key_value_heads": 2,
                  "max_position_embeddings": 128, "rms_norm_eps": 1e-5, "rope_theta": 10000.0,
                  "initializer_range": 0.2, "tie_word_embeddings": False,
                  "bos_token_id": 256, "eos_token_id": 256}
    return write_hf_model(tessel, work, name, config, 3)


def serve_and_compare(tessel, mpirun, env, model):
    """Completions from the two-rank server equal one-rank generate; SIGTERM ends the job 0."""
    prompts = ["The sea", "Once upon a time, there", "abc abc abc abc abc abc abc abc x"]
    expected = generate_greedy(tessel, model, prompts, 9, env)
    server, url = start_server(
        mpirun + [tessel, "serve", "--tp", "2", "-m", model, "--port", "0",
                  "--block-size", "4", "--max-batch-tokens", "11", "--drain-timeout", "20"],
        env, fail)
    try:
        texts = concurrent_completions(url, prompts, 9)
        for i, p in enumerate(prompts):
            if texts[i] != expected[i]:
                fail(f"{p!r}: server {texts[i]!r} != one-rank generate {expected[i]!r}")
        # The same prompts again: now from the prefix cache.
        if completion(url, prompts[1], 9) != expected[1]:
            fail("a repeated prompt (prefix-cache hit) gave other text")

        ranks = mpi_ranks(server, 2, fail)
        err = stop_mpi_job(server, ranks, fail)
        if "tensor-parallel rank 1 stopped" not in err:
            fail(f"rank 1 did not report its stop: {err[-2000:]}")
        whole = stored_values(model)
        read = ranks_read(err, r"tensor-parallel rank (\d+) read (\d+) weight values", 2, whole,
                          fail)
    finally:
        if server.poll() is None:
            os.killpg(server.pid, signal.SIGKILL)
            server.wait()
    print(f"serve --tp 2, {os.path.basename(model)}: 4 completions equal to one rank's, ranks "
          f"read {read} of {whole} weight values, SIGTERM on rank 0 ended the job 0")


def main():
    tessel, mpiexec, work = sys.argv[1:4]
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    env = dict(os.environ, TESSEL_NUM_THREADS="1", OMP_NUM_THREADS="1")
    mpirun = [mpiexec, "--oversubscribe", "--bind-to", "none", "-np", "2"]
    try:
        # 3 heads over 2 ranks: refused before any weight is read, one message for the job.
        odd = write_model(tessel, work, "odd", 3)
        r = subprocess.run(mpirun + [tessel, "serve", "--tp", "2", "-m", odd, "--port", "0"],
                           capture_output=True, text=True, env=env, timeout=120)
        said = (r.stdout + r.stderr).count("n_head = 3 is not divisible by tp = 2")
        if r.returncode == 0 or said != 1:
            fail(f"3 heads on 2 ranks: exit {r.returncode}, the error printed {said} times: "
                 f"{r.stderr[-2000:]}")

        serve_and_compare(tessel, mpirun, env, write_model(tessel, work, "model", 4))
        serve_and_compare(tessel, mpirun, env, write_model(tessel, work, "llama", 6, "llama"))
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
