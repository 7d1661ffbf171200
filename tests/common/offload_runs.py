# SPDX-License-Identifier: Apache-2.0
"""What the memory-offload equivalence scripts share: the `--set` flags of an offloaded run, the
step records and validation losses they compare, the check that every tier was used, the
byte-for-byte checkpoint comparison, and the resumes across offloaded and in-memory runs."""
import filecmp
import json
import os

from tessel_runs import fail, gpt2_config, run, seed_resume, step_records, write_json


def small_gpt2(work, vocab):
    """The GPT-2 the offload equivalence scripts train (C = 26, 2 heads, 5 blocks, positions up to
    17), written as work/config.json; its path."""
    return write_json(os.path.join(work, "config.json"),
                      gpt2_config(vocab, n_positions=17, n_embd=26, n_layer=5, n_head=2))


def offload_sets(nvme, host_chunks, device_chunks, chunk):
    """`--set` flags for chunks of `chunk` bytes, device and host tiers of so many chunks, the rest
    in `nvme`, prefetching 4 ahead."""
    sets = [f"memory.chunk_size={chunk}", f"memory.host_budget={host_chunks * chunk}",
            f"memory.device_budget={device_chunks * chunk}", f"memory.nvme_dir={nvme}",
            "memory.prefetch=4"]
    return [a for s in sets for a in ("--set", s)]


def step_losses(d, first=1):
    """(step, loss, grad norm) of every step from `first`."""
    return [(r["step"], r["loss"], r["grad_norm"]) for r in step_records(d) if r["step"] >= first]


def same_records(ref, d, what, steps, first=1):
    """Run `d` has the (step, loss, grad norm) of run `ref`, bit for bit, for steps first..steps."""
    a, b = step_losses(ref, first), step_losses(d, first)
    if len(a) != steps - first + 1 or a != b:
        fail(f"{what}: (step, loss, grad norm) {b} differ from the in-memory run's {a}")


def val_losses(d):
    """The validation losses of run `d`, in order."""
    with open(os.path.join(d, "train.jsonl")) as f:
        return [j["val_loss"] for j in map(json.loads, f) if "val_loss" in j]


def same_val_losses(ref, d, what, count):
    """Run `d` has run `ref`'s `count` validation losses, bit for bit."""
    a, b = val_losses(ref), val_losses(d)
    if b != a or len(a) != count:
        fail(f"{what}: validation losses {b} differ from the in-memory run's {a}")


def check_tiers(d, what, steps):
    """Every one of the `steps` steps held chunks in every tier, and every step after the first
    read and wrote NVMe."""
    recs = [r["offload"] for r in step_records(d)]
    if len(recs) != steps or not all(r["device_bytes"] > 0 and r["host_bytes"] > 0 and
                                     r["nvme_bytes"] > 0 for r in recs):
        fail(f"{what}: some step did not hold chunks in every tier: {recs}")
    if not all(r["nvme_read_bytes"] > 0 and r["nvme_write_bytes"] > 0 for r in recs[1:]):
        fail(f"{what}: a step without NVMe traffic: {recs}")


def precision_records(d, first=1):
    """(step, loss, grad norm, loss scale, overflow, skipped) of every step from `first`."""
    return [(r["step"], r["loss"], r["grad_norm"], r.get("loss_scale"), r.get("overflow"),
             r.get("skipped")) for r in step_records(d) if r["step"] >= first]


def same_checkpoint(ref, d, step, what):
    """Step `step`'s checkpoint files in run `d` are those of `ref`, byte for byte; their names."""
    da, db = (os.path.join(x, f"step_{step:06d}") for x in (ref, d))
    files = sorted(f for f in os.listdir(da) if f.endswith(".safetensors"))
    if "model.safetensors" not in files or sorted(
            f for f in os.listdir(db) if f.endswith(".safetensors")) != files:
        fail(f"{what}: checkpoint files {sorted(os.listdir(db))} vs {files}")
    for f in files:
        if not filecmp.cmp(os.path.join(da, f), os.path.join(db, f), shallow=False):
            fail(f"{what}: {f} of step {step} differs from the in-memory run's")
    return files


def resumes_both_ways(launch, layout, ref, off, work, steps, save, offloaded, what, env):
    """Step `save`'s checkpoint of the offloaded run `off` resumed in memory, and the in-memory run
    `ref`'s resumed offloaded (`offloaded`: its `--set` flags), each bit for bit on `ref`'s
    trajectory and final checkpoint. `launch`: the command before `train` (mpirun and tessel);
    `layout`: the run's layout flags; `what`: the layout, for messages."""
    r = os.path.join(work, "resume_offload_in_memory")
    seed_resume(off, f"step_{save:06d}", r)
    run(launch + ["train", "--resume", r] + layout +
        ["--set", "memory.device_budget=", "--set", "memory.nvme_dir="], env=env)
    label = f"the offloaded {what} checkpoint resumed in memory"
    same_records(ref, r, label, steps, first=save + 1)
    same_checkpoint(ref, r, steps, label)
    r = os.path.join(work, "resume_memory_offloaded")
    seed_resume(ref, f"step_{save:06d}", r)
    run(launch + ["train", "--resume", r] + layout + offloaded, env=env)
    label = f"the in-memory {what} checkpoint resumed offloaded"
    same_records(ref, r, label, steps, first=save + 1)
    same_checkpoint(ref, r, steps, label)
    print(f"{what} checkpoints: offloaded -> in memory and in memory -> offloaded, both bitwise "
          "on the uninterrupted trajectory")
