#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""`tessel plan --serve` of a mixture of experts against `tessel generate` on this machine.

A tiny Mixtral (2 layers, hidden 24, 6 heads over 2 KV heads, 6 SwiGLU experts of 33, top-2) and a
GPT-2-MoE (2 blocks, the second MoE: 4 GELU experts of 104, vocabulary 257 padded to 258 under tp)
are generated from at one process, `--tp 2`, `--ep 2`, `--ep 2 --tp 2` and `--pp 2` under mpirun.
The plan's decode rows at batch 1 for the same layouts must predict:

- the KV bytes of every rank exactly (`kv_bytes_per_rank`; under --pp the rank with the most
  blocks);
- the weight bytes world rank 0 holds exactly (`weight_bytes_per_rank`; one stage): the dense parts
  by the runtime's plan over tp (whole under ep alone), E / ep experts of each MoE layer and tp rank
  0's columns of them (17 of 33; GPT-2-MoE's output biases whole), 4 x the values it read;
- the host allocator's peak above the loaded model (KV cache + workspace) of rank 0, the largest,
  exactly at one process and --tp 2, where the generation is traced on meta (each token routed to
  k experts in turn: every routing without drops allocates alike); under --ep (the gather's rows
  depend on the routing) and --pp by formula, within PEAK_TOLERANCE.

