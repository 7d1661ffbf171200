#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Expert parallelism with ZeRO equals one rank: `mpirun -np N tessel train --ep E` with
parallel.zero_stage 1 or 2, where the dense parameters' moments (and from stage 2 their averaged
gradients) are partitioned over dp and the experts' over their own expert-dp group (DeepSpeed-MoE),
against `tessel train` on one rank with one micro-batch per rank of the parallel run. The model,
data and checks are train.ep_equivalence's: every step's loss within 1e-5 (relative), the same
per-layer loads and drops, the final parameters within 1e-5. Each rank's optimizer state is 8
bytes per parameter / dp (plus the buckets' padding): every expert's moments live on one rank of
its group. Checkpoints move between ep sizes and ZeRO stages (ep 2 ZeRO-2 -> ep 4 ZeRO-1 on 4
ranks, ep 4 ZeRO-2 -> one rank, one rank -> ep 2 ZeRO-2) and continue the trajectory
(ZeRO-3 with --ep: train.ep_zero3_equivalence).

With `bf16` as the last argument, layouts (np 2 ep 2; np 4 ep 2 with ZeRO-2 and with ZeRO-3, whose
16-bit expert copies are made after each gather) run under train.precision=bf16 against one rank
at bf16 with the same flags. The first step (the same weights) must give the same loss and routing
exactly: the router is f32 on every layout, and the 16-bit runs take batch-invariant products
(TESSEL_BATCH_INVARIANT=1, docs/KERNELS.md), so a row's expert GEMM does not depend on the other
rows. Without them it can: an expert multiplies one micro-batch's rows on one rank but every
source rank's rows at once under ep, and the CPU backend picks its f32 kernel by row count (lane
tiles, register tiles, oneDNN) at thresholds that differ between the avx2 and avx512 sets; the
avx2 set's fp16 run differed in the 7th digit of the first loss. Later steps differ by the
rounding of gradient sums taken in another order, which the 16-bit copies of the weights can
turn into a flipped near-tie of the router, so the bounds are
bf16's: every loss within 1e-3 (relative; a quarter of bf16's unit roundoff) and the final
parameters nearer to one rank's bf16 run than half the distance between one rank's bf16 and f32
runs (a wrongly scaled or missing gradient moves them farther than the precision does).

With `fp16`, the same layouts and bounds at train.precision=fp16 with dynamic loss scaling, from
an initial scale of 2^18 that the gradients overflow and a window of 4 clean steps (so a doubled
scale overflows again mid-run): every step's overflow, skip, loss scale and overflow count must be
one rank's, some steps must be skipped and some not, and every step up to the first update (the
initial weights) must equal one rank's exactly. A step that overflowed on one rank but was taken
on another would change the scales and skips of the following steps.

In both 16-bit modes every step's all-to-all bytes are docs/MOE.md's formula with 2-byte rows: the
rows (tokens, expert outputs and their gradients) travel in the activations' 16 bits, so their
bytes are half of f32's for the same kept rows (the counts stay 8 E bytes of i64 per call).

Usage: ep_zero_equivalence.py TESSEL MPIRUN WORKDIR [bf16|fp16]
"""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "common"))
from tessel_runs import (compare_losses, compare_params, fail, final_params, mpi_prefix,  # noqa: E402
                         prepare_workdir, run, seed_resume, single_thread_env, step_records,
                         train_sets, write_json)
from ep_equivalence import (MICRO, SEQ, STEPS, check_all_to_all, check_overlap,  # noqa: E402
                            check_routing, moe_config)


def parameter_count(run_dir):
    return sum(len(x) for x in final_params(run_dir, STEPS).values())


def check_optimizer_bytes(ref_dir, dir_, dp, what):
    """Rank 0's moments: 8 bytes per parameter / dp, at most a few padding elements more."""
    psi = parameter_count(ref_dir)
    for r in step_records(dir_):
        have, want = r["optimizer_bytes"], 8 * psi / dp
        if not want <= have <= want + 8 * 2 * dp:
            fail(f"{what}: step {r['step']} rank 0 holds {have} bytes of moments; "
                 f"8 x {psi} parameters / dp {dp} = {want:.0f} (+ padding)")
    return psi


