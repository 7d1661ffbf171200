#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""`mpirun -np 2 tessel serve --pp 2 --pp-groups 2` with a KV pool far smaller than its requests
need: every request completes with one process's text.

A random GPT-2 of 3 blocks with a byte-level tokenizer. One-process `tessel serve --deterministic`
with an ample pool answers 10 concurrent greedy completions (prompts of 3 to 19 tokens, 12 tokens
each). The two-stage server with two groups of requests in flight gets --kv-cache-bytes for 14
blocks of 4 tokens on its larger stage (the ranks agree on the smaller count; one 40-token sequence
needs 11), while the requests together need about 60: the groups' schedulers preempt their own
sequences (recomputed later) while the other group's step is in flight. Every answer must equal
one process's, finish by length with 12 tokens, /metrics must count preemptions, rank 0 must say
two steps were in flight at once, and SIGTERM to rank 0 must end the job 0.
Usage: serve_pp_kv_pressure.py TESSEL MPIEXEC WORKDIR
"""
import json
import os
import re
import shutil
import signal
import sys
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from serve_http_common import (concurrently, mpi_ranks, start_server, stop_mpi_job,  # noqa: E402
                               write_hf_model)

PROMPTS = ["The sea", "Once upon a time", "abc abc abc x", "Q", "tessel serves", "a b c d e f g",
           "pressure on the pool", "zz", "groups in flight", "one more"]
TOKENS = 12
N_EMBD, BLOCK = 24, 4
FLAGS = ["--port", "0", "--block-size", str(BLOCK), "--max-batch-tokens", "16",
         "--max-model-len", "40", "--drain-timeout", "20", "--deterministic"]


def fail(message):
    print(f"serve --pp KV pressure test: {message}", file=sys.stderr)
    sys.exit(1)


def ask_all(url):
    """Every prompt at once; (text, finish_reason, completion_tokens) in the prompts' order."""

    def ask(i):
        body = json.dumps({"prompt": PROMPTS[i], "max_tokens": TOKENS, "temperature": 0,
                           "ignore_eos": True}).encode()
        req = urllib.request.Request(url + "/v1/completions", body,
                                     {"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=240) as r:
            answer = json.load(r)
        choice = answer["choices"][0]
        return choice["text"], choice["finish_reason"], answer["usage"]["completion_tokens"]

    return concurrently(ask, len(PROMPTS))


def metric(url, name):
    with urllib.request.urlopen(url + "/metrics", timeout=60) as r:
        text = r.read().decode()
    m = re.search(rf"^{re.escape(name)}(?:{{[^}}]*}})? (\S+)$", text, re.M)
    if not m:
        fail(f"/metrics has no {name}")
    return float(m.group(1))


def main():
    tessel, mpiexec, work = sys.argv[1:4]
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    env = dict(os.environ, TESSEL_NUM_THREADS="1", OMP_NUM_THREADS="1")
    server = None
    try:
        model = write_hf_model(tessel, work, "gpt2", {
            "architectures": ["GPT2LMHeadModel"], "model_type": "gpt2", "vocab_size": 257,
            "n_positions": 128, "n_embd": N_EMBD, "n_head": 3, "n_layer": 3,
            "initializer_range": 0.2, "bos_token_id": 256, "eos_token_id": 256}, 3)
        server, url = start_server([tessel, "serve", "-m", model] + FLAGS, env, fail)
        want = ask_all(url)
        if metric(url, "tessel:num_preemptions_total") != 0:
            fail("the one-process server with an ample pool preempted")
        server.send_signal(signal.SIGTERM)
        if server.wait(timeout=60) != 0:
            fail(f"the one-process server exited {server.returncode}")
        if any(isinstance(w, str) for w in want):
            fail(f"the one-process server failed: {want}")
        # f32 K and V of 2 blocks (the larger stage of 3) for 14 blocks of 4 tokens.
        pool = 14 * BLOCK * 2 * 2 * N_EMBD * 4
        mpirun = [mpiexec, "--oversubscribe", "--bind-to", "none", "-np", "2"]
        server, url = start_server(mpirun + [tessel, "serve", "-m", model, "--pp", "2",
                                             "--pp-groups", "2", "--kv-cache-bytes", str(pool)] +
                                   FLAGS, env, fail)
        got = ask_all(url)
        for i, p in enumerate(PROMPTS):
            if got[i] != want[i]:
                fail(f"{p!r}: pp 2 with 2 groups under KV pressure answered {got[i]!r}, one "
                     f"process {want[i]!r}")
            if got[i][1] != "length" or got[i][2] != TOKENS:
                fail(f"{p!r}: finished {got[i][1]} with {got[i][2]} tokens")
        preemptions = metric(url, "tessel:num_preemptions_total")
        if preemptions < 1:
            fail("no sequence was preempted: the pool is not under pressure")
        err = stop_mpi_job(server, mpi_ranks(server, 2, fail), fail)
        blocks = re.search(r"KV cache of (\d+) blocks", err)
        if not blocks or int(blocks.group(1)) > 14:
            fail(f"expected a pool of at most 14 blocks: {blocks and blocks.group(0)!r}")
        overlap = re.search(r"engine: (\d+) steps of 2 groups of requests, up to 2 in flight", err)
        if not overlap:
            fail(f"rank 0 did not run two groups' steps at once: {err[-2000:]}")
        print(f"serve --pp 2 --pp-groups 2, {blocks.group(1)} KV blocks: {len(PROMPTS)} "
              f"concurrent completions equal to one process's, {int(preemptions)} preemptions, "
              f"{overlap.group(1)} steps with up to 2 in flight, SIGTERM ended the job 0")
    finally:
        if server is not None and server.poll() is None:
            os.killpg(server.pid, signal.SIGKILL)
            server.wait()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
