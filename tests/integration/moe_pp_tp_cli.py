#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""`tessel generate|serve --pp 2 --tp 2` of a mixture of experts equal one process.

The models of moe_tp_cli.py (a tied-head Mixtral of 2 layers, 6 SwiGLU experts of width 33: each
expert's columns split 17 + 16), a GPT-2-MoE of 4 blocks (MoE in blocks 1 and 3, 4 GELU experts
of 104, vocabulary 257 padded to 258), and a GGUF Q8_0 Mixtral (experts of 128). Checks:
- `mpirun -np 4 tessel generate --pp 2 --tp 2` gives one process's 24 greedy ids with --weights
  stored and int8, and Q8_0;
- every rank says which blocks its stage runs and how many expert bytes it holds: its tp columns of
  the experts of its stage's MoE layers only (the formula of moe_tp_cli.py per layer; a stage
  without an MoE layer holds none);
- `serve --pp 2 --tp 2` answers concurrent completions and a prefix-cache hit with one process's
  texts, token logprobs within 1e-4 (the sums over tp come in another order);
- experts of width 1 at --pp 2 --tp 2 are one error line for the job, before any weight is read.
Usage: moe_pp_tp_cli.py TESSEL MPIEXEC WORKDIR
"""
import copy
import os
import re
import shutil
import signal
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from generate_ep import GPT2_MOE  # noqa: E402
from gguf_ep_cli import mixtral as gguf_mixtral  # noqa: E402
from gguf_tp_cli import quantize, run, write_model  # noqa: E402
from moe_tp_cli import PROMPT, expert_bytes, refused, tied_mixtral  # noqa: E402
from serve_ep_http import reference, served_like_reference, server_command  # noqa: E402
from serve_http_common import (mpi_ranks, start_server, stop_mpi_job,  # noqa: E402
                               write_hf_model)

FLAGS = ["--pp", "2", "--tp", "2"]
NP = 4


def fail(message):
    print(f"moe --pp --tp test: {message}", file=sys.stderr)
    sys.exit(1)


def mpirun(mpiexec):
    return [mpiexec, "--oversubscribe", "--bind-to", "none", "-np", str(NP)]


def layers_of(config):
    return config.get("num_hidden_layers", config.get("n_layer"))


def moe_blocks(config, first, last):
    """The MoE blocks among [first, last): every Mixtral block; GPT-2-MoE's every moe_every-th."""
    if config["model_type"] == "mixtral":
        return last - first
    every = config["moe_every"]
    return sum(1 for b in range(first, last) if (b + 1) % every == 0)


def per_moe_layer(config, tp_rank):
    """f32 bytes of one MoE layer's experts on a rank holding tp_rank's columns (moe_tp_cli)."""
    one = dict(config)
    if config["model_type"] == "mixtral":
        one["num_hidden_layers"] = 1
    else:
        one["n_layer"], one["moe_every"] = 1, 1
    return expert_bytes(one, 2, tp_rank, 1)


def stages(err):
    """Each rank's stage blocks and the expert bytes it says it holds (0 when it says none)."""
    found = {}
    for line in err.splitlines():
        m = re.search(r"pipeline rank (\d+) runs blocks \[(\d+), (\d+)\)", line)
        if m:
            held = re.search(r"holds (\d+) expert bytes", line)
            found[int(m.group(1))] = (int(m.group(2)), int(m.group(3)),
                                      int(held.group(1)) if held else 0)
    if sorted(found) != list(range(NP)):
        fail(f"expected {NP} ranks to say their blocks, got {found}: {err[-2000:]}")
    return found


def check_bytes(name, err, expected_of):
    found = stages(err)
    total = 0
    for rank, (first, last, held) in sorted(found.items()):
        expected = expected_of(rank, first, last)
        if held != expected:
            fail(f"{name}: rank {rank} (blocks [{first}, {last})) holds {held} expert bytes, "
                 f"expected {expected}")
        total += held
    if total == 0:
        fail(f"{name}: no rank holds an expert: {found}")
    return [found[r][2] for r in sorted(found)]


