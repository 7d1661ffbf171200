# SPDX-License-Identifier: Apache-2.0
"""Helpers shared by the multi-rank equivalence scripts (tests/train/*_equivalence.py,
tests/integration/layout_matrix.py): running `tessel`, a tiny tokenizer, data and GPT-2 config,
the common `tessel train` settings, reading train.jsonl and safetensors files, and comparing a
run's losses and final parameters against a one-rank reference.

A script imports it with its directory put on sys.path relative to the script's own __file__.
"""
import json
import os
import shutil
import struct
import subprocess
import sys
from array import array


def fail(msg, script=None):
    """Print `SCRIPT: FAIL: msg` and exit 1; SCRIPT defaults to the running script's name."""
    if script is None:
        script = os.path.splitext(os.path.basename(sys.argv[0]))[0]
    print(f"{script}: FAIL: " + msg, file=sys.stderr)
    sys.exit(1)


def run(cmd, **kw):
    p = subprocess.run(cmd, capture_output=True, text=True, **kw)
    if p.returncode != 0:
        fail(f"{' '.join(cmd)} exited {p.returncode}\n--- stdout\n{p.stdout[-3000:]}\n--- stderr\n{p.stderr[-3000:]}")
    return p


def run_json(cmd):
    """Runs a `--json` command with one compute thread and returns its last stdout line, parsed."""
    return json.loads(run(cmd, env=single_thread_env()).stdout.strip().splitlines()[-1])


def single_thread_env():
    """The environment every run gets: one compute thread per rank."""
    return dict(os.environ, TESSEL_NUM_THREADS="1", OMP_NUM_THREADS="1")


def mpi_prefix(mpirun):
    return [mpirun, "--oversubscribe", "--bind-to", "none"]


def small_tokenizer(d):
    """A byte-level BPE vocabulary: the 256 byte symbols of GPT-2's byte-to-unicode table."""
    os.makedirs(d, exist_ok=True)
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs, n = bs[:], 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    vocab = {chr(c): i for i, c in enumerate(cs)}
    vocab["<|endoftext|>"] = len(vocab)
    with open(os.path.join(d, "vocab.json"), "w") as f:
        json.dump(vocab, f)
    with open(os.path.join(d, "merges.txt"), "w") as f:
        f.write("#version: 0.2\n")
    return len(vocab)


def prepare_workdir(tessel, work):
    """Empty WORK, write the small tokenizer to WORK/tok and prepare WORK/data from the GPL-3 text
    (blank-line split, 10% validation). Returns the vocabulary size."""
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    vocab = small_tokenizer(os.path.join(work, "tok"))
    run([tessel, "data", "prepare", "--tokenizer", os.path.join(work, "tok"), "--input",
         "/usr/share/common-licenses/GPL-3", "--out", os.path.join(work, "data"),
         "--split", "blank", "--val-fraction", "0.1"])
    return vocab


def remove_workdir(work):
    """Delete WORK after a passing run: the heavy tests leave gigabytes of checkpoints there. A
    failing run exits in fail() first and keeps WORK to look at."""
    shutil.rmtree(work, ignore_errors=True)


def gpt2_config(vocab, n_positions, n_embd, n_layer, n_head, dropout=0.0):
    """A tiny GPT-2, dropout off unless given (embd_pdrop and resid_pdrop; tessel's fused
    attention has no attention dropout, so attn_pdrop stays 0). Every layout draws the
    one-process masks (docs/PARALLEL.md, "Dropout"), so runs with dropout on compare as closely."""
    return {"model_type": "gpt2", "vocab_size": vocab, "n_positions": n_positions, "n_embd": n_embd,
            "n_layer": n_layer, "n_head": n_head, "resid_pdrop": dropout, "embd_pdrop": dropout,
            "attn_pdrop": 0.0}


def write_json(path, obj):
    with open(path, "w") as f:
        json.dump(obj, f)
    return path


def train_sets(config, data_dir, steps, seq_len, extra=()):
    """The `--set` arguments every equivalence run shares (warmup 3, lr 3e-3, no evaluation or
    samples, a log line every 10 steps, a given GEMM peak: the start-up measurement of MFU's
    denominator is most of a small run's time), then `--set` for each KEY=VALUE string in extra."""
    sets = [f"model.config={config}", f"data.dir={data_dir}", f"train.steps={steps}",
            f"train.seq_len={seq_len}", "optim.warmup_steps=3", "optim.lr=3e-3",
            "eval.interval=0", "sample.tokens=0", "log.interval=10",
            "machine.peak_gflops=100"] + list(extra)
    return [a for s in sets for a in ("--set", s)]


def seed_resume(src_run, step_dir, d):
    """Make D a run directory to `--resume`: SRC_RUN's checkpoint STEP_DIR, `latest` naming it,
    and SRC_RUN's train.jsonl."""
    shutil.copytree(os.path.join(src_run, step_dir), os.path.join(d, step_dir))
    with open(os.path.join(d, "latest"), "w") as f:
        f.write(step_dir + "\n")
    shutil.copy(os.path.join(src_run, "train.jsonl"), os.path.join(d, "train.jsonl"))


