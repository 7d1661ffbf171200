#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""`tessel generate|serve --ep 2 --pp 2 --tp 2` (mpirun -np 8): all three inference axes at once.

The models of moe_pp_tp_cli.py (a tied-head Mixtral of 2 blocks, 6 SwiGLU experts of width 33,
split 17 + 16 over tp; a GPT-2-MoE of 2 blocks whose second is MoE, 4 GELU experts of 104, so stage
0 holds no expert) and a Q8_0 GGUF Mixtral (experts of 128, two Q8_0 blocks of down rows per tp
rank). World rank = stage · 4 + ep index · 2 + tp index. Checks:
- `generate --ep 2 --pp 2 --tp 2` gives one process's 24 greedy ids (the stored weights; the
  Mixtral also with --weights int8; the Q8_0 file);
- every rank says its blocks and expert bytes: its stage's MoE layers × half of their experts ×
  its tp columns of each (the formula of moe_tp_cli.py's expert_bytes with ep 2);
- `serve --ep 2 --pp 2 --tp 2 --deterministic` answers concurrent completions and a prefix-cache
  hit with one-process `serve --deterministic`'s texts, token logprobs within 1e-4 (the sums over
  tp come in another order), and SIGTERM to rank 0 ends the job 0 (all three models);
- a job of 4 ranks for --ep 2 --pp 2 --tp 2 is one error line naming the 8 it needs.
Usage: moe_ep_pp_tp_cli.py TESSEL MPIEXEC WORKDIR
"""
import copy
import os
import re
import shutil
import signal
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from generate_ep import GPT2_MOE  # noqa: E402
from gguf_ep_cli import mixtral as gguf_mixtral  # noqa: E402
from gguf_tp_cli import quantize, run, write_model  # noqa: E402
from moe_tp_cli import PROMPT, expert_bytes, refused, tied_mixtral  # noqa: E402
from serve_ep_http import reference, served_like_reference, server_command  # noqa: E402
from serve_http_common import (mpi_ranks, start_server, stop_mpi_job,  # noqa: E402
                               write_hf_model)

FLAGS = ["--ep", "2", "--pp", "2", "--tp", "2"]
NP = 8


def fail(message):
    print(f"moe --ep --pp --tp test: {message}", file=sys.stderr)
    sys.exit(1)


def mpirun(mpiexec, n=NP):
    return [mpiexec, "--oversubscribe", "--bind-to", "none", "-np", str(n)]


def moe_blocks(config, first, last):
    """The MoE blocks among [first, last): every Mixtral block; GPT-2-MoE's every moe_every-th."""
    if config["model_type"] == "mixtral":
        return last - first
    return sum(1 for b in range(first, last) if (b + 1) % config["moe_every"] == 0)


def per_moe_layer(config, tp_rank):
    """f32 bytes of one MoE layer's experts on a rank: half of them, tp_rank's columns of each."""
    one = dict(config)
    if config["model_type"] == "mixtral":
        one["num_hidden_layers"] = 1
    else:
        one["n_layer"], one["moe_every"] = 1, 1
    return expert_bytes(one, 2, tp_rank, 2)


