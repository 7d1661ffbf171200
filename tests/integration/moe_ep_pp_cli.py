#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""`tessel generate|serve --ep 2 --pp 2` (mpirun -np 4): experts spread inside pipeline stages.

Random models of generate_ep.py (a Mixtral of 2 blocks, 6 experts, both blocks MoE; a GPT-2-MoE of
2 blocks whose second is MoE, so stage 0 holds no expert) and a Q8_0 GGUF Mixtral (gguf_ep_cli.py's,
experts of 128). Checks:
- `generate --ep 2 --pp 2` gives one process's 24 greedy ids (stored weights; the Mixtral also with
  --weights int8, the dense matrices converted per stage);
- every rank says its blocks and expert bytes: its stage's MoE layers × half of their experts;
- `serve --ep 2 --pp 2 --deterministic` (the default two groups of requests in flight) answers
  concurrent completions and a prefix-cache hit with the texts and token logprobs of one-process
  `serve --deterministic`, bitwise (nothing is summed in another order), and SIGTERM to rank 0's
  pid ends the job 0; the Q8_0 GGUF Mixtral the same with --pp-microbatches 2;
- refused with one line: --ep 2 --pp 3 of a model of 2 blocks (--ep 2 --pp 2 --tp 2 runs in
  moe_ep_pp_tp_cli.py).
Usage: moe_ep_pp_cli.py TESSEL MPIEXEC WORKDIR
"""
import os
import re
import shutil
import signal
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from generate_ep import GPT2_MOE, mixtral  # noqa: E402
from gguf_ep_cli import mixtral as gguf_mixtral  # noqa: E402
from gguf_tp_cli import quantize, run, write_model  # noqa: E402
from moe_tp_cli import refused  # noqa: E402
from serve_ep_http import reference, served_like_reference, server_command  # noqa: E402
from serve_http_common import (mpi_ranks, start_server, stop_mpi_job,  # noqa: E402
                               write_hf_model)

PROMPT = "5,9,12,40,77,3,101,250,7,7,7,64,33"
FLAGS = ["--ep", "2", "--pp", "2"]


def fail(message):
    print(f"moe --ep --pp test: {message}", file=sys.stderr)
    sys.exit(1)


def mpirun(mpiexec, n):
    return [mpiexec, "--oversubscribe", "--bind-to", "none", "-np", str(n)]


def stage_expert_bytes(err):
    """{rank: (first block, last block, expert bytes)} from each rank's line."""
    found = {int(r): (int(a), int(b), int(e)) for r, a, b, e in re.findall(
        r"pipeline rank (\d+) runs blocks \[(\d+), (\d+)\) and .*holds (\d+) expert bytes", err)}
    if sorted(found) != [0, 1, 2, 3]:
        fail(f"expected 4 ranks to say their blocks and expert bytes, got {found}: {err[-2000:]}")
    return found


def check_generate(tessel, mpiexec, env, model, moe_blocks, per_layer, extra=()):
    """moe_blocks: the MoE blocks; per_layer: one process's expert bytes of one MoE layer."""
    name = os.path.basename(model)
    gen = [tessel, "generate", "-m", model, "--prompt-ids", PROMPT, "-n", "24", "--temp", "0",
           "--ignore-eos", "--format", "json"] + list(extra)
    want, _ = run(gen, env)
    if len(set(want)) < 4:
        fail(f"{name}: only {len(set(want))} distinct ids {want}")
    got, err = run(mpirun(mpiexec, 4) + gen + FLAGS, env)
    if got != want:
        fail(f"{name} {' '.join(extra)}: --ep 2 --pp 2 ids {got} != one process's {want}")
    said = stage_expert_bytes(err)
    for rank, (first, last, held) in said.items():
        expected = sum(per_layer // 2 for b in moe_blocks if first <= b < last)
        if rank // 2 != (0 if first == 0 else 1) or held != expected:
            fail(f"{name}: rank {rank} runs blocks [{first}, {last}) holding {held} expert bytes, "
                 f"expected stage {rank // 2} with {expected}")
    print(f"generate --ep 2 --pp 2 {name} {' '.join(extra)}: 24 ids equal to one process's; "
          f"(blocks, expert bytes) per rank {[said[r] for r in sorted(said)]}")


def check_serve(tessel, mpiexec, env, model, extra=()):
    name = os.path.basename(model)
    want = reference(tessel, env, model, name)
    command = server_command(model, mpirun(mpiexec, 4) + [tessel, "serve"] + FLAGS + list(extra))
    server, url = start_server(command, env, fail)
    try:
        count, _ = served_like_reference(url, want, f"{name} serve --ep 2 --pp 2", 0.0)
        err = stop_mpi_job(server, mpi_ranks(server, 4, fail, name), fail, name)
        for rank in (1, 2, 3):
            if f"pipeline rank {rank} stopped" not in err:
                fail(f"{name}: rank {rank} did not report its stop: {err[-2000:]}")
    finally:
        if server.poll() is None:
            os.killpg(server.pid, signal.SIGKILL)
            server.wait()
    print(f"serve --ep 2 --pp 2 {' '.join(extra)} {name}: {count} completions and logprobs "
          f"bitwise one process's; SIGTERM to rank 0 ended the job 0")


def main():
    tessel, mpiexec, work = sys.argv[1:4]
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    env = dict(os.environ, TESSEL_NUM_THREADS="1", OMP_NUM_THREADS="1")
    try:
        mix = write_hf_model(tessel, work, "mixtral", mixtral(6), 5)
        moe = write_hf_model(tessel, work, "gpt2-moe", GPT2_MOE, 6)
        # f32 bytes of one MoE layer's experts: Mixtral 6 × 3 × 24 × 33; GPT-2-MoE 4 × (2 × 26 ×
        # 104 + 104 + 26).
        check_generate(tessel, mpiexec, env, mix, [0, 1], 4 * 6 * 3 * 24 * 33)
        check_generate(tessel, mpiexec, env, mix, [0, 1], 4 * 6 * 3 * 24 * 33,
                       ["--weights", "int8"])
        check_generate(tessel, mpiexec, env, moe, [1], 4 * 4 * (2 * 26 * 104 + 104 + 26))
        check_serve(tessel, mpiexec, env, mix)
        check_serve(tessel, mpiexec, env, moe)
        config = gguf_mixtral(6)
        config["intermediate_size"] = 128
        gguf = quantize(tessel, write_model(tessel, work, "gguf-mixtral", config, 7), "q8_0", env)
        check_generate(tessel, mpiexec, env, gguf, [0, 1], 6 * 3 * 128 * 64 // 32 * 34)
        check_serve(tessel, mpiexec, env, gguf, ["--pp-microbatches", "2"])
        gen = ["generate", "--prompt-ids", PROMPT, "--format", "json", "-m", mix]
        refused(mpirun(mpiexec, 6) + [tessel] + gen + ["--ep", "2", "--pp", "3"], env,
                "--pp 3 stages for a model of 2 blocks")
        print("refusal: more stages than blocks")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
