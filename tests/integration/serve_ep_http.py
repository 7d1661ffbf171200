#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""`mpirun -np 2 tessel serve --ep 2` end to end on loopback, for Mixtral and GPT-2-MoE.

For each family (the random models of generate_ep.py): a one-process server with --deterministic
answers the prompts one at a time (the reference texts and token logprobs); then the two-rank
server, experts spread over the ranks, small blocks and a small token budget (prompts arrive in
chunks, decode steps batch several requests, so every step's collectives carry tokens of several
requests), gets the same prompts concurrently: its texts must equal the reference and one-process
`tessel generate`, its logprobs the reference's within 1e-5 (the training ep equivalence's
tolerance; they are equal bit for bit on this machine). One prompt again (a prefix-cache hit).
Then SIGTERM to rank 0's pid alone: it must drain, tell rank 1 to stop, and the whole job must exit
0 with no process of it left.
Usage: serve_ep_http.py TESSEL MPIEXEC WORKDIR
"""
import json
import os
import shutil
import signal
import subprocess
import sys
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from generate_ep import GPT2_MOE, mixtral  # noqa: E402
from serve_http_common import (concurrently, generate_greedy, mpi_ranks, start_server,  # noqa: E402
                               stop_mpi_job, write_hf_model)

PROMPTS = ["The sea", "Once upon a time, there", "abc abc abc abc abc abc abc abc x",
           "Experts, experts everywhere"]
TOKENS = 9


def fail(message):
    print(f"serve --ep test: {message}", file=sys.stderr)
    sys.exit(1)


def completion(url, prompt):
    """Greedy text and the chosen tokens' logprobs."""
    body = json.dumps({"prompt": prompt, "max_tokens": TOKENS, "temperature": 0,
                       "ignore_eos": True, "logprobs": 1}).encode()
    req = urllib.request.Request(url + "/v1/completions", body,
                                 {"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=120) as r:
        choice = json.load(r)["choices"][0]
    return choice["text"], choice["logprobs"]["token_logprobs"]


def server_command(model, extra):
    return extra + ["-m", model, "--port", "0", "--block-size", "4", "--max-batch-tokens", "11",
                    "--drain-timeout", "20", "--deterministic"]


def stop(server, pid, name):
    os.kill(pid, signal.SIGTERM)
    try:
        code = server.wait(timeout=90)
    except subprocess.TimeoutExpired:
        fail(f"{name}: the job did not end within 90 s of SIGTERM")
    err = server.stderr.read()
    if code != 0:
        fail(f"{name}: the job exited {code} after SIGTERM: {err[-3000:]}")
    return err


def reference(tessel, env, model, name):
    server, url = start_server(server_command(model, [tessel, "serve"]), env, fail)
    try:
        out = [completion(url, p) for p in PROMPTS]
        stop(server, server.pid, name)
    finally:
        if server.poll() is None:
            os.killpg(server.pid, signal.SIGKILL)
            server.wait()
    return out


def served_like_reference(url, want, what, bound):
    """PROMPTS sent concurrently to the server at URL, then PROMPTS[1] again (from the prefix
    cache), against WANT (reference()'s): the same texts, and logprobs within BOUND (0: bitwise).
    Returns the number of completions and the largest logprob difference."""
    got = concurrently(lambda i: completion(url, PROMPTS[i]), len(PROMPTS))
    got.append(completion(url, PROMPTS[1]))
    worst = 0.0
    for i, (text, logprobs) in zip(list(range(len(PROMPTS))) + [1], got):
        if text != want[i][0] or len(logprobs) != len(want[i][1]):
            fail(f"{what}, {PROMPTS[i]!r}: {text!r} != one process {want[i][0]!r}")
        worst = max([worst] + [abs(a - b) for a, b in zip(logprobs, want[i][1])])
    if worst > bound:
        fail(f"{what}: logprobs differ by up to {worst:.3g} (bound {bound:.3g})")
    return len(got), worst


def check_family(tessel, mpirun, env, model):
    name = os.path.basename(model)
    expected = generate_greedy(tessel, model, PROMPTS, TOKENS, env)
    want = reference(tessel, env, model, name)
    for i, p in enumerate(PROMPTS):
        if want[i][0] != expected[i]:
            fail(f"{name}, {p!r}: one-process server {want[i][0]!r} != generate {expected[i]!r}")
    server, url = start_server(server_command(model, mpirun + [tessel, "serve", "--ep", "2"]),
                               env, fail)
    worst = 0.0
    try:
        got = concurrently(lambda i: completion(url, PROMPTS[i]), len(PROMPTS))
        got.append(completion(url, PROMPTS[1]))  # now from the prefix cache
        asked = list(range(len(PROMPTS))) + [1]
        for i, (text, logprobs) in zip(asked, got):
            ref_text, ref_logprobs = want[i]
            if text != ref_text:
                fail(f"{name}, {PROMPTS[i]!r}: ep 2 {text!r} != one process {ref_text!r}")
            if len(logprobs) != len(ref_logprobs):
                fail(f"{name}: {len(logprobs)} logprobs != {len(ref_logprobs)}")
            for a, b in zip(logprobs, ref_logprobs):
                worst = max(worst, abs(a - b))
        if worst > 1e-5:
            fail(f"{name}: token logprobs differ from one process by up to {worst:.3g}")
        err = stop_mpi_job(server, mpi_ranks(server, 2, fail, name), fail, name)
        if "expert-parallel rank 1 stopped" not in err:
            fail(f"{name}: rank 1 did not report its stop: {err[-2000:]}")
    finally:
        if server.poll() is None:
            os.killpg(server.pid, signal.SIGKILL)
            server.wait()
    print(f"serve --ep 2, {name}: {len(got)} completions equal to one process's, logprobs within "
          f"{worst:.3g}, SIGTERM on rank 0 ended the job 0")


def main():
    tessel, mpiexec, work = sys.argv[1:4]
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    env = dict(os.environ, TESSEL_NUM_THREADS="1", OMP_NUM_THREADS="1")
    mpirun = [mpiexec, "--oversubscribe", "--bind-to", "none", "-np", "2"]
    try:
        check_family(tessel, mpirun, env, write_hf_model(tessel, work, "mixtral", mixtral(6), 5))
        check_family(tessel, mpirun, env, write_hf_model(tessel, work, "gpt2-moe", GPT2_MOE, 6))
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
