#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""`tessel plan --serve` against `tessel generate` on this machine: the sizes are exact.

A tiny GPT-2 (3 blocks x 48 wide, 6 heads, vocabulary 260) and a tiny LLaMA with grouped-query
attention (6 query heads, 2 KV heads) are generated from at one process, at `--tp 2`, at
`--pp 2` and at `--tp 2 --pp 2` under mpirun. Each process reports the KV cache it allocated
(prompt + generated tokens of its layers and heads) and, under --tp, the weight values it read.
The plan's decode rows at batch 1 for the same layouts must predict:

- the KV bytes of every rank exactly (`kv_bytes_per_rank`: batch x (prompt + gen) tokens x the
  rank's bytes per token; under --pp the rank with the most blocks);
- the weight bytes a tensor-parallel rank holds exactly (`weight_bytes_per_rank`, the runtime's
  own split applied on the meta device; the vocabulary is even, so no padding row is left unread);
- under grouped-query attention, the KV cache a fraction kv_heads / heads of multi-head's;
- the host allocator's peak above the loaded model during the generation (the KV cache plus the
  activations and workspace of the prefill and of the last decode step) of every rank exactly:
  `kv_bytes_per_rank + workspace_bytes_per_rank` on one stage, and under --pp the traced figure
  of the rank's stage (`stage_above_model_bytes[rank // tp]`), the generation traced on meta with
  the runtime's stage bounds and tensor-parallel split;
- the serving engine's largest step (`tessel serve`, paged KV pool): with --max-batch-tokens 7
  and --max-seqs 1 a 7-token prompt's prefill is that step (9 tokens generated), and the
  allocator peak it reports in /metrics (`engine_step_peak_bytes`) equals the plan's
  `engine_step_bytes_per_rank` (the step traced on meta) for a GPT-2 and a LLaMA with a
  byte-level tokenizer.