Decode times are printed beside the prediction, never asserted (the machine is shared).
Usage: serve_moe_plan_check.py TESSEL MPIRUN WORKDIR
"""
import json
import os
import re
import shutil
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "common"))
from tessel_runs import fail, mpi_prefix, run, single_thread_env, write_json  # noqa: E402

CLUSTER = """name = "four-rank-test"
devices_per_node = 4
nodes = 1
[device]
kind = "test"
memory_bytes = 1073741824
memory_bandwidth = 2e10
[device.peak_flops]
f32 = 5e10
[links.intra_node]
bandwidth = 5e9
latency = 5e-6
"""
PROMPT = "5,9,12,40,77,3,101"
GEN = 13
KV_LINE = re.compile(r"rank (\d+) KV cache (\d+) bytes")
READ_LINE = re.compile(r"(?:tensor|expert)-parallel rank (\d+) read (\d+) weight values")
PEAK_LINE = re.compile(r"rank (\d+) allocator peak (\d+) bytes above the loaded model's (\d+)")
PEAK_TOLERANCE = 0.25
LAYOUTS = [(1, 1, 1), (1, 2, 1), (2, 1, 1), (2, 2, 1), (1, 1, 2)]  # (ep, tp, pp)

MIXTRAL = {"architectures": ["MixtralForCausalLM"], "model_type": "mixtral", "vocab_size": 256,
           "hidden_size": 24, "intermediate_size": 33, "num_hidden_layers": 2,
           "num_attention_heads": 6, "num_key_value_heads": 2, "max_position_embeddings": 64,
           "rms_norm_eps": 1e-5, "rope_theta": 10000.0, "num_local_experts": 6,
           "num_experts_per_tok": 2, "tie_word_embeddings": False, "initializer_range": 0.3}
GPT2_MOE = {"architectures": ["GPT2MoELMHeadModel"], "model_type": "gpt2_moe", "vocab_size": 257,
            "n_positions": 64, "n_embd": 26, "n_head": 2, "n_layer": 2, "num_experts": 4,
            "top_k": 2, "moe_every": 2, "initializer_range": 0.3}


def plan_rows(tessel, model, cluster, env):
    out = run([tessel, "plan", "--serve", "--model", model, "--cluster", cluster, "--prompt",
               str(len(PROMPT.split(","))), "--gen", str(GEN), "--batch", "1", "--top", "1000",
               "--json"], env=env).stdout
    rows = {}
    for r in json.loads(out)["decode"]:
        if r["runnable"] and r["batch"] == 1:
            rows[(r["ep"], r["tp"], r["pp"])] = r
    return rows


def generate(tessel, mpi, model, ep, tp, pp, env):
    cmd = [tessel, "generate", "-m", model, "--prompt-ids", PROMPT, "-n", str(GEN), "--temp", "0",
           "--ignore-eos", "--format", "json"]
    ranks = ep * tp * pp
    if ranks > 1:
        flags = (["--ep", str(ep)] if ep > 1 else []) + (["--tp", str(tp)] if tp > 1 else []) + \
            (["--pp", str(pp)] if pp > 1 else [])
        cmd = mpi + ["-np", str(ranks)] + cmd + flags
    r = run(cmd, env=env)
    kv = {int(k): int(n) for k, n in KV_LINE.findall(r.stderr)}
    read = {int(k): int(n) for k, n in READ_LINE.findall(r.stderr)}
    peak = {int(k): int(p) for k, p, _ in PEAK_LINE.findall(r.stderr)}
    if sorted(kv) != list(range(ranks)) or sorted(peak) != list(range(ranks)):
        fail(f"ep {ep} tp {tp} pp {pp}: expected a KV and a peak line per rank: {r.stderr[-1500:]}")
    return json.loads(r.stdout), kv, read, peak


def check_model(tessel, mpi, work, name, config, env, cluster):
    model = os.path.join(work, name)
    run([tessel, "init", "--config", write_json(os.path.join(work, name + ".json"), config),
         "--out", model, "--seed", "3"], env=env)
    rows = plan_rows(tessel, model, cluster, env)
    for ep, tp, pp in LAYOUTS:
        row = rows.get((ep, tp, pp))
        if row is None:
            fail(f"{name}: no runnable decode row for ep {ep} tp {tp} pp {pp}: {sorted(rows)}")
        out, kv, read, peak = generate(tessel, mpi, model, ep, tp, pp, env)
        what = f"{name} ep {ep} tp {tp} pp {pp}"
        if max(kv.values()) != row["kv_bytes_per_rank"]:
            fail(f"{what}: KV bytes per rank {kv} measured, {row['kv_bytes_per_rank']} predicted")
        if pp == 1 and ep * tp > 1:
            if 0 not in read or 4 * read[0] != row["weight_bytes_per_rank"]:
                fail(f"{what}: rank 0 read {read.get(0)} weight values, predicted "
                     f"{row['weight_bytes_per_rank']} bytes")
        want_peak = row["kv_bytes_per_rank"] + row["workspace_bytes_per_rank"]
        got_peak = max(peak.values())
        ratio = want_peak / got_peak
        if row["workspace_traced"] != (ep == 1 and pp == 1):
            fail(f"{what}: workspace_traced {row['workspace_traced']}")
        # Traced: rank 0's generation run on meta, exact; the other tp ranks hold fewer columns.
        if row["workspace_traced"] and (peak[0] != want_peak or got_peak != want_peak):
            fail(f"{what}: allocator peak above the model {peak} measured, {want_peak:.0f} "
                 f"predicted (KV + the traced workspace)")
        if abs(ratio - 1) > PEAK_TOLERANCE:
            fail(f"{what}: allocator peak above the model {peak} measured, {want_peak:.0f} "
                 f"predicted (ratio {ratio:.3f}), beyond {PEAK_TOLERANCE:.0%}")
        measured = 1e3 * out["generation_seconds"] / max(1, GEN - 1)
        print(f"{what}: KV {row['kv_bytes_per_rank']:.0f} B exact; weights/rank "
              f"{row['weight_bytes_per_rank']:.0f} B predicted"
              f"{', = rank 0 read x 4' if pp == 1 and ep * tp > 1 else ''}; peak above the "
              f"model {want_peak:.0f} B predicted, {got_peak} measured (ratio {ratio:.3f}); decode "
              f"{measured:.3f} ms/token measured, {row['latency_ms']:.3f} predicted (not asserted)")


def main():
    tessel, mpirun, work = sys.argv[1:4]
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    env = single_thread_env()
    mpi = mpi_prefix(mpirun)
    cluster = os.path.join(work, "four.toml")
    with open(cluster, "w") as f:
        f.write(CLUSTER)
    try:
        check_model(tessel, mpi, work, "mixtral", MIXTRAL, env, cluster)
        check_model(tessel, mpi, work, "gpt2-moe", GPT2_MOE, env, cluster)
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