def relative_distance(pa, pb):
    """Relative L2 distance of all parameters PB from PA."""
    diff2 = sum(sum((u - v) ** 2 for u, v in zip(x, pb[k])) for k, x in pa.items())
    return (diff2 / sum(sum(u * u for u in x) for x in pa.values())) ** 0.5


def check_loss_scaling(a, b, what):
    """fp16: every step's overflow, skip and loss scale as one rank's; returns the skips."""
    for x, y in zip(a, b, strict=True):
        for key in ("overflow", "skipped", "loss_scale", "overflow_total"):
            if x[key] != y[key]:
                fail(f"{what}: step {x['step']} {key} {y[key]!r} vs one rank's {x[key]!r}")
    skips = sum(x["overflow"] for x in a)
    if skips == 0 or skips == len(a):
        fail(f"{what}: {skips} of {len(a)} steps overflowed; the test needs some of each")
    return skips


def check_low_precision(tessel, mpi, work, common, refs, env, precision):
    """REFS are one rank at PRECISION; the module docstring gives the bounds."""
    for ranks, ep, stage in ((2, 2, 0), (4, 2, 2), (4, 2, 3)):
        what = f"np {ranks} --ep {ep} ZeRO-{stage} {precision}"
        ref = refs[ranks]
        f32 = os.path.join(work, f"one_rank_accum{ranks}_f32")
        if not os.path.isdir(f32):
            run([tessel] + common(f32, [f"train.grad_accum={ranks}", "train.precision=fp32"]),
                env=env)
        d = os.path.join(work, f"np{ranks}_ep{ep}_zero{stage}_{precision}")
        run(mpi + ["-np", str(ranks), tessel] + common(d, [f"parallel.zero_stage={stage}"]) +
            ["--ep", str(ep)], env=env)
        a, b = step_records(ref), step_records(d)
        if len(a) != STEPS or len(b) != STEPS:
            fail(f"{what}: {len(b)} step records, one rank {len(a)}, expected {STEPS}")
        skips = check_loss_scaling(a, b, what) if precision == "fp16" else 0
        check_all_to_all(d, ranks, 1, what, elem=2)
        # Until the first update every step runs on the initial weights.
        same = next(i for i, x in enumerate(a) if not x["skipped"]) + 1
        for x, y in zip(a[:same], b[:same]):
            if x["loss"] != y["loss"] or x["experts"] != y["experts"]:
                fail(f"{what}: step {x['step']} (the initial weights) differs from one rank: loss "
                     f"{y['loss']!r} vs {x['loss']!r}, experts {y['experts']} vs {x['experts']}")
        worst = max(abs(x["loss"] - y["loss"]) / abs(x["loss"]) for x, y in zip(a, b))
        if worst > 1e-3:
            fail(f"{what}: a loss differs from one rank's {precision} run by {worst:.2e} "
                 "(relative) > 1e-3")
        pr = final_params(ref, STEPS)
        dist, gap = relative_distance(pr, final_params(d, STEPS)), relative_distance(final_params(f32, STEPS), pr)
        if dist > 0.5 * gap:
            fail(f"{what}: final parameters {dist:.2e} from one rank's {precision} run, more than "
                 f"half the {gap:.2e} between one rank's {precision} and f32 runs")
        scaling = (f"{skips} overflow skips and every loss scale as one rank's, "
                   if precision == "fp16" else "")
        print(f"{what}: steps 1-{same} equal to one rank's {precision} run (loss and routing), "
              f"{scaling}{STEPS}-step losses within {worst:.1e}, final parameters {dist:.1e} "
              f"from it ({precision} vs f32: {gap:.1e}); all-to-all bytes as the formula with "
              f"2-byte rows (step 1: {b[0]['all_to_all_bytes']})")


