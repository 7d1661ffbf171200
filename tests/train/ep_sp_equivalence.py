#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Mixture-of-experts layers under sequence parallelism equal one rank: `mpirun -np N tessel train
--tp 2 --sp [--ep 2] [--etp]` against `tessel train` on one rank with one micro-batch per
data-parallel rank (grad_accum = dp). Between the tp regions each tp rank holds its piece of the
sequence (13 positions over 2: 7 + 6); each MoE layer routes its own piece with the whole call's
capacity, dropping order and auxiliary losses (gathered choices, summed statistics) and computes
its piece's rows only (whole experts, or split over ep); with --etp it gathers the pieces, runs
every token with its columns of the experts and keeps its piece. The output piece's dropout draws
that piece of one rank's mask.

The model is ep_tp_equivalence.py's GPT-2-MoE (width 26, 2 heads of 13, vocabulary 257 padded to
258, block 0 dense, blocks 1 and 2 MoE with 4 GELU experts, top-2, capacity factor 1 so pairs are
dropped), here with dropout 0.1 on the embeddings and the attention, MLP and MoE outputs. Layouts:
np 2 --tp 2 --sp (no ep), np 4 --tp 2 --sp --ep 2, np 4 --tp 2 --sp --ep 2 --etp at ZeRO-3, and
np 4 --tp 2 --sp --ep 2 with router jitter 0.1 (each tp rank draws its piece's elements of the
whole call's noise and routes its piece) against one rank with the same jitter.
Checks, as ep_tp_equivalence's: every step's loss, auxiliary loss and gradient norm within 1e-5
(relative), the same per-layer loads and drops, the final parameters within 1e-5, and under ep
the all-to-all bytes as docs/MOE.md's formula with each kept row sent once per tp pair.

Usage: ep_sp_equivalence.py TESSEL MPIRUN WORKDIR
"""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "common"))
from tessel_runs import (compare_losses, compare_params, fail, final_params, mpi_prefix,  # noqa: E402
                         prepare_workdir, run, single_thread_env, step_records, train_sets,
                         write_json)
from ep_tp_equivalence import (GPT2_EMBD, MICRO, SEQ, STEPS, check_all_to_all,  # noqa: E402
                               check_grad_norms, check_routing, gpt2_moe_config)

DROPOUT = 0.1


def main():
    tessel, mpirun, work = sys.argv[1], sys.argv[2], sys.argv[3]
    vocab = prepare_workdir(tessel, work)
    cfg = gpt2_moe_config(vocab)
    cfg.update(resid_pdrop=DROPOUT, embd_pdrop=DROPOUT)
    config = write_json(os.path.join(work, "config.json"), cfg)
    env = single_thread_env()
    mpi = mpi_prefix(mpirun)

    def common(d, extra=()):
        return ["train"] + train_sets(config, os.path.join(work, "data"), STEPS, seq_len=SEQ,
                                      extra=["checkpoint.interval=12", f"train.micro_batch={MICRO}",
                                             "log.jsonl=train.jsonl", "checkpoint.dir=" + d] +
                                      list(extra))

    jcfg = dict(cfg, router_jitter=0.1)
    jittered = write_json(os.path.join(work, "config_jitter.json"), jcfg)
    layouts = [(2, ["--tp", "2", "--sp"], 0, ""), (4, ["--tp", "2", "--sp", "--ep", "2"], 0, ""),
               (4, ["--tp", "2", "--sp", "--ep", "2", "--etp"], 3, ""),
               (4, ["--tp", "2", "--sp", "--ep", "2"], 0, "jitter")]
    refs = {}
    for ranks, flags, stage, tag in layouts:
        dp = ranks // 2
        model = [f"model.config={jittered}"] if tag else []
        if (dp, tag) not in refs:
            refs[(dp, tag)] = os.path.join(work, f"one_rank_accum{dp}{tag}")
            run([tessel] + common(refs[(dp, tag)], [f"train.grad_accum={dp}"] + model), env=env)
        ref = refs[(dp, tag)]
        what = f"np {ranks} {' '.join(flags)} ZeRO-{stage}{' with router jitter' if tag else ''}"
        d = os.path.join(work, f"np{ranks}_{'_'.join(f.strip('-') for f in flags)}_zero{stage}{tag}")
        out = run(mpi + ["-np", str(ranks), tessel] +
                  common(d, [f"parallel.zero_stage={stage}"] + model) + flags, env=env).stdout
        if "with sequence parallelism" not in out:
            fail(f"{what}: the run did not report sequence parallelism\n{out[-2000:]}")
        norms = check_grad_norms(ref, d, what)
        worst = compare_losses(ref, d, what, STEPS)
        drops, aux = check_routing(ref, d, what, need_drops=True)
        if "--ep" in flags:
            check_all_to_all(d, ranks, GPT2_EMBD, what)
        worst_p, name, worst_t = compare_params(final_params(ref, STEPS),
                                                final_params(d, STEPS), what)
        print(f"{what}: {STEPS}-step losses within {worst:.1e} of one rank (grad_accum {dp}), the "
              f"same routing ({drops} pairs dropped in all), auxiliary losses within {aux:.1e}, "
              f"gradient norms within {norms:.1e}, "
              f"final parameters within {worst_p:.1e} (worst {name} {worst_t:.1e})")
    # Dropout was applied: one rank without it trains otherwise.
    plain = write_json(os.path.join(work, "config_no_dropout.json"), gpt2_moe_config(vocab))
    nodrop = os.path.join(work, "one_rank_no_dropout")
    run([tessel] + [a.replace(config, plain) for a in common(nodrop, ["train.grad_accum=2"])],
        env=env)
    if step_records(nodrop)[0]["loss"] == step_records(refs[(2, "")])[0]["loss"]:
        fail(f"dropout {DROPOUT} left one rank's step-1 loss unchanged: no mask was applied")
    # The jitter was applied: the same rank without it routes otherwise.
    if [r["experts"] for r in step_records(refs[(2, "")])] == \
            [r["experts"] for r in step_records(refs[(2, "jitter")])]:
        fail("router jitter 0.1 left one rank's routing unchanged: no noise was drawn")


if __name__ == "__main__":
    main()
