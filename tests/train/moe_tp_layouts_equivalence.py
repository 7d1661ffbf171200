#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Tensor parallelism with a mixture-of-experts model in the layouts the ep tests leave out, equal
to one rank: `mpirun -np 4 tessel train` on ep_tp_equivalence.py's GPT-2-MoE (width 26, 2 heads
of 13, vocabulary 257 padded to 258, block 0 dense, blocks 1 and 2 MoE with 4 GELU experts, top-2,
capacity factor 1 so pairs are dropped, 3 x 13 tokens per micro-batch, 12 steps) against
`tessel train` on one rank with the same global batch (grad_accum 2).

Default: pipeline stages under tp, no ep (dp 1): `--tp 2 --pp 2 --etp` with 1F1B (each expert's
FFN split over the tp pair of the stage that holds its layer) and `--tp 2 --pp 2` with GPipe (the
experts whole on both tp ranks), 2 micro-batches per step. `zero3`: ZeRO-3 over dp 2 with tp 2
and no ep, `--tp 2 --etp` (the experts' tp pieces in the dense ZeRO-3 units) and `--tp 2` (the
experts whole on both tp ranks). Checks (ep_tp_equivalence.py's): every step's loss and gradient
norm within 1e-5 (relative), the same per-layer loads and drops and mean auxiliary loss, the final
parameters within 1e-5. ep x tp x pp needs 8 ranks (ep divides dp = ranks / (tp x pp)), so it is
not among these 4-rank layouts.

Usage: moe_tp_layouts_equivalence.py TESSEL MPIRUN WORKDIR [zero3]
"""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "common"))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from ep_tp_equivalence import (MICRO, SEQ, STEPS, check_grad_norms, check_routing,  # noqa: E402
                               gpt2_moe_config)
from tessel_runs import (compare_losses, compare_params, fail, final_params, mpi_prefix,  # noqa: E402
                         prepare_workdir, run, single_thread_env, train_sets, write_json)


def main():
    tessel, mpirun, work = sys.argv[1], sys.argv[2], sys.argv[3]
    mode = sys.argv[4] if len(sys.argv) > 4 else ""
    if mode not in ("", "zero3"):
        fail(f"mode {mode!r}: expected zero3")
    vocab = prepare_workdir(tessel, work)
    config = write_json(os.path.join(work, "config.json"), gpt2_moe_config(vocab))
    env = single_thread_env()
    mpi = mpi_prefix(mpirun)

    def common(d, extra=()):
        return ["train"] + train_sets(config, os.path.join(work, "data"), STEPS, seq_len=SEQ,
                                      extra=["checkpoint.interval=12", f"train.micro_batch={MICRO}",
                                             "log.jsonl=train.jsonl", "checkpoint.dir=" + d] +
                                      list(extra))

    ref = os.path.join(work, "one_rank_accum2")
    run([tessel] + common(ref, ["train.grad_accum=2"]), env=env)
    if mode == "zero3":
        layouts = [["--tp", "2", "--dp", "2", "--etp"], ["--tp", "2", "--dp", "2"]]
        sets = ["parallel.zero_stage=3"]
    else:
        layouts = [["--tp", "2", "--pp", "2", "--etp", "--schedule", "1f1b"],
                   ["--tp", "2", "--pp", "2", "--schedule", "gpipe"]]
        sets = ["train.grad_accum=2"]
    for flags in layouts:
        what = f"np 4 {' '.join(flags)}" + (" ZeRO-3 (dp 2)" if mode else " (dp 1)")
        d = os.path.join(work, "np4_" + "_".join(f.strip("-") for f in flags))
        extra = ["--microbatches", "2"] if "--pp" in flags else []
        out = run(mpi + ["-np", "4", tessel] + common(d, sets) + flags + extra, env=env).stdout
        if ("--etp" in flags) != ("expert tensor parallel: each expert's FFN of 2 MoE layers" in out):
            fail(f"{what}: the run's report of the experts' split does not match --etp\n"
                 f"{out[-2000:]}")
        if "--pp" in flags and "pipeline: " not in out:
            fail(f"{what}: the run did not report its pipeline\n{out[-2000:]}")
        worst = compare_losses(ref, d, what, STEPS)
        norms = check_grad_norms(ref, d, what)
        drops, aux = check_routing(ref, d, what, need_drops=True)
        worst_p, name, worst_t = compare_params(final_params(ref, STEPS), final_params(d, STEPS),
                                                what)
        print(f"{what}: {STEPS}-step losses within {worst:.1e} of one rank (grad_accum 2), the "
              f"same routing ({drops} pairs dropped in all), auxiliary losses within {aux:.1e}, "
              f"gradient norms within {norms:.1e}, final parameters within {worst_p:.1e} (worst "
              f"{name} {worst_t:.1e})")


if __name__ == "__main__":
    main()
