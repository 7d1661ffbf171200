#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Pipeline-parallel training equals one rank: `mpirun -np N tessel train --pp N --microbatches M
--schedule S` against `tessel train` with train.grad_accum = M (a pipeline's micro-batches are the
accumulation steps, so both consume the same batches), on the same data and initialisation, for 20
steps. Every step's loss and the final parameters must agree to 1e-5 (relative), for pp 2 and 4,
each schedule, M in {1, 3, 8} (a subset covering every value), and pp=2 x dp=2 with ZeRO stages 1
and 2; and stages cut unevenly by parallel.pipeline_split (one block on the first stage and five on
the last; the head alone on the last; an interleaved 2,1,1,2), which the run's pipeline line must
show. A mode of train.recompute per pipeline rank (full, selective, none, none over pp 4 1F1B;
selective, full over interleaved), and one on a rank's first blocks only (full:1 and selective:1
over 1F1B, full:2 and selective:1 over interleaved; full:1+selective and selective:2+full, another
mode on the others, over interleaved), gives bitwise the losses and parameters of
the same layout without recomputation, with HFU above MFU in its records; a list of the wrong
length, or a count above the rank's blocks, is refused at start. A pp=2 x dp=2
checkpoint resumed on one rank continues the same trajectory. Dropout is on
(0.1): each stage draws the masks one process draws for the same micro-batch (docs/PARALLEL.md,
"Dropout"), and the resumed run continues them.

Usage: pp_equivalence.py TESSEL MPIRUN WORKDIR
"""
import os
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "common"))
from tessel_runs import (compare_losses, compare_params, fail, final_params,  # noqa: E402
                         gpt2_config, losses, mpi_prefix, prepare_workdir, run, seed_resume,
                         single_thread_env, step_records,
                         train_sets, write_json)


def compare(ref_dir, dir_, what, steps):
    worst = compare_losses(ref_dir, dir_, what, steps)
    # All parameters as one vector: relative L2 distance. (Per element it is looser: entries with a
    # zero or tiny true gradient, like the key bias, whose q.b term softmax ignores, receive
    # rounding noise that Adam normalises into updates of lr size, in any implementation.)
    worst_p, worst_name, worst_t = compare_params(final_params(ref_dir, steps), final_params(dir_, steps), what)
    print(f"{what}: 20-step losses within {worst:.1e}, final parameters within {worst_p:.1e} "
          f"(relative L2; worst tensor {worst_name} {worst_t:.1e})")


def main():
    tessel, mpirun, work = sys.argv[1], sys.argv[2], sys.argv[3]
    vocab = prepare_workdir(tessel, work)
    # Six blocks: pp=4 with two virtual stages per rank needs 8 stages of embedding, blocks, head.
    config = write_json(os.path.join(work, "config.json"),
                        gpt2_config(vocab, n_positions=32, n_embd=24, n_layer=6, n_head=2,
                                    dropout=0.1))
    batch, steps = 4, 20
    common = ["train"] + train_sets(config, os.path.join(work, "data"), steps, seq_len=16,
                                    extra=["machine.peak_gflops=100", "checkpoint.interval=10"])
    env = single_thread_env()
    refs = {}
    for m in (1, 3, 8):
        refs[m] = os.path.join(work, f"pp1_m{m}")
        run([tessel] + common + ["--set", f"train.micro_batch={batch}", "--set", f"train.grad_accum={m}",
                                 "--set", "checkpoint.dir=" + refs[m]], env=env)
    mpi = mpi_prefix(mpirun)
    # (pp, dp, schedule, M, zero stage, split): every pp, schedule and M at least once; the
    # split's stages as the pipeline line names them.
    cases = [(2, 1, "gpipe", 3, 0, ""), (2, 1, "1f1b", 1, 0, ""), (4, 1, "gpipe", 8, 0, ""),
             (4, 1, "1f1b", 3, 0, ""), (4, 1, "interleaved:2", 8, 0, ""), (2, 2, "1f1b", 3, 1, ""),
             (2, 2, "interleaved:2", 8, 2, ""), (2, 1, "1f1b", 3, 0, "1,5"),
             (2, 1, "gpipe", 3, 0, "6,0"), (2, 1, "interleaved:2", 8, 0, "2,1,1,2")]
    stages = {"1,5": "embedding..block.0 | block.1..head",
              "6,0": "embedding..block.5 | head",
              "2,1,1,2": "embedding..block.1 | block.2 | block.3 | block.4..head"}
    for pp, dp, schedule, m, stage, split in cases:
        name = (f"pp{pp}_dp{dp}_{schedule.replace(':', '')}_m{m}_zero{stage}" +
                (f"_split{split.replace(',', '')}" if split else ""))
        d = os.path.join(work, name)
        p = run(mpi + ["-np", str(pp * dp), tessel] + common +
                ["--pp", str(pp), "--dp", str(dp), "--schedule", schedule, "--microbatches", str(m),
                 "--set", f"train.micro_batch={batch // dp}", "--set", f"parallel.zero_stage={stage}",
                 "--set", "checkpoint.dir=" + d] +
                (["--set", f"parallel.pipeline_split={split}"] if split else []), env=env)
        if split and stages[split] not in p.stdout + p.stderr:
            fail(f"pipeline_split={split}: the run's pipeline line does not show the stages "
                 f"'{stages[split]}':\n{(p.stdout + p.stderr)[-2000:]}")
        compare(refs[m], d, f"pp={pp} dp={dp} {schedule} M={m} zero_stage={stage}" +
                (f" split {split}" if split else ""), steps)
    # train.recompute per pipeline rank: the arithmetic of the same layout without it, bit for bit
    # (recomputation replays the forward and its dropout masks exactly).
    for pp, schedule, m, modes, plain in [
            (4, "1f1b", 3, "full,selective,none,none", "pp4_dp1_1f1b_m3_zero0"),
            (2, "interleaved:2", 8, "selective,full", "pp2_dp1_interleaved2_m8_zero0_split2112"),
            # Finer than a rank: a mode on the rank's first blocks only (mode:N), across the
            # interleaved rank's two stages (rank 0 runs blocks 0, 1 and 3; rank 1 2, 4 and 5).
            (4, "1f1b", 3, "full:1,selective:1*2,none", "pp4_dp1_1f1b_m3_zero0"),
            (2, "interleaved:2", 8, "full:2,selective:1", "pp2_dp1_interleaved2_m8_zero0_split2112"),
            # And another mode on the rank's other blocks (mode:N+rest): rank 0 full on block 0,
            # selective on 1 and 3; rank 1 selective on 2 and 4, full on 5.
            (2, "interleaved:2", 8, "full:1+selective,selective:2+full",
             "pp2_dp1_interleaved2_m8_zero0_split2112")]:
        tag = modes.replace(',', '_').replace(':', 'x').replace('*', 'r').replace('+', 'p')
        d = os.path.join(work, f"pp{pp}_{schedule.replace(':', '')}_recompute_{tag}")
        extra = ["--set", "parallel.pipeline_split=2,1,1,2"] if pp == 2 else []
        run(mpi + ["-np", str(pp), tessel] + common +
            ["--pp", str(pp), "--schedule", schedule, "--microbatches", str(m),
             "--set", f"train.micro_batch={batch}", "--set", f"train.recompute={modes}",
             "--set", "checkpoint.dir=" + d] + extra, env=env)
        what = f"pp={pp} {schedule} M={m} recompute {modes}"
        want, got = losses(os.path.join(work, plain)), losses(d)
        for s in range(1, steps + 1):
            if got.get(s) != want[s]:
                fail(f"{what}: step {s} loss {got.get(s)!r}, without recomputation {want[s]!r}")
        pa, pb = final_params(os.path.join(work, plain), steps), final_params(d, steps)
        for name, x in pa.items():
            if x != pb[name]:
                fail(f"{what}: parameter {name} differs from the run without recomputation")
        records = step_records(d)
        if not all(r.get("hfu", 0) > r["mfu"] > 0 for r in records if "mfu" in r):
            fail(f"{what}: every step's hfu should exceed its mfu: {records[-1]}")
        print(f"{what}: losses and parameters bitwise those without recomputation")
    # Refused at start: three modes for two ranks, and more blocks than a rank runs (6 blocks
    # over pp 2: three each).
    for spec, message in [("full,none,none", "gives 3 modes for --pp 2"),
                          ("full:4", "names more blocks than the 3 this rank runs")]:
        p = subprocess.run(mpi + ["-np", "2", tessel] + common +
                           ["--pp", "2", "--microbatches", "2", "--set", f"train.recompute={spec}",
                            "--set", "checkpoint.dir=" + os.path.join(work, "recompute_refused")],
                           capture_output=True, text=True, env=env)
        if p.returncode == 0 or message not in p.stderr:
            fail(f"train.recompute={spec} at pp 2: exit {p.returncode}\n{p.stderr[-2000:]}")
    # A pp=2 x dp=2 ZeRO-1 checkpoint is the usual whole-model checkpoint: resumed on one rank at
    # step 10, it continues the same trajectory.
    src = os.path.join(work, "pp2_dp2_1f1b_m3_zero1")
    d = os.path.join(work, "resume_pp2_dp2_to_pp1")
    seed_resume(src, "step_000010", d)
    run([tessel, "train", "--resume", d, "--set", f"train.micro_batch={batch}"], env=env)
    compare(refs[3], d, "resume pp=2 dp=2 zero_stage=1 1f1b M=3 -> one rank", steps)


if __name__ == "__main__":
    main()