def check_generate(tessel, mpiexec, env, model, config):
    name = os.path.basename(model)
    gen = [tessel, "generate", "-m", model, "--prompt-ids", PROMPT, "-n", "24", "--temp", "0",
           "--ignore-eos", "--format", "json"]
    for extra in [[], ["--weights", "int8"]]:
        want, _ = run(gen + extra, env)
        if len(set(want)) < 4:
            fail(f"{name}: only {len(set(want))} distinct ids {want}")
        got, err = run(mpirun(mpiexec) + gen + FLAGS + extra, env)
        if got != want:
            fail(f"{name} {' '.join(FLAGS + extra)}: ids {got} != one process's {want}")
    # Stage s = rank // 2 holds tp rank (rank % 2)'s columns of its MoE layers' experts.
    held = check_bytes(name, err, lambda rank, first, last: moe_blocks(config, first, last) *
                       per_moe_layer(config, rank % 2))
    print(f"generate {' '.join(FLAGS)} {name}: 24 ids equal to one process's (stored, int8); "
          f"expert bytes per rank {held} (one process {expert_bytes(config, 1, 0, 1)})")


def check_serve(tessel, mpiexec, env, model):
    name = os.path.basename(model)
    want = reference(tessel, env, model, name)
    server, url = start_server(
        server_command(model, mpirun(mpiexec) + [tessel, "serve"] + FLAGS), env, fail)
    try:
        count, worst = served_like_reference(url, want, f"{name} serve {' '.join(FLAGS)}", 1e-4)
        stop_mpi_job(server, mpi_ranks(server, NP, fail, name), fail, name)
    finally:
        if server.poll() is None:
            os.killpg(server.pid, signal.SIGKILL)
            server.wait()
    print(f"serve {' '.join(FLAGS)} {name}: {count} completions equal to one process's, "
          f"logprobs within {worst:.3g}")


def check_gguf(tessel, mpiexec, env, work):
    config = gguf_mixtral(6)
    config["intermediate_size"] = 128
    model = write_model(tessel, work, "gguf-mixtral", config, 7)
    gguf = quantize(tessel, model, "q8_0", env)
    gen = [tessel, "generate", "-m", gguf, "--prompt-ids", PROMPT, "-n", "24", "--temp", "0",
           "--ignore-eos", "--format", "json"]
    want, _ = run(gen, env)
    got, err = run(mpirun(mpiexec) + gen + FLAGS, env)
    if got != want:
        fail(f"Q8_0 Mixtral {' '.join(FLAGS)}: ids {got} != one process's {want}")
    # One layer's 3 stacks of 6 experts of 128 x 64 weights in Q8_0 (34 bytes per 32), half of
    # the columns per tp rank (two whole blocks of the down projection's rows).
    layer = 6 * 3 * 128 * 64 // 32 * 34
    held = check_bytes("Q8_0 Mixtral", err,
                       lambda rank, first, last: (last - first) * layer // 2)
    print(f"generate {' '.join(FLAGS)} Q8_0 GGUF Mixtral: 24 ids equal to one process's; expert "
          f"bytes per rank {held} (the file's stacks: {2 * layer})")


def main():
    tessel, mpiexec, work = sys.argv[1:4]
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    env = dict(os.environ, TESSEL_NUM_THREADS="1", OMP_NUM_THREADS="1")
    # 4 blocks, MoE in blocks 1 and 3: each stage holds its MoE block's experts (its tp columns).
    # The dense MLPs' down projections (104 columns, 52 / 52) cut an int8 activation block.
    gpt2_moe = copy.deepcopy(GPT2_MOE)
    gpt2_moe["n_layer"] = 4
    try:
        families = [
            (write_hf_model(tessel, work, "mixtral", tied_mixtral(6), 5), tied_mixtral(6)),
            (write_hf_model(tessel, work, "gpt2-moe", gpt2_moe, 6), gpt2_moe)]
        for model, config in families:
            check_generate(tessel, mpiexec, env, model, config)
        for model, _ in families:
            check_serve(tessel, mpiexec, env, model)
        check_gguf(tessel, mpiexec, env, work)
        narrow = write_hf_model(tessel, work, "narrow", tied_mixtral(4, width=1), 8)
        refused(mpirun(mpiexec) + [tessel, "generate", "--prompt-ids", PROMPT, "--format", "json",
                                   "-m", narrow] + FLAGS, env,
                "exceeds hidden_size 24 or intermediate_size 1")
        print("refusal: experts of width 1 at --pp 2 --tp 2")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
