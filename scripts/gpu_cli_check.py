#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""`tessel train` and `tessel generate` on a CUDA device against the same commands on the host,
then GPT-2 124M's training throughput on the device; run by scripts/gpu_check on a GPU machine.

1. The main job's small model (configs/train-tiny.toml) trains for STEPS steps on the host and on
   the GPU, in fp32 and in bf16: the per-step losses must agree (fp32: the first step within
   1e-5 relative, every step within 2e-2, as summation order alone separates them; bf16: within
   5e-2), and so must the validation loss.
2. The host run's final checkpoint generates greedily on the host and on the GPU: the same ids.
3. GPT-2 124M (bf16, micro-batch 16 and 4 x 1024 tokens) trains a few steps on the GPU: tokens/s
   and MFU as llm.c counts it (6N + attention FLOPs per token against 989 TFLOP/s dense bf16).

Writes OUT/cli_check.json and prints one line per check; exits 1 when a check fails.
Usage: gpu_cli_check.py TESSEL_BINARY DATASET_DIR TOKENIZER_DIR OUT_DIR"""
import json
import os
import shutil
import subprocess
import sys
import time

STEPS = 30
H200_BF16_PEAK_GFLOPS = 989_000.0  # dense bf16, the vendor's figure (docs/BENCHMARKS.md)


def run(cmd, log, timeout, stderr_log=None, env=None):
    """Runs cmd with its output in log (stderr too, unless stderr_log names another file)."""
    start = time.time()
    with open(log, "w") as f, open(stderr_log or os.devnull, "w") as e:
        try:
            p = subprocess.run(cmd, stdout=f, stderr=e if stderr_log else subprocess.STDOUT,
                               timeout=timeout, env=dict(os.environ, **(env or {})))
            code = p.returncode
        except subprocess.TimeoutExpired:
            code = 124
    return code, time.time() - start


def jsonl(path):
    rows = []
    with open(path) as f:
        for line in f:
            line = line.strip()
            if line:
                rows.append(json.loads(line))
    return rows


def main():
    tessel, data, tokenizer, out = sys.argv[1:5]
    os.makedirs(out, exist_ok=True)
    work = os.path.join(out, "work")
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    # The dataset's manifest names its tokenizer by absolute path: point it at this machine's copy.
    ds = os.path.join(work, "data")
    shutil.copytree(data, ds)
    manifest = json.load(open(os.path.join(ds, "manifest.json")))
    manifest["tokenizer"]["path"] = os.path.abspath(tokenizer)
    json.dump(manifest, open(os.path.join(ds, "manifest.json"), "w"))
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    config = os.path.join(root, "configs", "train-tiny.toml")
    results, failures = {}, []

    def train(name, device, extra, timeout=300, env=None):
        run_dir = os.path.join(work, name)
        cmd = [tessel, "train", "-c", config, "--device", device, "--set", f"data.dir={ds}",
               "--set", f"checkpoint.dir={run_dir}", "--set", f"train.steps={STEPS}",
               "--set", "optim.warmup_steps=5", "--set", "eval.interval=0", "--set",
               "sample.tokens=16"] + extra
        code, seconds = run(cmd, os.path.join(out, name + ".log"), timeout, env=env)
        rows = jsonl(os.path.join(run_dir, "train.jsonl")) if code == 0 else []
        print(f"train {name} on {device}: exit {code}, {seconds:.1f} s", flush=True)
        if code != 0:
            failures.append(f"train {name}: exit {code} (see {name}.log)")
        return rows, run_dir

    for precision, first_band, band in [("fp32", 1e-5, 2e-2), ("bf16", 5e-2, 5e-2)]:
        extra = ["--set", f"train.precision={precision}"]
        host, host_dir = train(f"tiny_{precision}_cpu", "cpu", extra)
        gpu, _ = train(f"tiny_{precision}_cuda", "cuda", extra)
        hl = {r["step"]: r["loss"] for r in host if "loss" in r and "step" in r}
        gl = {r["step"]: r["loss"] for r in gpu if "loss" in r and "step" in r}
        steps = sorted(set(hl) & set(gl))
        rel = [abs(gl[s] - hl[s]) / abs(hl[s]) for s in steps]
        worst = max(rel) if rel else float("nan")
        hv = [r["val_loss"] for r in host if "val_loss" in r]
        gv = [r["val_loss"] for r in gpu if "val_loss" in r]
        val_rel = abs(gv[-1] - hv[-1]) / abs(hv[-1]) if hv and gv else float("nan")
        ok = (len(steps) == STEPS and rel[0] <= first_band and worst <= band and
              val_rel <= band)
        results[f"tiny_{precision}"] = {
            "steps": len(steps), "first_step_rel": rel[0] if rel else None,
            "max_rel": worst, "val_rel": val_rel,
            "host_final_loss": hl.get(STEPS), "gpu_final_loss": gl.get(STEPS),
            "host_step_ms": [r.get("step_ms") for r in host][-1] if host else None,
            "gpu_step_ms": [r.get("step_ms") for r in gpu][-1] if gpu else None}
        print(f"losses {precision}: {len(steps)} steps, first {rel[0] if rel else 'n/a'}, "
              f"worst {worst:.3g}, val {val_rel:.3g}: {'ok' if ok else 'FAIL'}", flush=True)
        if not ok:
            failures.append(f"tiny {precision}: losses differ beyond the band "
                            f"(first {rel[0] if rel else 'n/a'}, worst {worst}, val {val_rel})")
        if precision == "fp32" and host:
            ckpt = os.path.join(host_dir, open(os.path.join(host_dir, "latest")).read().strip())
            ids = {}
            for device in ["cpu", "cuda"]:
                log = os.path.join(out, f"generate_{device}.json")
                code, _ = run([tessel, "generate", "-m", ckpt, "--prompt-ids", "464,2068,7586",
                               "-n", "24", "--temp", "0", "--format", "json",
                               "--device", device], log, 120, log + ".err")
                try:
                    out_json = json.loads(open(log).read().strip().splitlines()[-1])
                    ids[device] = out_json["generated_ids"]
                except (ValueError, KeyError, IndexError):
                    ids[device] = None
                    failures.append(f"generate on {device}: exit {code} (see {log})")
            same = ids.get("cpu") is not None and ids.get("cpu") == ids.get("cuda")
            results["greedy_ids_equal"] = same
            print(f"greedy ids host vs cuda: {'equal' if same else 'DIFFER'}", flush=True)
            if not same:
                failures.append(f"generate: cpu ids {ids.get('cpu')} vs cuda {ids.get('cuda')}")

    # GPT-2 124M throughput on the GPU: micro-batch 16 (the figure) and 4 (how the step scales).
    for batch in [16, 4]:
        name = f"gpt2_124M_bf16_b{batch}_cuda"
        rows, _ = train(name, "cuda",
                        ["--set", "model.config=124M", "--set", f"train.micro_batch={batch}",
                         "--set", "train.seq_len=1024", "--set", "train.precision=bf16", "--set",
                         "train.steps=12", "--set", "optim.warmup_steps=2", "--set",
                         "sample.tokens=0", "--set", "eval.batches=2", "--set",
                         f"machine.peak_gflops={H200_BF16_PEAK_GFLOPS}"], timeout=300)
        steady = [r for r in rows if "step" in r and r["step"] > 3 and "tokens_per_s" in r]
        if not steady:
            continue
        tps = sorted(r["tokens_per_s"] for r in steady)[len(steady) // 2]
        mfu = sorted(r["mfu"] for r in steady)[len(steady) // 2]
        step_ms = sorted(r["step_ms"] for r in steady)[len(steady) // 2]
        results[name] = {"tokens_per_s": tps, "mfu": mfu, "step_ms": step_ms,
                         "steps_measured": len(steady)}
        print(f"GPT-2 124M bf16 micro-batch {batch} x 1024 on the GPU: {tps:.0f} tokens/s, "
              f"MFU {100 * mfu:.1f}%, {step_ms:.1f} ms per step (median of {len(steady)})",
              flush=True)
    # Where the step's time goes: the same run with every CUDA call timed to its kernels' end.
    name = "gpt2_124M_bf16_b16_profile"
    train(name, "cuda", ["--set", "model.config=124M", "--set", "train.micro_batch=16", "--set",
                         "train.seq_len=1024", "--set", "train.precision=bf16", "--set",
                         "train.steps=6", "--set", "optim.warmup_steps=2", "--set",
                         "sample.tokens=0", "--set", "eval.batches=1"], timeout=300,
          env={"TESSEL_CUDA_PROFILE": "1"})
    lines = open(os.path.join(out, name + ".log")).read().splitlines()
    table = [i for i, l in enumerate(lines) if "TESSEL_CUDA_PROFILE" in l]
    if table:
        results["profile"] = lines[table[0]:table[0] + 41]
        print("\n".join(lines[table[0]:table[0] + 21]), flush=True)
    json.dump({"results": results, "failures": failures},
              open(os.path.join(out, "cli_check.json"), "w"), indent=1)
    for f in failures:
        print("FAIL " + f)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
