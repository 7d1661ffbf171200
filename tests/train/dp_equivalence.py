#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Data-parallel training equals one rank: `mpirun -np N tessel train --dp N` with micro_batch B/N
against `tessel train` with micro_batch B, on the same data and initialisation, for 20 steps.
Every step's loss and the final parameters must agree to 1e-5 (relative), for ZeRO stages 0 to 3.
Every step issues exactly the collectives its stage should, of the expected sizes (counted by the
flight recorder, reported in train.jsonl), and each rank's parameter + gradient + optimizer bytes
are within 10% of the ZeRO formula. Checkpoints (per-rank shards under ZeRO) resumed at another dp
size and stage continue the same trajectory.

Usage: dp_equivalence.py TESSEL MPIRUN WORKDIR DP [DP ...]
"""
import json
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "common"))
from tessel_runs import (RUN_REL_TOL, compare_losses, compare_params, fail, final_params,  # noqa: E402
                         gpt2_config, mpi_prefix, prepare_workdir, run, seed_resume,
                         single_thread_env, step_records, train_sets, write_json)


def val_losses(run_dir):
    with open(os.path.join(run_dir, "train.jsonl")) as f:
        return [j["val_loss"] for j in map(json.loads, f) if "eval_step" in j]


def compare(ref_dir, dir_, what, steps):
    # The evaluation splits the same windows over the ranks: the same validation loss, up to the
    # summation order of the ranks' sums (RUN_REL_TOL, tests/common/tessel_runs.py).
    va, vb = val_losses(ref_dir), val_losses(dir_)
    if not va or len(va) != len(vb) or abs(va[-1] - vb[-1]) > RUN_REL_TOL * abs(va[-1]):
        fail(f"{what}: validation losses {vb} vs one rank {va}")
    worst = compare_losses(ref_dir, dir_, what, steps)
    # All parameters as one vector: relative L2 distance. (Per element it is looser: entries with a
    # zero or tiny true gradient, like the key bias, whose q.b term softmax ignores, receive
    # rounding noise that Adam normalises into updates of lr size, in any implementation.)
    worst_p, worst_name, worst_t = compare_params(final_params(ref_dir, steps), final_params(dir_, steps), what)
    print(f"{what}: 20-step losses within {worst:.1e}, final parameters within {worst_p:.1e} "
          f"(relative L2; worst tensor {worst_name} {worst_t:.1e})")


def expected_collectives(cfg, dp, stage):
    """(count by kind, bytes) one step issues on the dp axis, as docs/PARALLEL.md describes.
    Bytes are those of the tensor each call is given: an all_gather's is this rank's block, a
    reduce_scatter's the whole padded bucket."""
    e, v, p, n = cfg["n_embd"], cfg["vocab_size"], cfg["n_positions"], cfg["n_layer"]
    block = 12 * e * e + 13 * e
    psi = v * e + p * e + n * block + 2 * e
    pad = lambda x: -(-x // dp) * dp
    loss, norm = 8, 8  # the mean loss and stage 2-3's square sum (both f64)
    # Stages 0-2: one bucket, the model being far below the 25 MiB default.
    if stage == 0:
        return {"all_reduce": 2}, 4 * psi + loss
    if stage == 1:
        return {"all_reduce": 2, "all_gather": 1}, 4 * psi + loss + 4 * pad(psi) // dp
    if stage == 2:
        return ({"reduce_scatter": 1, "all_gather": 1, "all_reduce": 2},
                4 * pad(psi) + 4 * pad(psi) // dp + loss + norm)
    # Stage 3: units wte, wpe, h.0 .. h.{n-1}, ln_f; each gathered in forward and again in
    # backward, and its gradients reduce-scattered once.
    units = [v * e, p * e] + [block] * n + [2 * e]
    return ({"all_gather": 2 * len(units), "reduce_scatter": len(units), "all_reduce": 2},
            sum(2 * 4 * pad(u) // dp + 4 * pad(u) for u in units) + loss + norm)


def check_steps(run_dir, cfg, dp, stage, what):
    """Collectives per step and per-rank bytes against the formula, from rank 0's train.jsonl."""
    want, want_bytes = expected_collectives(cfg, dp, stage)
    e = cfg["n_embd"]
    psi = (cfg["vocab_size"] + cfg["n_positions"]) * e + cfg["n_layer"] * (12 * e * e + 13 * e) + 2 * e
    per_param = {0: 16, 1: 8 + 8 / dp, 2: 4 + 12 / dp, 3: 16 / dp}[stage]
    for r in step_records(run_dir):
        if r["collectives"] != want or r["collective_bytes"] != want_bytes:
            fail(f"{what}: step {r['step']} issued {r['collectives']} ({r['collective_bytes']} bytes), "
                 f"expected {want} ({want_bytes} bytes)")
        held = r["param_bytes"] + r["grad_bytes"] + r["optimizer_bytes"]
        formula = per_param * psi
        if abs(r["expected_state_bytes"] - formula) > 0.001 * formula or abs(held / formula - 1) > 0.1:
            fail(f"{what}: step {r['step']} holds {held} bytes of parameters + gradients + "
                 f"optimizer state; the ZeRO formula says {formula:.0f} (reported "
                 f"{r['expected_state_bytes']})")
    print(f"{what}: every step issued {want} ({want_bytes} bytes); {held} bytes of model state "
          f"per rank vs {formula:.0f} by the formula")


def main():
    tessel, mpirun, work = sys.argv[1], sys.argv[2], sys.argv[3]
    dps = [int(x) for x in sys.argv[4:]]
    vocab = prepare_workdir(tessel, work)
    cfg = gpt2_config(vocab, n_positions=32, n_embd=24, n_layer=2, n_head=2)
    config = write_json(os.path.join(work, "config.json"), cfg)
    batch, steps = 12, 20
    common = ["train"] + train_sets(config, os.path.join(work, "data"), steps, seq_len=16,
                                    extra=["machine.peak_gflops=100", "checkpoint.interval=10"])
    env = single_thread_env()
    ref = os.path.join(work, "dp1")
    run([tessel] + common + ["--set", f"train.micro_batch={batch}", "--set", "checkpoint.dir=" + ref], env=env)
    mpi = mpi_prefix(mpirun)
    for dp in dps:
        for stage in (0, 1, 2, 3):
            d = os.path.join(work, f"dp{dp}_zero{stage}")
            run(mpi + ["-np", str(dp), tessel] + common +
                ["--dp", str(dp), "--set", f"train.micro_batch={batch // dp}",
                 "--set", f"parallel.zero_stage={stage}", "--set", "checkpoint.dir=" + d], env=env)
            compare(ref, d, f"dp={dp} zero_stage={stage}", steps)
            check_steps(d, cfg, dp, stage, f"dp={dp} zero_stage={stage}")
    # A checkpoint is layout-independent: dp=2 ZeRO-1 shards at step 10, resumed at dp=4 ZeRO-2 and
    # at dp=4 ZeRO-3, continue the same trajectory.
    if len(dps) >= 2:
        a, b = dps[0], dps[1]
        src = os.path.join(work, f"dp{a}_zero1", "step_000010")
        shards = sorted(x for x in os.listdir(src) if x.startswith("pieces_"))
        if shards != [f"pieces_{r:05d}_of_{a:05d}.safetensors" for r in range(a)] + ["pieces_index.json"]:
            fail(f"dp={a} zero_stage=1 checkpoint holds piece files {shards}")
        with open(os.path.join(src, "COMMITTED")) as f:
            manifest = json.load(f)["files"]
        if not all(x in manifest for x in shards + ["model.safetensors"]):
            fail(f"the manifest of {src} does not list every shard: {sorted(manifest)}")
        for stage in (2, 3):
            d = os.path.join(work, f"resume_dp{a}_zero1_to_dp{b}_zero{stage}")
            seed_resume(os.path.join(work, f"dp{a}_zero1"), "step_000010", d)
            run(mpi + ["-np", str(b), tessel, "train", "--resume", d, "--dp", str(b),
                       "--set", f"train.micro_batch={batch // b}", "--set", f"parallel.zero_stage={stage}"],
                env=env)
            compare(ref, d, f"resume dp={a} zero_stage=1 -> dp={b} zero_stage={stage}", steps)

if __name__ == "__main__":
    main()
