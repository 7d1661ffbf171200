#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Tensor parallelism with a mixture-of-experts model in the layouts the ep tests leave out, equal
to one rank: `mpirun -np 4 tessel train` on ep_tp_equivalence.py's GPT-2-MoE (width 26, 2 heads
of 13, vocabulary 257 padded to 258, block 0 dense, blocks 1 and 2 MoE with 4 GELU experts, top-2,
capacity factor 1 so pairs are dropped, 3 x 13 tokens per micro-batch, 12 steps) against
`tessel train` on one rank with the same global batch (grad_accum 2). Under pp without --etp the
stages the trainer cuts on its tp pieces are those `tessel plan memory` predicts.

Default: pipeline stages under tp, no ep (dp 1): `--tp 2 --pp 2 --etp` with 1F1B (each expert's
FFN split over the tp pair of the stage that holds its layer) and `--tp 2 --pp 2` with GPipe (the
experts whole on both tp ranks), 2 micro-batches per step. `zero3`: ZeRO-3 over dp 2 with tp 2
and no ep, `--tp 2 --etp` (the experts' tp pieces in the dense ZeRO-3 units) and `--tp 2` (the
experts whole on both tp ranks). `ep`: all four axes, which need 8 ranks (ep divides dp = ranks /
(tp x pp)), oversubscribed: `--tp 2 --pp 2 --dp 2 --ep 2 --etp` 1F1B and `--tp 2 --pp 2 --dp 2
--ep 2` GPipe with ZeRO-3, against one rank with grad_accum 4, with the all-to-all bytes over
every rank of both stages as docs/MOE.md's formula (x tp without --etp, where each tp rank sends
its own copy of the rows). Checks (ep_tp_equivalence.py's): every step's loss and gradient norm
within 1e-5 (relative), the same per-layer loads and drops and mean auxiliary loss, the final
parameters within 1e-5.

Usage: moe_tp_layouts_equivalence.py TESSEL MPIRUN WORKDIR [zero3|ep]
"""
import json
import os
import re
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "common"))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from ep_tp_equivalence import (EXPERTS, GPT2_EMBD, MICRO, MOE_LAYERS, SEQ, STEPS,  # noqa: E402
                               check_grad_norms, check_routing, gpt2_moe_config)
from tessel_runs import (compare_losses, compare_params, fail, final_params, mpi_prefix,  # noqa: E402
                         prepare_workdir, run, single_thread_env, step_records, train_sets,
                         write_json)

MICRO_BATCHES = 2  # per pipeline step


def check_all_to_all(dir_, what):
    """ep x tp x pp at np 8: each MoE layer exchanges on its stage's 4 ranks (dp 2 x tp 2), 8 E
    bytes of counts per rank and micro-batch, and every kept row in a dispatch and a combine,
    forward and backward (16 x n_embd bytes), once per tp pair (each tp rank sends its piece of
    the rows, with --etp or without). The calls: 5 per MoE layer and micro-batch over the stages
    of one replica."""
    for r in step_records(dir_):
        kept = sum(sum(e["tokens_per_expert"]) for e in r["experts"])
        want = 4 * MICRO_BATCHES * MOE_LAYERS * 8 * EXPERTS + 16 * GPT2_EMBD * kept
        calls = 5 * MICRO_BATCHES * MOE_LAYERS
        if r["all_to_all_bytes"] != want or r["all_to_all_calls"] != calls:
            fail(f"{what}: step {r['step']} issued {r['all_to_all_calls']} all-to-alls of "
                 f"{r['all_to_all_bytes']} bytes (all ranks); the formula gives {calls} and "
                 f"{want} bytes ({kept} kept rows)")


def stage_cut_of(out):
    """The stages of the trainer's pipeline line ("embedding..block.0 | block.1..head")."""
    m = re.search(r"pipeline: .* stages (.+)", out)
    if not m:
        fail(f"no pipeline line in the run's output:\n{out[-2000:]}")
    return m.group(1).strip()


def planned_cut(tessel, env, config, flags):
    """`tessel plan memory`'s stages for the same model and tp x pp layout."""
    schedule = flags[flags.index("--schedule") + 1] if "--schedule" in flags else "1f1b"
    return json.loads(run([tessel, "plan", "memory", "-m", config, "--tp", "2", "--pp", "2",
                           "--schedule", schedule, "--grad-accum", str(MICRO_BATCHES),
                           "--micro-batch", str(MICRO), "--seq", str(SEQ), "--json"],
                          env=env).stdout)["stages"]


def check_stage_cut(tessel, mpi, env, work, config, out, flags, what):
    """Under tp without --etp the trainer cuts the stages on its tp pieces (the experts whole, the
    dense layers and the head halved), and `plan memory` (and the search) predict that cut: for
    the run's model, and for one where it differs from the whole model's cut (an expert block
    first: `embedding..block.0 | block.1..head` on tp's pieces, `embedding..block.1 |
    block.2..head` on the whole model), built only."""
    cut = stage_cut_of(out)
    if planned_cut(tessel, env, config, flags) != cut:
        fail(f"{what}: the trainer cut {cut!r}, plan memory predicts "
             f"{planned_cut(tessel, env, config, flags)!r}")
    skewed = write_json(os.path.join(work, "experts_first.json"), dict(
        json.load(open(config)), n_layer=3, expert_counts=[2, 0, 0], top_k=1))
    built = run(mpi + ["-np", "4", tessel, "train", "--tp", "2", "--pp", "2", "--microbatches",
                       str(MICRO_BATCHES), "--build-only", "--set", f"model.config={skewed}",
                       "--set", f"data.dir={os.path.join(work, 'data')}", "--set",
                       f"train.seq_len={SEQ}", "--set", f"train.micro_batch={MICRO}", "--set",
                       "checkpoint.dir=" + os.path.join(work, "experts_first")], env=env).stdout
    skewed_cut = stage_cut_of(built)
    if skewed_cut != "embedding..block.0 | block.1..head" or \
            planned_cut(tessel, env, skewed, ["--schedule", "1f1b"]) != skewed_cut:
        fail(f"experts first, tp 2 x pp 2: the trainer cut {skewed_cut!r}, plan memory predicts "
             f"{planned_cut(tessel, env, skewed, ['--schedule', '1f1b'])!r}")
    # The search's tp x pp rows are `plan memory`'s figures for that cut.
    cluster = os.path.join(work, "node4.toml")
    with open(cluster, "w") as f:
        f.write('name = "node4"\ndevices_per_node = 4\nnodes = 1\n[device]\nkind = "t"\n'
                'memory_bytes = 1073741824\nmemory_bandwidth = 1e12\n[device.peak_flops]\n'
                'f32 = 1e9\n[links.intra_node]\nbandwidth = 100e9\nlatency = 1e-6\n')
    found = json.loads(run([tessel, "plan", "search", "-m", skewed, "--cluster", cluster,
                            "--devices", "4", "-B", str(MICRO * MICRO_BATCHES), "-t", str(SEQ),
                            "--recompute", "none", "--sequence-parallel", "off", "--schedules",
                            "1f1b", "--zero", "0", "--stage-split", "balanced", "--top", "100",
                            "--json"], env=env).stdout)
    rows = [r for r in found["ranked"] if r["tp"] == 2 and r["pp"] == 2]
    for r in rows:
        m = json.loads(run([tessel, "plan", "memory", "-m", skewed, "--cluster", cluster, "--tp",
                            "2", "--pp", "2", "--schedule", "1f1b", "--micro-batch",
                            str(r["micro_batch"]), "--grad-accum", str(r["grad_accum"]), "--seq",
                            str(SEQ), "--json"], env=env).stdout)
        if m["mem_peak_bytes"] != r["mem_peak_bytes"] or \
                abs(m["step_ms"] - r["step_ms"]) > 1e-9 * r["step_ms"]:
            fail(f"experts first: search {r['layout']} {r['mem_peak_bytes']} bytes "
                 f"{r['step_ms']} ms, plan memory {m['mem_peak_bytes']} bytes {m['step_ms']} ms")
    if not rows:
        fail("experts first: the search ranked no tp 2 x pp 2 layout")
    print(f"{what}: stages {cut}, and with the experts first {skewed_cut}, as plan memory "
          f"predicts and the search's {len(rows)} tp x pp rows hold")


def main():
    tessel, mpirun, work = sys.argv[1], sys.argv[2], sys.argv[3]
    mode = sys.argv[4] if len(sys.argv) > 4 else ""
    if mode not in ("", "zero3", "ep"):
        fail(f"mode {mode!r}: expected zero3 or ep")
    vocab = prepare_workdir(tessel, work)
    config = write_json(os.path.join(work, "config.json"), gpt2_moe_config(vocab))
    env = single_thread_env()
    mpi = mpi_prefix(mpirun)

    def common(d, extra=()):
        return ["train"] + train_sets(config, os.path.join(work, "data"), STEPS, seq_len=SEQ,
                                      extra=["checkpoint.interval=12", f"train.micro_batch={MICRO}",
                                             "log.jsonl=train.jsonl", "checkpoint.dir=" + d] +
                                      list(extra))

    accum = 4 if mode == "ep" else 2
    ref = os.path.join(work, f"one_rank_accum{accum}")
    run([tessel] + common(ref, [f"train.grad_accum={accum}"]), env=env)
    ranks = 8 if mode == "ep" else 4
    if mode == "zero3":
        layouts = [["--tp", "2", "--dp", "2", "--etp"], ["--tp", "2", "--dp", "2"]]
        sets = ["parallel.zero_stage=3"]
    elif mode == "ep":
        layouts = [["--tp", "2", "--pp", "2", "--dp", "2", "--ep", "2", "--etp", "--schedule", "1f1b"],
                   ["--tp", "2", "--pp", "2", "--dp", "2", "--ep", "2", "--schedule", "gpipe",
                    "--set", "parallel.zero_stage=3"]]
        sets = []
    else:
        layouts = [["--tp", "2", "--pp", "2", "--etp", "--schedule", "1f1b"],
                   ["--tp", "2", "--pp", "2", "--schedule", "gpipe"]]
        sets = ["train.grad_accum=2"]
    for flags in layouts:
        what = f"np {ranks} {' '.join(flags)}" + {"zero3": " ZeRO-3 (dp 2)", "ep": "",
                                                  "": " (dp 1)"}[mode]
        d = os.path.join(work, f"np{ranks}_" + "_".join(f.strip("-").replace("=", "_")
                                                        for f in flags))
        extra = ["--microbatches", str(MICRO_BATCHES)] if "--pp" in flags else []
        out = run(mpi + ["-np", str(ranks), tessel] + common(d, sets) + flags + extra,
                  env=env).stdout
        if ("--etp" in flags) != ("expert tensor parallel: each expert's FFN of 2 MoE layers" in out):
            fail(f"{what}: the run's report of the experts' split does not match --etp\n"
                 f"{out[-2000:]}")
        if "--pp" in flags and "pipeline: " not in out:
            fail(f"{what}: the run did not report its pipeline\n{out[-2000:]}")
        if "--pp" in flags and "--etp" not in flags:
            check_stage_cut(tessel, mpi, env, work, config, out, flags, what)
        worst = compare_losses(ref, d, what, STEPS)
        norms = check_grad_norms(ref, d, what)
        drops, aux = check_routing(ref, d, what, need_drops=True)
        if mode == "ep":
            check_all_to_all(d, what)
        worst_p, name, worst_t = compare_params(final_params(ref, STEPS), final_params(d, STEPS),
                                                what)
        print(f"{what}: {STEPS}-step losses within {worst:.1e} of one rank (grad_accum {accum}), the "
              f"same routing ({drops} pairs dropped in all), auxiliary losses within {aux:.1e}, "
              f"gradient norms within {norms:.1e}, final parameters within {worst_p:.1e} (worst "
              f"{name} {worst_t:.1e})")


if __name__ == "__main__":
    main()
