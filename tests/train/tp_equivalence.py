#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Tensor (and sequence) parallel training equals one rank: `mpirun -np N tessel train --tp N
[--sp]` against `tessel train` on the same data and initialisation, for 20 steps. Every step's loss
and the final parameters (gathered into the usual checkpoint) must agree to 1e-5 (relative); so
must tp=2 with --sp and dropout on (0.1), dp x tp (--dp 2 --tp 2), and a tp=2 checkpoint
resumed at tp=4 with --sp. Greedy `tessel generate --tp N` emits the ids of one rank. The
vocabulary (257) is padded on every tp size.

Usage: tp_equivalence.py TESSEL MPIRUN WORKDIR TP [TP ...]
"""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "common"))
from tessel_runs import (check_generate_tp, check_same_tensors, compare_losses, compare_params, fail,  # noqa: E402
                         final_params, gpt2_config, losses, mpi_prefix, prepare_workdir, run,
                         seed_resume, single_thread_env, train_sets, write_json)


def compare(ref_dir, dir_, what, steps):
    worst = compare_losses(ref_dir, dir_, what, steps)
    pa, pb = final_params(ref_dir, steps), final_params(dir_, steps)
    check_same_tensors(pa, pb, what)
    rel_p = compare_params(pa, pb, what)[0]
    print(f"{what}: 20-step losses within {worst:.1e}, final parameters within {rel_p:.1e}")


def main():
    tessel, mpirun, work = sys.argv[1], sys.argv[2], sys.argv[3]
    tps = [int(x) for x in sys.argv[4:]]
    vocab = prepare_workdir(tessel, work)
    cfg = gpt2_config(vocab, n_positions=32, n_embd=24, n_layer=2, n_head=4)
    config = write_json(os.path.join(work, "config.json"), cfg)
    steps = 20
    # seq_len 15: the sequence splits unevenly over 2 and 4 ranks under --sp.
    common = ["train"] + train_sets(config, os.path.join(work, "data"), steps, seq_len=15,
                                    extra=["checkpoint.interval=10", "optim.grad_clip=0.5"])
    env = single_thread_env()
    ref = os.path.join(work, "tp1")
    run([tessel] + common + ["--set", "train.micro_batch=6", "--set", "checkpoint.dir=" + ref], env=env)
    mpi = mpi_prefix(mpirun)
    for tp in tps:
        for sp in (False, True):
            what = f"tp={tp}" + (" sp" if sp else "")
            d = os.path.join(work, f"tp{tp}" + ("_sp" if sp else ""))
            p = run(mpi + ["-np", str(tp), tessel] + common + ["--tp", str(tp)] + (["--sp"] if sp else []) +
                    ["--set", "train.micro_batch=6", "--set", "checkpoint.dir=" + d], env=env)
            if "padded to" not in p.stdout:
                fail(f"{what}: no line announcing the padded vocabulary")
            compare(ref, d, what, steps)
    # Dropout on: under --sp each rank draws its piece of the one-process mask (resid and embd
    # dropouts; the fused attention applies no dropout on its probabilities).
    drop_config = write_json(os.path.join(work, "config_dropout.json"),
                             dict(cfg, resid_pdrop=0.1, embd_pdrop=0.1))
    drop_common = [a.replace(config, drop_config) if a.startswith("model.config=") else a
                   for a in common] + ["--set", "train.micro_batch=6"]
    drop_ref = os.path.join(work, "tp1_dropout")
    run([tessel] + drop_common + ["--set", "checkpoint.dir=" + drop_ref], env=env)
    d = os.path.join(work, f"tp{tps[0]}_sp_dropout")
    run(mpi + ["-np", str(tps[0]), tessel] + drop_common + ["--tp", str(tps[0]), "--sp",
                                                            "--set", "checkpoint.dir=" + d], env=env)
    if losses(drop_ref)[steps] == losses(ref)[steps]:
        fail("dropout 0.1 left the one-rank losses unchanged: no mask was applied")
    compare(drop_ref, d, f"tp={tps[0]} sp dropout 0.1", steps)
    # dp x tp: the dp ranks split each batch, the tp ranks of a dp rank read the same rows.
    d = os.path.join(work, "dp2_tp2")
    run(mpi + ["-np", "4", tessel] + common + ["--dp", "2", "--tp", "2", "--set", "train.micro_batch=3",
                                               "--set", "checkpoint.dir=" + d], env=env)
    compare(ref, d, "dp=2 x tp=2", steps)
    # Checkpoints hold full tensors: tp=2's step 10 resumed at tp=4 with --sp continues the same run.
    a, b = tps[0], tps[-1]
    d = os.path.join(work, f"resume_tp{a}_to_tp{b}_sp")
    seed_resume(os.path.join(work, f"tp{a}"), "step_000010", d)
    run(mpi + ["-np", str(b), tessel, "train", "--resume", d, "--tp", str(b), "--sp"], env=env)
    compare(ref, d, f"resume tp={a} -> tp={b} sp", steps)
    check_generate_tp(tessel, mpi, work, cfg, tps, [5, 9, 12, 40, 77], env)


if __name__ == "__main__":
    main()
