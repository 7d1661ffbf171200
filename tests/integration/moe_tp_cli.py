#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""`tessel generate|serve --tp 2` and `--ep 2 --tp 2` of a mixture of experts equal one process.

Random models of odd sizes written by `tessel init`: a tied-head Mixtral (hidden 24, 6 heads over
2 KV heads, 6 SwiGLU experts of width 33, top-2: each expert's columns split 17 + 16) and a
GPT-2-MoE (width 26, 2 heads, 4 blocks of which 1 and 3 MoE, 4 GELU experts of 104, top-2,
vocabulary 257 padded to 258). Checks:
- `mpirun -np 2 tessel generate --tp 2` and `mpirun -np 4 tessel generate --ep 2 --tp 2` give
  one process's 24 greedy ids, with --weights stored and int8;
- every rank says how many expert bytes it holds, which must be its FFN columns of its experts
  (f32): the whole experts divided by tp (17 or 16 of 33 columns), and under ep also by ep, with
  GPT-2-MoE's output biases (added after the sum over tp) whole on every rank;
- `serve --tp 2` (np 2) and `serve --ep 2 --tp 2` (np 4) answer concurrent completions and a
  prefix-cache hit with one process's texts, token logprobs within 1e-4 (the sums over tp come
  in another order);
- a GGUF Mixtral (experts of 128: 64 columns per rank, two Q8_0 blocks) in Q8_0 under
  `generate --tp 2` and `--ep 2 --tp 2`, and in F32 under `--ep 2 --tp 2`, gives one process's
  ids, each rank holding its share of the expert stacks (1/2, 1/4);