def read_safetensors(path, check_f32=True):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        data = f.read()
    out = {}
    for name, e in header.items():
        if name == "__metadata__":
            continue
        if check_f32:
            assert e["dtype"] == "F32", e
        b, end = e["data_offsets"]
        out[name] = array("f", data[b:end])
    return out


def final_params(run_dir, steps, check_f32=True):
    """The model of RUN_DIR's checkpoint at step STEPS."""
    return read_safetensors(os.path.join(run_dir, f"step_{steps:06d}", "model.safetensors"), check_f32)


def step_records(run_dir):
    """The per-step records of RUN_DIR/train.jsonl."""
    with open(os.path.join(run_dir, "train.jsonl")) as f:
        return [j for j in map(json.loads, f) if "step" in j]


def losses(run_dir):
    return {j["step"]: j["loss"] for j in step_records(run_dir)}


# The bound for a multi-rank run against one rank, 20 steps of AdamW (lr 3e-3) on a tiny GPT-2 in
# f32: relative, for each step's loss and gradient norm and for the final parameters (relative L2).
# The runs differ only in summation order (sums over ranks, another micro-batch split). Measured on
# AVX2 (docs/PARALLEL.md): losses within 1.3e-7, parameters within 5e-7 for every layout. Another
# vector width leaves each reduction's length n and its error bound u*sqrt(n) unchanged and only
# changes which rounding errors occur, a factor of order one on the realised difference, so 20x
# over the measurement holds for every kernel set. The derived bound of tests/common/tolerance.h
# (adam_tolerance over 20 steps, up to 256 tokens a step, 8 stages) is about 1e-4; it is not used
# because the layout matrix also checks that the clipping norm counts every element once, and a
# small tensor counted twice (one holding 1e-4 of the squared norm, a LayerNorm bias) moves the
# norm by 5e-5: 1e-5 still sees it.
RUN_REL_TOL = 1e-5


def compare_losses(ref_dir, dir_, what, steps, per_step=None):
    """Every step's loss of DIR_ within RUN_REL_TOL (relative) of REF_DIR's; per_step(s), if given,
    runs after step s's check. Returns the largest relative difference."""
    a, b = losses(ref_dir), losses(dir_)
    worst = 0.0
    for s in range(1, steps + 1):
        if s not in b:
            fail(f"{what}: no loss for step {s}")
        rel = abs(a[s] - b[s]) / abs(a[s])
        worst = max(worst, rel)
        if rel > RUN_REL_TOL:
            fail(f"{what}: step {s} loss {b[s]!r} vs one rank {a[s]!r} (relative {rel:.2e} > {RUN_REL_TOL})")
        if per_step is not None:
            per_step(s)
    return worst


def check_same_tensors(pa, pb, what):
    """PB holds the tensors of PA, each with as many elements."""
    if sorted(pa) != sorted(pb):
        fail(f"{what}: checkpoint tensors {sorted(pb)} differ from one rank's {sorted(pa)}")
    for name, x in pa.items():
        if len(x) != len(pb[name]):
            fail(f"{what}: {name} has {len(pb[name])} elements, one rank's {len(x)}")


def compare_params(pa, pb, what):
    """All parameters as one vector: relative L2 distance of PB from PA, within RUN_REL_TOL. Returns it
    with the name and relative L2 distance of the tensor farthest apart."""
    diff2 = norm2 = 0.0
    worst_name, worst_t = "", 0.0
    for name, x in pa.items():
        y = pb[name]
        d2 = sum((u - v) ** 2 for u, v in zip(x, y))
        n2 = sum(u * u for u in x)
        diff2 += d2
        norm2 += n2
        if n2 > 0 and (d2 / n2) ** 0.5 > worst_t:
            worst_name, worst_t = name, (d2 / n2) ** 0.5
    rel = (diff2 / norm2) ** 0.5
    if rel > RUN_REL_TOL:
        fail(f"{what}: final parameters differ by {rel:.2e} (relative L2) > {RUN_REL_TOL}")
    return rel, worst_name, worst_t


def check_generate_tp(tessel, mpi, work, model_config, tps, prompt_ids, env):
    """Greedy `tessel generate --tp N` for each N in TPS emits one rank's ids. The model is
    MODEL_CONFIG initialised with large weights (initializer_range 0.5: more varied ids than a
    trained tiny model gives) by `tessel init` into WORK/model."""
    model = os.path.join(work, "model")
    gen_config = write_json(os.path.join(work, "config_gen.json"),
                            dict(model_config, initializer_range=0.5))
    run([tessel, "init", "--config", gen_config, "--out", model, "--seed", "7"], env=env)
    gen = ["generate", "-m", model, "--prompt-ids", ",".join(map(str, prompt_ids)), "-n", "16",
           "--temp", "0", "--format", "json"]
    want = json.loads(run([tessel] + gen, env=env).stdout)["generated_ids"]
    for tp in tps:
        got = json.loads(run(mpi + ["-np", str(tp), tessel] + gen + ["--tp", str(tp)], env=env).stdout)
        if got["generated_ids"] != want:
            fail(f"generate --tp {tp}: ids {got['generated_ids']} vs one rank {want}")
    print(f"generate --tp {list(tps)}: the same {len(want)} greedy ids as one rank "
          f"({len(set(want))} distinct)")