def main():
    tessel, mpirun, work = sys.argv[1], sys.argv[2], sys.argv[3]
    low = sys.argv[4] if len(sys.argv) > 4 else None
    if low not in (None, "bf16", "fp16"):
        fail(f"precision argument {low!r}: expected bf16 or fp16")
    vocab = prepare_workdir(tessel, work)
    config = write_json(os.path.join(work, "config.json"), moe_config(vocab))
    env = single_thread_env()
    if low:  # the first step's exactness stands on row-invariant products (the docstring)
        env["TESSEL_BATCH_INVARIANT"] = "1"
    mpi = mpi_prefix(mpirun)
    # A later fp32 in `extra` wins. fp16 starts at a loss scale its gradients overflow (2^18), so
    # the first steps are skipped while the scale halves, and doubles again every 4 clean steps.
    precision = [f"train.precision={low}"] if low else []
    if low == "fp16":
        precision += [f"train.loss_scale_init={2 ** 18}", "train.loss_scale_window=4"]

    def common(d, extra=()):
        return ["train"] + train_sets(config, os.path.join(work, "data"), STEPS, seq_len=SEQ,
                                      extra=["checkpoint.interval=6", f"train.micro_batch={MICRO}",
                                             "log.jsonl=train.jsonl", "checkpoint.dir=" + d] +
                                      precision + list(extra))

    refs = {}
    for accum in (2, 4):
        refs[accum] = os.path.join(work, f"one_rank_accum{accum}")
        run([tessel] + common(refs[accum], [f"train.grad_accum={accum}"]), env=env)
    if low:
        check_low_precision(tessel, mpi, work, common, refs, env, low)
        return

    layouts = [(2, 2, 1), (4, 2, 1), (4, 2, 2), (4, 4, 2)]
    dirs = {}
    for ranks, ep, stage in layouts:
        what = f"np {ranks} --ep {ep} ZeRO-{stage}"
        d = dirs[(ranks, ep, stage)] = os.path.join(work, f"np{ranks}_ep{ep}_zero{stage}")
        out = run(mpi + ["-np", str(ranks), tessel] + common(d, [f"parallel.zero_stage={stage}"]) +
                  ["--ep", str(ep)], env=env).stdout
        if "expert parallel: ep = " not in out or f"ZeRO-{stage}" not in out:
            fail(f"{what}: the run did not report expert parallelism with ZeRO\n{out[-2000:]}")
        ref = refs[ranks]
        worst = compare_losses(ref, d, what, STEPS)
        drops = check_routing(ref, d, what)
        worst_p, name, worst_t = compare_params(final_params(ref, STEPS), final_params(d, STEPS), what)
        psi = check_optimizer_bytes(ref, d, ranks, what)
        reductions = check_overlap(d, what, True)  # the experts' ZeRO buckets, during backward
        print(f"{what}: {STEPS}-step losses within {worst:.1e} of one rank (grad_accum {ranks}), "
              f"the same routing ({drops} pairs dropped in all), final parameters within "
              f"{worst_p:.1e} (worst {name} {worst_t:.1e}); rank 0 holds the moments of "
              f"{psi} / {ranks} parameters; {reductions} expert reduction(s) a step launched "
              f"during backward")

    # Checkpoints hold whole tensors (each rank writes the moments of its blocks): they resume at
    # another ep and another stage, on one rank, and one rank's under ep with ZeRO.
    def resume(src, d, ranks, flags, what):
        seed_resume(src, "step_000006", d)
        run((mpi + ["-np", str(ranks)] if ranks > 1 else []) + [tessel, "train", "--resume", d] +
            flags, env=env)
        compare_losses(refs[4], d, what, STEPS)
        compare_params(final_params(refs[4], STEPS), final_params(d, STEPS), what)
        print(f"{what}: continues the trajectory (losses and final parameters within 1e-5)")

    resume(dirs[(4, 2, 2)], os.path.join(work, "resume_ep2_zero2_at_ep4_zero1"), 4,
           ["--ep", "4", "--set", "parallel.zero_stage=1"], "resume ep 2 ZeRO-2 -> ep 4 ZeRO-1")
    resume(dirs[(4, 4, 2)], os.path.join(work, "resume_ep4_zero2_on_one_rank"), 1,
           ["--set", "parallel.zero_stage=0"], "resume ep 4 ZeRO-2 -> one rank")
    resume(refs[4], os.path.join(work, "resume_one_rank_at_ep2_zero2"), 4,
           ["--ep", "2", "--set", "parallel.zero_stage=2"], "resume one rank -> ep 2 ZeRO-2")



if __name__ == "__main__":
    main()
