#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""The sharding ILP's plan runs and trains as one rank does: `tessel plan shard --model CONFIG
--tp N` on a cluster whose arithmetic is slow next to its links (so that splitting pays) writes
a plan with Megatron-LM's split and no hand-written rule; `mpirun -np N tessel train --tp N
--tp-plan PLAN` then matches `tessel train` on one rank, every step's loss and the final
parameters within the tensor-parallel equivalence tests' tolerance. So do the plans it picks on an
H100 node under budgets 13% and 22% above the least memory any choice needs (at these sizes
mixes: some layers split and others whole, the position embedding split by rows). Also:
a memory budget nothing fits is one clear error and no file.

Usage: shard_tp_check.py TESSEL MPIRUN TP [TP ...]
"""
import json
import os
import re
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "common"))
from tessel_runs import (RUN_REL_TOL, check_same_tensors, compare_losses, compare_params, fail,  # noqa: E402
                         final_params, gpt2_config, mpi_prefix, prepare_workdir, run,
                         single_thread_env, train_sets, write_json)

SLOW_CLUSTER = """name = "slow-arithmetic"
devices_per_node = 4
nodes = 1
[device]
kind = "test"
memory_bytes = 1073741824
memory_bandwidth = 1e12
[device.peak_flops]
f32 = 1e9
[links.intra_node]
bandwidth = 100e9
latency = 1e-6
"""

MEGATRON = {
    "wte": "VocabParallel",
    "h.*.attn.c_attn": {"style": "Colwise", "blocks": 3, "unit": 6},
    "h.*.attn.c_proj": "Rowwise",
    "h.*.mlp.c_fc": "Colwise",
    "h.*.mlp.c_proj": "Rowwise",
    "ln_f": {"style": "Sequence", "gather_output": True},
}
# Under sequence parallelism (`plan shard --sp`): Megatron-LM's sequence-parallel plan, the
# family's built-in one (configs/gpt2-tp.json), the dropouts included.
MEGATRON_SP = dict(MEGATRON, **{
    "wpe": "Sequence", "drop": "Sequence", "h.*.ln_1": "Sequence",
    "h.*.attn.resid_dropout": "Sequence", "h.*.ln_2": "Sequence", "h.*.mlp.dropout": "Sequence",
})


def least_memory(tessel, config, cluster, env):
    """The least memory per rank any choice needs, in bytes, as the error for a tiny budget says."""
    p = subprocess.run([tessel, "plan", "shard", "--model", config, "--tp", "2", "--batch", "6",
                        "--seq", "15", "--memory", "1"], capture_output=True, text=True, env=env)
    m = re.search(r"the least any choice needs is ([0-9.]+) (B|KiB|MiB|GiB)", p.stderr)
    if p.returncode == 0 or not m:
        fail(f"a 1-byte budget: exit {p.returncode}, {p.stderr!r}")
    return float(m.group(1)) * {"B": 1, "KiB": 1024, "MiB": 1 << 20, "GiB": 1 << 30}[m.group(2)]


def train_like_one_rank(tessel, mpirun, env, common, ref, d, plan, tp, what, steps, extra=()):
    """`mpirun -np TP tessel train --tp TP --tp-plan PLAN [EXTRA]` into d, its losses and final
    parameters against the one-rank run in ref; returns the worst loss and parameter
    differences."""
    run(mpi_prefix(mpirun) + ["-np", str(tp), tessel] + common +
        ["--tp", str(tp), "--tp-plan", plan, "--set", "checkpoint.dir=" + d, *extra], env=env)
    worst = compare_losses(ref, d, what, steps)
    pa, pb = final_params(ref, steps), final_params(d, steps)
    check_same_tensors(pa, pb, what)
    return worst, compare_params(pa, pb, what)[0]


def main():
    tessel, mpirun, tps = sys.argv[1], sys.argv[2], [int(x) for x in sys.argv[3:]]
    env = single_thread_env()
    with tempfile.TemporaryDirectory(prefix="tessel_shard_tp_") as work:
        vocab = prepare_workdir(tessel, os.path.join(work, "w"))
        work = os.path.join(work, "w")
        config = write_json(os.path.join(work, "config.json"),
                            gpt2_config(vocab, n_positions=32, n_embd=24, n_layer=2, n_head=4))
        cluster = os.path.join(work, "slow.toml")
        with open(cluster, "w") as f:
            f.write(SLOW_CLUSTER)
        steps = 10
        common = ["train"] + train_sets(config, os.path.join(work, "data"), steps, seq_len=15,
                                        extra=["checkpoint.interval=10", "optim.grad_clip=0.5",
                                               "train.micro_batch=6"])
        ref = os.path.join(work, "tp1")
        run([tessel] + common + ["--set", "checkpoint.dir=" + ref], env=env)
        for tp in tps:
            plan = os.path.join(work, f"plan_tp{tp}.json")
            p = run([tessel, "plan", "shard", "--model", config, "--tp", str(tp), "--batch", "6",
                     "--seq", "15", "--cluster", cluster, "-o", plan], env=env)
            with open(plan) as f:
                rules = {k: v for k, v in json.load(f).items() if not k.startswith("#")}
            if rules != MEGATRON:
                fail(f"tp={tp}: the ILP's plan {rules} is not Megatron's {MEGATRON}\n{p.stderr}")
            what = f"tp={tp} with the ILP's plan"
            worst, rel = train_like_one_rank(tessel, mpirun, env, common, ref,
                                             os.path.join(work, f"tp{tp}"), plan, tp, what, steps)
            print(f"{what}: {steps}-step losses within {worst:.1e}, final parameters within "
                  f"{rel:.1e} (tolerance {RUN_REL_TOL})")
        # A budget just above the least any choice needs: whatever mix of splits the ILP picks
        # there, its plan trains as one rank does.
        least = least_memory(tessel, config, cluster, env)
        for factor in (1.13, 1.22):
            budget = int(least * factor)
            plan = os.path.join(work, f"plan_{budget}.json")
            run([tessel, "plan", "shard", "--model", config, "--tp", "2", "--batch", "6",
                 "--seq", "15", "--memory", str(budget), "-o", plan], env=env)
            with open(plan) as f:
                rules = {k: v for k, v in json.load(f).items() if not k.startswith("#")}
            what = f"tp=2 under a budget of {budget} bytes, plan {rules}"
            worst, rel = train_like_one_rank(tessel, mpirun, env, common, ref,
                                             os.path.join(work, f"budget_{budget}"), plan, 2,
                                             what, steps)
            print(f"{what}: losses within {worst:.1e}, final parameters within {rel:.1e}")
        # LLaMAs with as many K/V heads as query heads and with half as many (grouped-query):
        # attention splits Megatron's way, K/V heads with their query heads (the attention rule
        # takes K/V heads that divide the query heads, and tp 2 divides both counts), and
        # SwiGLU's product through the op table's mul rule gives Megatron's MLP. Each trains
        # as one rank does.
        for kv_heads in (4, 2):
            llama = write_json(os.path.join(work, f"llama_kv{kv_heads}.json"), {
                "architectures": ["LlamaForCausalLM"], "model_type": "llama", "vocab_size": vocab,
                "hidden_size": 24, "intermediate_size": 40, "num_hidden_layers": 2,
                "num_attention_heads": 4, "num_key_value_heads": kv_heads,
                "max_position_embeddings": 32, "rms_norm_eps": 1e-5, "rope_theta": 10000.0,
                "tie_word_embeddings": True})
            llama_common = [a.replace(config, llama) if a.startswith("model.config=") else a
                            for a in common]
            llama_ref = os.path.join(work, f"llama_kv{kv_heads}_tp1")
            run([tessel] + llama_common + ["--set", "checkpoint.dir=" + llama_ref], env=env)
            plan = os.path.join(work, f"plan_llama_kv{kv_heads}.json")
            run([tessel, "plan", "shard", "--model", llama, "--tp", "2", "--batch", "6", "--seq",
                 "15", "--cluster", cluster, "-o", plan], env=env)
            with open(plan) as f:
                rules = {k: v for k, v in json.load(f).items() if not k.startswith("#")}
            for name, want in (("layers.*.self_attn.q_proj", {"style": "Colwise", "unit": 6}),
                               ("layers.*.self_attn.k_proj", {"style": "Colwise", "unit": 6}),
                               ("layers.*.self_attn.v_proj", {"style": "Colwise", "unit": 6}),
                               ("layers.*.self_attn.o_proj", "Rowwise"),
                               ("layers.*.mlp.gate_proj", "Colwise"),
                               ("layers.*.mlp.up_proj", "Colwise"),
                               ("layers.*.mlp.down_proj", "Rowwise")):
                if rules.get(name) != want:
                    fail(f"LLaMA with {kv_heads} K/V heads: the ILP's plan has {name}: "
                         f"{rules.get(name)!r}, expected {want!r}: {rules}")
            what = f"LLaMA with {kv_heads} K/V heads tp=2, plan {rules}"
            worst, rel = train_like_one_rank(tessel, mpirun, env, llama_common, llama_ref,
                                             os.path.join(work, f"llama_kv{kv_heads}_tp2"), plan,
                                             2, what, steps)
            print(f"{what}: losses within {worst:.1e}, final parameters within {rel:.1e}")
        # Sequence parallelism, dropout on (each rank draws its piece of one process's masks):
        # `plan shard --sp` writes Megatron's sequence-parallel plan for GPT-2, and LLaMA's norms
        # on sequence pieces; `train --sp` with each plan equals one rank.
        drop = write_json(os.path.join(work, "config_dropout.json"),
                          gpt2_config(vocab, n_positions=32, n_embd=24, n_layer=2, n_head=4,
                                      dropout=0.1))
        llama4 = os.path.join(work, "llama_kv4.json")
        for model, name in ((drop, "GPT-2"), (llama4, "LLaMA")):
            sp_common = [a.replace(config, model) if a.startswith("model.config=") else a
                         for a in common]
            sp_ref = os.path.join(work, f"sp_{name}_tp1")
            run([tessel] + sp_common + ["--set", "checkpoint.dir=" + sp_ref], env=env)
            for tp in (tps if name == "GPT-2" else [2]):
                plan = os.path.join(work, f"plan_sp_{name}_tp{tp}.json")
                p = run([tessel, "plan", "shard", "--model", model, "--tp", str(tp), "--batch",
                         "6", "--seq", "15", "--cluster", cluster, "--sp", "-o", plan], env=env)
                with open(plan) as f:
                    rules = {k: v for k, v in json.load(f).items() if not k.startswith("#")}
                if name == "GPT-2" and rules != MEGATRON_SP:
                    fail(f"--sp tp={tp}: the ILP's plan {rules} is not Megatron's {MEGATRON_SP}"
                         f"\n{p.stderr}")
                if name == "LLaMA" and any(rules.get(k) != "Sequence" for k in (
                        "layers.*.input_layernorm", "layers.*.post_attention_layernorm")):
                    fail(f"LLaMA --sp: the ILP's plan {rules} does not run its norms on sequence "
                         f"pieces")
                what = f"{name} --sp tp={tp} with the ILP's plan {rules}"
                worst, rel = train_like_one_rank(tessel, mpirun, env, sp_common, sp_ref,
                                                 os.path.join(work, f"sp_{name}_tp{tp}"), plan,
                                                 tp, what, steps, extra=["--sp"])
                print(f"{what}: losses within {worst:.1e}, final parameters within {rel:.1e}")
        # A mixture of experts: its layers have no sharding rule and stay whole (their auxiliary
        # losses are scalars, which no placement may split); under --sp the stream between the
        # regions is in sequence pieces, which those layers cannot take: one error naming them.
        moe = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "configs",
                           "gpt2-moe-tiny.json")
        p = run([tessel, "plan", "shard", "--model", moe, "--tp", "2", "--batch", "2", "--seq",
                 "13"], env=env)
        if json.loads(p.stdout).get("wte") != "VocabParallel":
            fail(f"MoE without --sp: {p.stdout}")
        p = subprocess.run([tessel, "plan", "shard", "--model", moe, "--tp", "2", "--batch", "2",
                            "--seq", "13", "--sp"], capture_output=True, text=True, env=env)
        if p.returncode == 0 or "no sequence placement: h.*.moe" not in p.stderr:
            fail(f"MoE with --sp: exit {p.returncode}, {p.stderr!r}")
        print("MoE --sp:", p.stderr.strip().splitlines()[-1][-160:])
        # A budget nothing fits: one error line, no plan file.
        plan = os.path.join(work, "too_small.json")
        p = subprocess.run([tessel, "plan", "shard", "--model", config, "--tp", "2", "--batch", "6",
                            "--seq", "15", "--cluster", cluster, "--memory", "1000", "-o", plan],
                           capture_output=True, text=True, env=env)
        if p.returncode == 0 or os.path.exists(plan):
            fail(f"a 1000-byte budget was accepted (exit {p.returncode})")
        if "no choice of placements fits the memory budget" not in p.stderr:
            fail(f"a 1000-byte budget: unexpected message {p.stderr!r}")
        print("infeasible budget:", p.stderr.strip().splitlines()[-1])


if __name__ == "__main__":
    main()
