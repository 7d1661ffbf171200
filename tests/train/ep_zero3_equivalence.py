#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Expert parallelism with ZeRO-3 equals one rank: `mpirun -np N tessel train --ep E` with
parallel.zero_stage=3, where the dense parameters are partitioned over dp as for a dense model and
each MoE layer's local experts are a ZeRO-3 unit of their own, partitioned over the expert-dp group
(the ranks holding the same experts), gathered there around the layer's forward and backward and
reduce-scattered there. Against `tessel train` on one rank with one micro-batch per rank of the
parallel run; the model, data and checks are train.ep_equivalence's: every step's loss within 1e-5
(relative), the same per-layer loads and drops, the final parameters (assembled from every rank's
blocks) within 1e-5, rank 0 holding 8 bytes of moments per parameter / dp, and every rank holding
4 bytes of parameters per parameter / dp after the build (the experts' blocks too). np 2 ep 2 (an
expert group of one rank: the experts' blocks are whole) and np 4 ep 2 (groups of two). Checkpoints
keep global positions: ep 2 ZeRO-3's step 6 resumes at ep 4 ZeRO-1 and on one rank, and one rank's
at ep 2 ZeRO-3, each continuing the trajectory.

Usage: ep_zero3_equivalence.py TESSEL MPIRUN WORKDIR
"""
import json
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "common"))
from tessel_runs import (compare_losses, compare_params, fail, final_params, mpi_prefix,  # noqa: E402
                         prepare_workdir, run, seed_resume, single_thread_env, train_sets,
                         write_json)
from ep_equivalence import MICRO, SEQ, STEPS, check_routing, moe_config  # noqa: E402
from ep_zero_equivalence import check_optimizer_bytes  # noqa: E402


def check_parameter_bytes(psi, dir_, dp, what):
    """Every rank's parameters after the build: 4 bytes per parameter / dp, plus at most a few
    padding elements per unit (7 units: wte, wpe, two blocks, ln_f, two layers' experts)."""
    with open(os.path.join(dir_, "train.jsonl")) as f:
        build = next(r for r in map(json.loads, f) if r.get("checkpoint_event") == "build")
    want = 4 * psi / dp
    for rank, r in enumerate(build["ranks"]):
        if not want <= r["param_bytes"] <= want + 4 * 7 * dp:
            fail(f"{what}: rank {rank} holds {r['param_bytes']} bytes of parameters after the "
                 f"build; 4 x {psi} parameters / dp {dp} = {want:.0f} (+ padding)")


def main():
    tessel, mpirun, work = sys.argv[1], sys.argv[2], sys.argv[3]
    vocab = prepare_workdir(tessel, work)
    config = write_json(os.path.join(work, "config.json"), moe_config(vocab))
    env = single_thread_env()
    mpi = mpi_prefix(mpirun)

    def common(d, extra=()):
        return ["train"] + train_sets(config, os.path.join(work, "data"), STEPS, seq_len=SEQ,
                                      extra=["checkpoint.interval=6", f"train.micro_batch={MICRO}",
                                             "log.jsonl=train.jsonl", "checkpoint.dir=" + d] +
                                      list(extra))

    refs = {}
    for accum in (2, 4):
        refs[accum] = os.path.join(work, f"one_rank_accum{accum}")
        run([tessel] + common(refs[accum], [f"train.grad_accum={accum}"]), env=env)

    dirs = {}
    for ranks, ep in ((2, 2), (4, 2)):
        what = f"np {ranks} --ep {ep} ZeRO-3"
        d = dirs[ranks] = os.path.join(work, f"np{ranks}_ep{ep}_zero3")
        out = run(mpi + ["-np", str(ranks), tessel] + common(d, ["parallel.zero_stage=3"]) +
                  ["--ep", str(ep)], env=env).stdout
        if "expert parallel: ep = " not in out or "ZeRO-3" not in out:
            fail(f"{what}: the run did not report expert parallelism with ZeRO-3\n{out[-2000:]}")
        ref = refs[ranks]
        worst = compare_losses(ref, d, what, STEPS)
        drops = check_routing(ref, d, what)
        worst_p, name, worst_t = compare_params(final_params(ref, STEPS), final_params(d, STEPS), what)
        psi = check_optimizer_bytes(ref, d, ranks, what)
        check_parameter_bytes(psi, d, ranks, what)
        print(f"{what}: {STEPS}-step losses within {worst:.1e} of one rank (grad_accum {ranks}), "
              f"the same routing ({drops} pairs dropped in all), final parameters within "
              f"{worst_p:.1e} (worst {name} {worst_t:.1e}); rank 0 holds the moments of "
              f"{psi} / {ranks} parameters and every rank their values")

    def resume(src, d, ranks, flags, what):
        seed_resume(src, "step_000006", d)
        run((mpi + ["-np", str(ranks)] if ranks > 1 else []) + [tessel, "train", "--resume", d] +
            flags, env=env)
        compare_losses(refs[4], d, what, STEPS)
        compare_params(final_params(refs[4], STEPS), final_params(d, STEPS), what)
        print(f"{what}: continues the trajectory (losses and final parameters within 1e-5)")

    resume(dirs[4], os.path.join(work, "resume_ep2_zero3_at_ep4_zero1"), 4,
           ["--ep", "4", "--set", "parallel.zero_stage=1"], "resume ep 2 ZeRO-3 -> ep 4 ZeRO-1")
    resume(dirs[4], os.path.join(work, "resume_ep2_zero3_on_one_rank"), 1,
           ["--set", "parallel.zero_stage=0"], "resume ep 2 ZeRO-3 -> one rank")
    resume(refs[4], os.path.join(work, "resume_one_rank_at_ep2_zero3"), 4,
           ["--ep", "2", "--set", "parallel.zero_stage=3"], "resume one rank -> ep 2 ZeRO-3")


if __name__ == "__main__":
    main()
