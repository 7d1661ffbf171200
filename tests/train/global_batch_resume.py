#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""The global batch survives a change of layout: a run at dp 2 with micro_batch 2 and grad_accum 3
(12 sequences per step) saves at step 10 and resumes at dp 3 with nothing but `--resume`; the
resumed run must take grad_accum 2 (saying so in one line) and continue the trajectory of one rank
training 12 sequences per step (every loss and the final parameters within RUN_REL_TOL). Resuming
at dp 5 is refused with the numbers that do not divide; `--set train.global_batch=24` on resume is
announced in one line and trains 24 sequences per step.

Usage: global_batch_resume.py TESSEL MPIRUN WORKDIR
"""
import os
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "common"))
from tessel_runs import (compare_losses, compare_params, fail, final_params, gpt2_config,  # noqa: E402
                         mpi_prefix, prepare_workdir, run, seed_resume, single_thread_env,
                         step_records, train_sets, write_json)


def main():
    tessel, mpirun, work = sys.argv[1], sys.argv[2], sys.argv[3]
    vocab = prepare_workdir(tessel, work)
    config = write_json(os.path.join(work, "config.json"),
                        gpt2_config(vocab, n_positions=16, n_embd=16, n_layer=2, n_head=2))
    steps = 20
    common = ["train"] + train_sets(config, os.path.join(work, "data"), steps, seq_len=8,
                                    extra=["checkpoint.interval=10"])
    env = single_thread_env()
    mpi = mpi_prefix(mpirun)
    ref = os.path.join(work, "ref")
    run([tessel] + common + ["--set", "train.micro_batch=12", "--set", "checkpoint.dir=" + ref],
        env=env)
    src = os.path.join(work, "dp2")
    run(mpi + ["-np", "2", tessel] + common + ["--dp", "2", "--set", "train.micro_batch=2",
                                             "--set", "train.grad_accum=3",
                                             "--set", "checkpoint.dir=" + src], env=env)
    compare_losses(ref, src, "dp 2 x micro_batch 2 x grad_accum 3", steps)

    # dp 3, the checkpoint's configuration: grad_accum becomes 12 / (2 x 3) = 2.
    d3 = os.path.join(work, "dp3")
    seed_resume(src, "step_000010", d3)
    out = run(mpi + ["-np", "3", tessel, "train", "--resume", d3, "--dp", "3"], env=env).stdout
    want = "note: train.grad_accum = 2 (configured 3): train.global_batch = 12 sequences over dp 3"
    if want not in out:
        fail(f"resume at dp 3 did not say '{want}':\n{out[-2000:]}")
    worst = compare_losses(ref, d3, "saved at dp 2, resumed at dp 3", steps)
    rel_p = compare_params(final_params(ref, steps), final_params(d3, steps), "dp 3")[0]
    tokens = [j["tokens"] for j in step_records(d3)]
    if tokens[-1] - tokens[-2] != 12 * 8:
        fail(f"resumed at dp 3: {tokens[-1] - tokens[-2]} tokens per step, expected {12 * 8}")
    print(f"saved at dp 2, resumed at dp 3 (grad_accum 3 -> 2): losses within {worst:.1e}, "
          f"final parameters within {rel_p:.1e}")

    # dp 5: 12 is not a whole number of 2 x 5 micro-steps.
    d5 = os.path.join(work, "dp5")
    seed_resume(src, "step_000010", d5)
    p = subprocess.run(mpi + ["-np", "5", tessel, "train", "--resume", d5, "--dp", "5"], env=env,
                       capture_output=True, text=True)
    text = p.stdout + p.stderr
    want = "train.global_batch = 12 sequences per step is not a whole number of micro-steps"
    if p.returncode == 0 or want not in text:
        fail(f"resume at dp 5: exit {p.returncode}, expected an error saying '{want}':\n{text[-2000:]}")
    print("resume at dp 5: refused (12 sequences do not split into micro-steps of 2 x 5)")

    # A deliberate change is said once.
    d24 = os.path.join(work, "gb24")
    seed_resume(src, "step_000010", d24)
    out = run(mpi + ["-np", "2", tessel, "train", "--resume", d24, "--dp", "2",
                     "--set", "train.global_batch=24"], env=env).stdout
    want = "note: the global batch changes from 12 to 24 sequences per step at step 10"
    if want not in out:
        fail(f"resume with train.global_batch=24 did not say '{want}':\n{out[-2000:]}")
    tokens = [j["tokens"] for j in step_records(d24)]
    if tokens[-1] - tokens[-2] != 24 * 8:
        fail(f"global batch 24: {tokens[-1] - tokens[-2]} tokens per step, expected {24 * 8}")
    print("resume with train.global_batch=24: announced, 192 tokens per step")


if __name__ == "__main__":
    main()