- one error line for the job: experts of width 1 at --tp 2 (Mixtral's intermediate_size),
  heads that --tp 4 does not divide; a Q8_0 file whose
  expert width (96) --tp 2 would split inside a block is refused while loading, as the dense
  GGUF path refuses it (the same line from each rank).
Usage: moe_tp_cli.py TESSEL MPIEXEC WORKDIR
"""
import copy
import os
import re
import shutil
import signal
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from generate_ep import GPT2_MOE, mixtral  # noqa: E402
from gguf_ep_cli import mixtral as gguf_mixtral  # noqa: E402
from gguf_tp_cli import quantize, run, write_model  # noqa: E402
from serve_ep_http import reference, served_like_reference, server_command  # noqa: E402
from serve_http_common import (mpi_ranks, start_server, stop_mpi_job,  # noqa: E402
                               write_hf_model)

PROMPT = "5,9,12,40,77,3,101,250,7,7,7,64,33"


def fail(message):
    print(f"moe --tp test: {message}", file=sys.stderr)
    sys.exit(1)


def tied_mixtral(experts, width=33):
    c = mixtral(experts)
    c["tie_word_embeddings"] = True
    c["intermediate_size"] = width
    return c


def columns(width, tp, rank):
    """The balanced uneven split: the first width % tp ranks take one more column."""
    return width // tp + (1 if rank < width % tp else 0)


def expert_bytes(config, tp, tp_rank, ep):
    """f32 bytes of one rank's expert tensors: E / ep experts × its FFN columns."""
    if config["model_type"] == "mixtral":
        c, f, e = config["hidden_size"], config["intermediate_size"], config["num_local_experts"]
        layers = config["num_hidden_layers"]
        return 4 * layers * (e // ep) * 3 * c * columns(f, tp, tp_rank)
    c, e = config["n_embd"], config["num_experts"]
    f = 4 * c
    layers = config["n_layer"] // config["moe_every"]
    cols = columns(f, tp, tp_rank)
    return 4 * layers * (e // ep) * (2 * c * cols + cols + c)


def held(err, ranks):
    found = {int(r): int(b) for r, b in re.findall(r"rank (\d+) read .*holds (\d+) expert bytes",
                                                   err)}
    if sorted(found) != list(range(ranks)):
        fail(f"expected {ranks} ranks to say their expert bytes, got {found}: {err[-2000:]}")
    return found


def refused(command, env, message, lines=(1,)):
    r = subprocess.run(command, capture_output=True, text=True, env=env, timeout=120)
    said = (r.stdout + r.stderr).count(message)
    if r.returncode == 0 or said not in lines:
        fail(f"{' '.join(command[-10:])}: exit {r.returncode}, {message!r} printed {said} "
             f"times: {r.stderr[-2000:]}")


def check_generate(tessel, mpiexec, env, model, config):
    name = os.path.basename(model)
    gen = [tessel, "generate", "-m", model, "--prompt-ids", PROMPT, "-n", "24", "--temp", "0",
           "--ignore-eos", "--format", "json"]
    want, _ = run(gen, env)
    if len(set(want)) < 4:
        fail(f"{name}: only {len(set(want))} distinct ids {want}")
    want8, _ = run(gen + ["--weights", "int8"], env)
    for np_, flags, tp, ep in [(2, ["--tp", "2"], 2, 1), (4, ["--ep", "2", "--tp", "2"], 2, 2)]:
        mpirun = [mpiexec, "--oversubscribe", "--bind-to", "none", "-np", str(np_)]
        got, err = run(mpirun + gen + flags, env)
        if got != want:
            fail(f"{name} {' '.join(flags)}: ids {got} != one process's {want}")
        # int8: the dense matrices and routers converted with the whole rows' scales.
        got8, _ = run(mpirun + gen + flags + ["--weights", "int8"], env)
        if got8 != want8:
            fail(f"{name} {' '.join(flags)} --weights int8: ids {got8} != one process's {want8}")
        bytes_ = held(err, np_)
        for rank, b in bytes_.items():
            expected = expert_bytes(config, tp, rank % tp, ep)
            if b != expected:
                fail(f"{name} {' '.join(flags)}: rank {rank} holds {b} expert bytes, expected "
                     f"{expected} (one process: {expert_bytes(config, 1, 0, 1)})")
        print(f"generate {' '.join(flags)} {name}: 24 ids equal to one process's; expert bytes "
              f"per rank {[bytes_[r] for r in sorted(bytes_)]} (one process "
              f"{expert_bytes(config, 1, 0, 1)})")


def check_serve(tessel, mpiexec, env, model):
    name = os.path.basename(model)
    want = reference(tessel, env, model, name)
    for np_, flags in [(2, ["--tp", "2"]), (4, ["--ep", "2", "--tp", "2"])]:
        mpirun = [mpiexec, "--oversubscribe", "--bind-to", "none", "-np", str(np_)]
        server, url = start_server(server_command(model, mpirun + [tessel, "serve"] + flags), env,
                                   fail)
        try:
            count, worst = served_like_reference(url, want, f"{name} serve {' '.join(flags)}",
                                                 1e-4)
            stop_mpi_job(server, mpi_ranks(server, np_, fail, name), fail, name)
        finally:
            if server.poll() is None:
                os.killpg(server.pid, signal.SIGKILL)
                server.wait()
        print(f"serve {' '.join(flags)} {name}: {count} completions equal to one process's, "
              f"logprobs within {worst:.3g}")


def check_gguf(tessel, mpiexec, env, work):
    config = gguf_mixtral(6)
    config["intermediate_size"] = 128
    model = write_model(tessel, work, "gguf-mixtral", config, 7)
    # Q8_0: 34 bytes per 32 weights; F32: 4 per weight. 2 layers × 3 stacks of 6 experts of
    # 128 × 64 weights, divided by tp (and by ep).
    weights = 2 * 6 * 3 * 128 * 64
    for kind, stacks, layouts in [
            ("q8_0", weights // 32 * 34,
             [(2, ["--tp", "2"], 2), (4, ["--ep", "2", "--tp", "2"], 4)]),
            ("f32", weights * 4, [(4, ["--ep", "2", "--tp", "2"], 4)])]:
        gguf = quantize(tessel, model, kind, env)
        gen = [tessel, "generate", "-m", gguf, "--prompt-ids", PROMPT, "-n", "24", "--temp", "0",
               "--ignore-eos", "--format", "json"]
        want, _ = run(gen, env)
        for np_, flags, parts in layouts:
            mpirun = [mpiexec, "--oversubscribe", "--bind-to", "none", "-np", str(np_)]
            got, err = run(mpirun + gen + flags, env)
            if got != want:
                fail(f"{kind} Mixtral {' '.join(flags)}: ids {got} != one process's {want}")
            bytes_ = held(err, np_)
            if any(b != stacks // parts for b in bytes_.values()):
                fail(f"{kind} Mixtral {' '.join(flags)}: expert bytes per rank {bytes_}, expected "
                     f"{stacks // parts} each")
            print(f"generate {' '.join(flags)} {kind} GGUF Mixtral: 24 ids equal to one "
                  f"process's; expert bytes per rank {[bytes_[r] for r in sorted(bytes_)]} (the "
                  f"file's stacks: {stacks})")
    return gguf


def check_refusals(tessel, mpiexec, env, work, mixtral_model):
    narrow = write_hf_model(tessel, work, "narrow", tied_mixtral(4, width=1), 8)
    odd = quantize(tessel, write_model(tessel, work, "odd-gguf", gguf_mixtral(6), 9), "q8_0", env)
    gen = ["generate", "--prompt-ids", PROMPT, "--format", "json"]

    def mpirun(n):
        return [mpiexec, "--oversubscribe", "--bind-to", "none", "-np", str(n), tessel]

    refused(mpirun(2) + gen + ["-m", narrow, "--tp", "2"], env,
            "exceeds hidden_size 24 or intermediate_size 1")
    refused(mpirun(2) + ["serve", "-m", narrow, "--tp", "2", "--port", "0"], env,
            "exceeds hidden_size 24 or intermediate_size 1")
    refused(mpirun(4) + gen + ["-m", narrow, "--ep", "2", "--tp", "2"], env,
            "exceeds hidden_size 24 or intermediate_size 1")
    refused(mpirun(4) + gen + ["-m", mixtral_model, "--tp", "4"], env,
            "is not divisible by tp = 4")
    # Found while loading, as the dense GGUF path finds it: the same line from each rank.
    refused(mpirun(2) + gen + ["-m", odd, "--tp", "2"], env, "inside a block", lines=(1, 2))
    print("refusals: experts of width 1 (generate, serve, ep × tp), heads at --tp 4, a Q8_0 "
          "expert split inside a block")


def main():
    tessel, mpiexec, work = sys.argv[1:4]
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    env = dict(os.environ, TESSEL_NUM_THREADS="1", OMP_NUM_THREADS="1")
    # 4 blocks (MoE in 1 and 3): the dense MLPs' down projections (104 columns, 52 / 52) cut an
    # int8 activation block, which --weights int8 must round as one process does.
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
        check_refusals(tessel, mpiexec, env, work, families[0][0])
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