def check_bytes(name, err, expected_of):
    """Each rank's (first block, last block, expert bytes) against expected_of(rank, first, last);
    the stage must be rank // 4."""
    found = {int(r): (int(a), int(b), int(e)) for r, a, b, e in re.findall(
        r"pipeline rank (\d+) runs blocks \[(\d+), (\d+)\) and .*holds (\d+) expert bytes", err)}
    if sorted(found) != list(range(NP)):
        fail(f"{name}: expected {NP} ranks to say their blocks and expert bytes, got {found}: "
             f"{err[-2000:]}")
    for rank, (first, last, held) in sorted(found.items()):
        expected = expected_of(rank, first, last)
        if (rank // 4 == 0) != (first == 0) or held != expected:
            fail(f"{name}: rank {rank} runs blocks [{first}, {last}) holding {held} expert bytes, "
                 f"expected stage {rank // 4} with {expected}")
    if sum(v[2] for v in found.values()) == 0:
        fail(f"{name}: no rank holds an expert: {found}")
    return [found[r][2] for r in sorted(found)]


def check_generate(tessel, mpiexec, env, model, expected_of, extras):
    name = os.path.basename(model)
    gen = [tessel, "generate", "-m", model, "--prompt-ids", PROMPT, "-n", "24", "--temp", "0",
           "--ignore-eos", "--format", "json"]
    for extra in extras:
        want, _ = run(gen + extra, env)
        if len(set(want)) < 4:
            fail(f"{name}: only {len(set(want))} distinct ids {want}")
        got, err = run(mpirun(mpiexec) + gen + FLAGS + extra, env)
        if got != want:
            fail(f"{name} {' '.join(FLAGS + extra)}: ids {got} != one process's {want}")
    held = check_bytes(name, err, expected_of)
    print(f"generate {' '.join(FLAGS)} {name} {extras}: 24 ids equal to one process's; expert "
          f"bytes per rank {held}")


def check_serve(tessel, mpiexec, env, model):
    name = os.path.basename(model)
    want = reference(tessel, env, model, name)
    server, url = start_server(
        server_command(model, mpirun(mpiexec) + [tessel, "serve"] + FLAGS), env, fail)
    try:
        count, worst = served_like_reference(url, want, f"{name} serve {' '.join(FLAGS)}", 1e-4)
        err = stop_mpi_job(server, mpi_ranks(server, NP, fail, name), fail, name)
        for rank in range(1, NP):
            if f"pipeline rank {rank} stopped" not in err:
                fail(f"{name}: rank {rank} did not report its stop: {err[-2000:]}")
    finally:
        if server.poll() is None:
            os.killpg(server.pid, signal.SIGKILL)
            server.wait()
    print(f"serve {' '.join(FLAGS)} {name}: {count} completions equal to one process's, "
          f"logprobs within {worst:.3g}; SIGTERM to rank 0 ended the job 0")


def main():
    tessel, mpiexec, work = sys.argv[1:4]
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    env = dict(os.environ, TESSEL_NUM_THREADS="1", OMP_NUM_THREADS="1")
    gpt2_moe = copy.deepcopy(GPT2_MOE)
    try:
        families = [
            (write_hf_model(tessel, work, "mixtral", tied_mixtral(6), 5), tied_mixtral(6),
             [[], ["--weights", "int8"]]),
            (write_hf_model(tessel, work, "gpt2-moe", gpt2_moe, 6), gpt2_moe, [[]])]
        for model, config, extras in families:
            check_generate(tessel, mpiexec, env, model,
                           lambda rank, first, last, c=config: moe_blocks(c, first, last) *
                           per_moe_layer(c, rank % 2), extras)
        for model, _, _ in families:
            check_serve(tessel, mpiexec, env, model)
        config = gguf_mixtral(6)
        config["intermediate_size"] = 128
        gguf = quantize(tessel, write_model(tessel, work, "gguf-mixtral", config, 7), "q8_0", env)
        # One layer's 3 stacks of 6 experts of 128 x 64 weights in Q8_0 (34 bytes per 32): a rank
        # holds 3 of the experts, half of the columns of each.
        layer = 6 * 3 * 128 * 64 // 32 * 34
        check_generate(tessel, mpiexec, env, gguf,
                       lambda rank, first, last: (last - first) * layer // 4, [[]])
        check_serve(tessel, mpiexec, env, gguf)
        refused(mpirun(mpiexec, 4) + [tessel, "generate", "--prompt-ids", PROMPT, "--format",
                                      "json", "-m", families[0][0]] + FLAGS, env,
                "needs 8 ranks, but the job has 4", lines=(1, 2, 3, 4))
        print("refusal: 4 ranks for --ep 2 --pp 2 --tp 2")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