Decode times are printed beside the prediction, never asserted (the machine is shared).
Usage: serve_plan_check.py TESSEL MPIRUN WORKDIR
"""
import json
import os
import re
import shutil
import signal
import sys
import urllib.request

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "common"))
from tessel_runs import fail, mpi_prefix, run, single_thread_env, write_json  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "integration"))
from serve_http_common import completion, start_server, write_hf_model  # noqa: E402

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
READ_LINE = re.compile(r"tensor-parallel rank (\d+) read (\d+) weight values")
# The engine's check: 7 + 9 tokens fill one KV block of 16 (the default), so the plan's step at
# the longest context has the block table of the prompt's step.
ENGINE_GEN = 9
PEAK_LINE = re.compile(r"rank (\d+) allocator peak (\d+) bytes above the loaded model's (\d+)")


def plan_rows(tessel, model, cluster, env):
    out = run([tessel, "plan", "--serve", "--model", model, "--cluster", cluster, "--prompt",
               str(len(PROMPT.split(","))), "--gen", str(GEN), "--batch", "1", "--top", "1000",
               "--json"], env=env).stdout
    rows = {}
    for r in json.loads(out)["decode"]:
        if r["runnable"] and r["batch"] == 1:
            rows[(r["tp"], r["pp"])] = r
    return rows


def generate(tessel, mpi, model, tp, pp, env):
    """(JSON of rank 0, {rank: KV bytes}, {rank: weight values read},
    {rank: (allocator peak above the model, the model's bytes)})."""
    cmd = [tessel, "generate", "-m", model, "--prompt-ids", PROMPT, "-n", str(GEN), "--temp", "0",
           "--ignore-eos", "--format", "json"]
    if tp * pp > 1:
        cmd = mpi + ["-np", str(tp * pp)] + cmd + ["--tp", str(tp), "--pp", str(pp)]
    r = run(cmd, env=env)
    kv = {int(k): int(n) for k, n in KV_LINE.findall(r.stderr)}
    read = {int(k): int(n) for k, n in READ_LINE.findall(r.stderr)}
    peak = {int(k): (int(p), int(b)) for k, p, b in PEAK_LINE.findall(r.stderr)}
    if sorted(kv) != list(range(tp * pp)) or sorted(peak) != list(range(tp * pp)):
        fail(f"tp {tp} pp {pp}: expected a KV and a peak line per rank: {r.stderr[-1500:]}")
    return json.loads(r.stdout), kv, read, peak


def check_model(tessel, mpi, work, name, config, layouts, env, cluster):
    model = os.path.join(work, name)
    run([tessel, "init", "--config", write_json(os.path.join(work, name + ".json"), config),
         "--out", model, "--seed", "3"], env=env)
    rows = plan_rows(tessel, model, cluster, env)
    kv_per_token = {}
    for tp, pp in layouts:
        row = rows.get((tp, pp))
        if row is None:
            fail(f"{name}: the plan has no runnable decode row for tp {tp} pp {pp}: {sorted(rows)}")
        out, kv, read, peak = generate(tessel, mpi, model, tp, pp, env)
        want_kv = row["kv_bytes_per_rank"]
        if max(kv.values()) != want_kv:
            fail(f"{name} tp {tp} pp {pp}: KV bytes per rank {kv} measured, {want_kv} predicted")
        # Above the loaded model: the cache, then the prefill's or the last decode step's tensors.
        want_peak = want_kv + row.get("workspace_bytes_per_rank", 0)
        stages = row.get("stage_above_model_bytes", [])
        if not row.get("workspace_traced") or len(stages) != pp:
            fail(f"{name} tp {tp} pp {pp}: the plan's workspace is not traced per stage: {row}")
        if pp == 1 and stages[0] != want_peak:
            fail(f"{name} tp {tp}: stage peak {stages} is not KV + workspace {want_peak:.0f}")
        for rank, (p, _) in peak.items():
            if p != stages[rank // tp]:
                fail(f"{name} tp {tp} pp {pp}: rank {rank} allocator peak above the model {p} "
                     f"measured, {stages[rank // tp]:.0f} predicted (stages {stages}; every rank "
                     f"{sorted(peak.items())})")
        if tp > 1 and pp == 1:
            for rank, values in read.items():
                if 4 * values != row["weight_bytes_per_rank"]:
                    fail(f"{name} tp {tp}: rank {rank} read {values} weight values "
                         f"({4 * values} bytes), predicted {row['weight_bytes_per_rank']}")
            if sorted(read) != list(range(tp)):
                fail(f"{name} tp {tp}: expected a read line per rank, got {read}")
        kv_per_token[(tp, pp)] = row["kv_bytes_per_token_per_rank"]
        measured = 1e3 * out["generation_seconds"] / max(1, GEN - 1)
        print(f"{name} tp {tp} pp {pp}: KV {sorted(kv.items())} bytes = predicted {want_kv:.0f}; "
              f"weights/rank predicted {row['weight_bytes_per_rank']:.0f} B"
              f"{' = read ' + str({k: 4 * v for k, v in read.items()}) if read else ''}; "
              f"peak above the model {[round(x) for x in stages]} B predicted by stage, "
              f"{sorted((k, p) for k, (p, _) in peak.items())} measured; "
              f"decode {measured:.3f} ms/token measured, {row['latency_ms']:.3f} predicted "
              f"(not asserted)")
    return kv_per_token


def check_engine_step(tessel, work, name, config, env, cluster):
    """`tessel serve`'s largest step against the plan's trace of it."""
    model = write_hf_model(tessel, work, name + "-served", config, 5)
    out = run([tessel, "plan", "--serve", "--model", model, "--cluster", cluster, "--prompt", "7",
               "--gen", str(ENGINE_GEN), "--batch", "1", "--max-batch-tokens", "7", "--max-seqs",
               "1",
               "--top", "1000", "--json"], env=env).stdout
    rows = [r for r in json.loads(out)["decode"]
            if r["runnable"] and r["chips"] == 1 and r["batch"] == 1]
    if len(rows) != 1 or "engine_step_bytes_per_rank" not in rows[0]:
        fail(f"{name}: no one-chip decode row with the engine's step: {rows}")
    want = rows[0]["engine_step_bytes_per_rank"]
    server, url = start_server([tessel, "serve", "-m", model, "--port", "0", "--max-batch-tokens",
                                "7", "--max-seqs", "1", "--max-model-len", str(7 + ENGINE_GEN)],
                               env, fail)
    try:
        completion(url, "abcdefg", ENGINE_GEN)  # 7 bytes: 7 tokens of the byte-level vocabulary
        with urllib.request.urlopen(url + "/metrics", timeout=60) as r:
            metrics = r.read().decode()
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        server.wait()
    m = re.search(r"^tessel:engine_step_peak_bytes\S* (\S+)$", metrics, re.M)
    if m is None:
        fail(f"{name}: no engine_step_peak_bytes in /metrics: {metrics[-1500:]}")
    got = float(m.group(1))
    if got != want:
        fail(f"{name}: the engine's largest step peaked {got:.0f} bytes above the model and the "
             f"pool, the plan traced {want}")
    print(f"{name}: tessel serve's largest step (7 tokens, one sequence) {got:.0f} bytes above the "
          f"model and the KV pool = predicted {want}")


def main():
    tessel, mpirun, work = sys.argv[1:4]
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    env = single_thread_env()
    mpi = mpi_prefix(mpirun)
    cluster = os.path.join(work, "two.toml")
    with open(cluster, "w") as f:
        f.write(CLUSTER)
    try:
        gpt2 = {"architectures": ["GPT2LMHeadModel"], "model_type": "gpt2", "vocab_size": 260,
                "n_positions": 64, "n_embd": 48, "n_layer": 3, "n_head": 6,
                "initializer_range": 0.5}
        check_model(tessel, mpi, work, "gpt2", gpt2, [(1, 1), (2, 1), (1, 2), (2, 2)], env,
                    cluster)
        llama = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "vocab_size": 260,
                 "hidden_size": 48, "intermediate_size": 80, "num_hidden_layers": 3,
                 "num_attention_heads": 6, "num_key_value_heads": 2,
                 "max_position_embeddings": 64, "tie_word_embeddings": True}
        gqa = check_model(tessel, mpi, work, "llama-gqa", llama, [(1, 1), (2, 1), (1, 2), (2, 2)],
                          env, cluster)
        mha = check_model(tessel, mpi, work, "llama-mha", dict(llama, num_key_value_heads=6),
                          [(1, 1)], env, cluster)
        if gqa[(1, 1)] * 3 != mha[(1, 1)]:
            fail(f"grouped-query KV per token {gqa[(1, 1)]} is not 2/6 of multi-head's {mha[(1, 1)]}")
        check_engine_step(tessel, work, "gpt2", gpt2, env, cluster)
        check_engine_step(tessel, work, "llama", llama, env, cluster)
        print(f"grouped-query (2 of 6 KV heads): {gqa[(1, 1)]:.0f} B per token vs multi-head "
              f"{mha[(1, 1)]:.0f}")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
