#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Expert tensor parallelism equals one rank: `tessel train --tp 2 --etp` (each MoE expert's FFN
split over the tp pair: gate/up/fc column-parallel, down/proj row-parallel, the partial outputs
summed over tp once per layer call, the router and output biases whole) at np 2 (tp 2, no ep) and
np 4 (--tp 2 --ep 2, ZeRO 0 and 3) against `tessel train` on one rank with one micro-batch per
data-parallel rank. The model and checks are ep_tp_equivalence.py's (odd sizes, pairs dropped by
the capacity, 12 steps; losses, routing, auxiliary losses, gradient norms and final parameters
within 1e-5), plus: the all-to-all bytes as the formula with each kept row sent once per tp pair
(each tp rank sends its half of the rows, as --tp 2 --ep 2 without --etp does), the run
reports the split, and rank 0's
expert parameter bytes are one rank's / (ep x tp) (the output biases / ep: they stay whole; the
first of the uneven FFN pieces for Mixtral's 33 columns). GPT-2-MoE only: checkpoints cross the
option both ways (step 6 of np 4 --tp 2 --ep 2 --etp ZeRO-3 resumed on one rank, one rank's
resumed at np 4 --tp 2 --ep 2 --etp), each continuing the one-rank trajectory.

`bf16` as the last argument: the GPT-2-MoE at np 4 --tp 2 --ep 2 --etp with
train.precision=bf16 against one rank at bf16: step 1 routes exactly as one rank; later steps
differ by bf16 roundings in another order (the partial outputs are summed over tp in bf16):
losses within 1e-3 (ep_bf16_equivalence's bound) and final parameters no farther from the
one-rank bf16 run than 1.5 x the same layout without --etp (itself 0.8 x the bf16-f32 distance
on this model, so ep_bf16_equivalence's "half the f32 distance" does not apply to tp here); the
all-to-all bytes of both runs as the formula with 2-byte rows (each row sent once per tp pair).

Usage: ep_etp_equivalence.py TESSEL MPIRUN WORKDIR [mixtral|bf16]
"""
import os
import re
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "common"))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from ep_tp_equivalence import (EXPERTS, GPT2_EMBD, MICRO, MIXTRAL_EMBD, MOE_LAYERS, SEQ,  # noqa: E402
                               STEPS, check_all_to_all, check_grad_norms, check_routing,
                               gpt2_moe_config, mixtral_config)
from tessel_runs import (compare_losses, compare_params, fail, final_params, mpi_prefix,  # noqa: E402
                         prepare_workdir, run, seed_resume, single_thread_env, step_records,
                         train_sets, write_json)


def expert_bytes(out, what):
    m = re.search(r"experts: (\d+) parameter bytes of (\d+) MoE layers on this rank", out)
    if not m:
        fail(f"{what}: the run did not report its expert parameter bytes\n{out[-2000:]}")
    return int(m.group(1))


def expected_bytes(mixtral, ep, tp):
    """Rank 0's expert parameter bytes (f32): E / ep experts of each MoE layer, each with the
    first of tp balanced pieces of its FFN columns (placement.h: the first F % tp pieces one
    longer), the GELU experts' output bias whole."""
    c, f = (MIXTRAL_EMBD, 33) if mixtral else (GPT2_EMBD, 4 * GPT2_EMBD)
    cols = f // tp + (1 if f % tp else 0)
    per_expert = 3 * cols * c if mixtral else 2 * cols * c + cols + c
    return 4 * MOE_LAYERS * (EXPERTS // ep) * per_expert


def relative_distance(pa, pb):
    d2 = sum(sum((u - v) ** 2 for u, v in zip(x, pb[n])) for n, x in pa.items())
    n2 = sum(sum(u * u for u in x) for x in pa.values())
    return (d2 / n2) ** 0.5


def check_bf16(tessel, mpi, work, common, env):
    what = "np 4 --tp 2 --ep 2 --etp bf16"
    ref, f32 = os.path.join(work, "one_rank_accum2_bf16"), os.path.join(work, "one_rank_accum2_f32")
    run([tessel] + common(ref, ["train.grad_accum=2", "train.precision=bf16"]), env=env)
    run([tessel] + common(f32, ["train.grad_accum=2"]), env=env)
    d, whole = os.path.join(work, "np4_etp_bf16"), os.path.join(work, "np4_bf16")
    run(mpi + ["-np", "4", tessel] + common(d, ["train.precision=bf16"]) +
        ["--tp", "2", "--ep", "2", "--etp"], env=env)
    run(mpi + ["-np", "4", tessel] + common(whole, ["train.precision=bf16"]) +
        ["--tp", "2", "--ep", "2"], env=env)
    a, b = step_records(ref), step_records(d)
    if len(a) != STEPS or len(b) != STEPS:
        fail(f"{what}: {len(b)} step records, one rank {len(a)}, expected {STEPS}")
    keys = ("layer", "tokens", "capacity", "tokens_per_expert", "dropped")
    routed = [[{k: e[k] for k in keys} for e in r["experts"]] for r in (a[0], b[0])]
    if routed[0] != routed[1]:
        fail(f"{what}: step 1 (the initial weights) routes otherwise than one rank: "
             f"{routed[1]} vs {routed[0]}")
    worst = max(abs(x["loss"] - y["loss"]) / abs(x["loss"]) for x, y in zip(a, b))
    if worst > 1e-3:
        fail(f"{what}: a loss differs from one rank's bf16 run by {worst:.2e} (relative) > 1e-3")
    # 16-bit rows: 2 bytes per element, half of f32's; split over the tp pair only with --etp.
    check_all_to_all(d, 4, GPT2_EMBD, what, elem=2)
    check_all_to_all(whole, 4, GPT2_EMBD, "np 4 --tp 2 --ep 2 bf16", elem=2)
    pr = final_params(ref, STEPS)
    dist, gap = relative_distance(pr, final_params(d, STEPS)), relative_distance(final_params(f32, STEPS), pr)
    base = relative_distance(pr, final_params(whole, STEPS))
    if dist > 1.5 * base or dist >= gap:
        fail(f"{what}: final parameters {dist:.2e} from one rank's bf16 run; without --etp "
             f"{base:.2e} (bound 1.5x), bf16 vs f32 {gap:.2e}")
    print(f"{what}: step 1 routes as one rank's bf16 run, {STEPS}-step losses within {worst:.1e}, "
          f"final parameters {dist:.1e} from it (without --etp: {base:.1e}; bf16 vs f32: {gap:.1e}); "
          f"all-to-all bytes as the formula with 2-byte rows, with and without --etp")


def main():
    tessel, mpirun, work = sys.argv[1], sys.argv[2], sys.argv[3]
    mode = sys.argv[4] if len(sys.argv) > 4 else ""
    if mode not in ("", "mixtral", "bf16"):
        fail(f"mode {mode!r}: expected mixtral or bf16")
    mixtral = mode == "mixtral"
    vocab = prepare_workdir(tessel, work)
    config = write_json(os.path.join(work, "config.json"),
                        mixtral_config(vocab) if mixtral else gpt2_moe_config(vocab))
    embd = MIXTRAL_EMBD if mixtral else GPT2_EMBD
    env = single_thread_env()
    mpi = mpi_prefix(mpirun)

    def common(d, extra=()):
        return ["train"] + train_sets(config, os.path.join(work, "data"), STEPS, seq_len=SEQ,
                                      extra=["checkpoint.interval=6", f"train.micro_batch={MICRO}",
                                             "log.jsonl=train.jsonl", "checkpoint.dir=" + d] +
                                      list(extra))

    if mode == "bf16":
        check_bf16(tessel, mpi, work, common, env)
        return
    layouts = [(2, ["--tp", "2", "--etp"], 0), (4, ["--tp", "2", "--ep", "2", "--etp"], 0),
               (4, ["--tp", "2", "--ep", "2", "--etp"], 3)]
    refs, dirs, whole = {}, {}, None
    for ranks, flags, stage in layouts:
        dp = ranks // 2
        if dp not in refs:
            refs[dp] = os.path.join(work, f"one_rank_accum{dp}")
            out = run([tessel] + common(refs[dp], [f"train.grad_accum={dp}"]), env=env).stdout
            whole = expert_bytes(out, "one rank")
            if whole != expected_bytes(mixtral, 1, 1):
                fail(f"one rank holds {whole} expert bytes, expected {expected_bytes(mixtral, 1, 1)}")
        ep = 2 if "--ep" in flags else 1
        what = f"np {ranks} {' '.join(flags)} ZeRO-{stage}"
        d = os.path.join(work, f"np{ranks}_{'_'.join(f.strip('-') for f in flags)}_zero{stage}")
        dirs[(ranks, stage)] = d
        out = run(mpi + ["-np", str(ranks), tessel] + common(d, [f"parallel.zero_stage={stage}"]) +
                  flags, env=env).stdout
        if "expert tensor parallel: each expert's FFN of 2 MoE layers split over tp = 2" not in out:
            fail(f"{what}: the run did not report the experts' split\n{out[-2000:]}")
        held = expert_bytes(out, what)
        if held != expected_bytes(mixtral, ep, 2):
            fail(f"{what}: rank 0 holds {held} expert parameter bytes, expected "
                 f"{expected_bytes(mixtral, ep, 2)} (one rank: {whole})")
        norms = check_grad_norms(refs[dp], d, what)
        worst = compare_losses(refs[dp], d, what, STEPS)
        drops, aux = check_routing(refs[dp], d, what, need_drops=not mixtral)
        if ep > 1:
            check_all_to_all(d, ranks, embd, what)
            first = step_records(d)[0]
            kept = sum(sum(e["tokens_per_expert"]) for e in first["experts"])
            print(f"{what}: step 1 all-to-all bytes per rank {first['all_to_all_bytes'] / ranks:.0f} "
                  f"(each tp rank sending its own copy of the rows would make it "
                  f"{(first['all_to_all_bytes'] + 16 * embd * kept) / ranks:.0f})")
        worst_p, name, worst_t = compare_params(final_params(refs[dp], STEPS),
                                                final_params(d, STEPS), what)
        print(f"{what}: {STEPS}-step losses within {worst:.1e} of one rank (grad_accum {dp}), the "
              f"same routing ({drops} pairs dropped in all), auxiliary losses within {aux:.1e}, "
              f"gradient norms within {norms:.1e}, final parameters within {worst_p:.1e} (worst "
              f"{name} {worst_t:.1e}); rank 0 holds {held} expert parameter bytes, one rank {whole}")

    if mixtral:
        return

    # Checkpoints hold whole tensors: one written with the experts split over tp x ep resumes on
    # one rank, and one rank's resumes with them split.
    def resume(src, d, ranks, flags, what):
        seed_resume(src, "step_000006", d)
        run((mpi + ["-np", str(ranks)] if ranks > 1 else []) + [tessel, "train", "--resume", d] +
            flags, env=env)
        worst = compare_losses(refs[2], d, what, STEPS)
        worst_p, _, _ = compare_params(final_params(refs[2], STEPS), final_params(d, STEPS), what)
        print(f"{what}: continues the trajectory (losses within {worst:.1e}, final parameters "
              f"within {worst_p:.1e})")

    resume(dirs[(4, 3)], os.path.join(work, "resume_etp_on_one_rank"), 1,
           ["--set", "parallel.zero_stage=0"], "resume --tp 2 --ep 2 --etp ZeRO-3 -> one rank")
    resume(refs[2], os.path.join(work, "resume_one_rank_at_etp"), 4,
           ["--tp", "2", "--ep", "2", "--etp"], "resume one rank -> --tp 2 --ep 2 --etp")


if __name__ == "__main__":
    main()
