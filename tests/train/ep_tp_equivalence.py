#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Expert parallelism composed with tensor parallelism equals one rank: `mpirun -np 4 tessel train
--tp 2 --ep 2` (attention and the dense blocks' MLPs split over each tp pair, every MoE layer's
router and experts whole on both tp ranks, the experts split over the ep group of each tp rank)
against `tessel train` on one rank with one micro-batch per data-parallel rank (grad_accum = dp).

The model has odd sizes: a GPT-2-MoE of width 26 with 2 heads of 13, a vocabulary of 257 (padded
to 258 under tp), 3 blocks of which blocks 1 and 2 are MoE (4 GELU experts, top-2, capacity
factor 1 so pairs are dropped) and block 0 dense (its MLP split over tp), 3 x 13 tokens per
micro-batch. Layouts: np 4 --tp 2 --ep 2 (dp 2: ep groups {0, 2} and {1, 3}), the same at ZeRO-3
(the experts' units over a group of one), np 2 --tp 2 alone (experts whole on both ranks) and np 2
--ep 2 (tp 1, unchanged). Checks: every step's loss within 1e-5 (relative), the same per-layer
loads and drops, the mean auxiliary loss within 1e-5 (counted once, not once per tp rank), every
step's gradient norm within 1e-5 (each piece, whole parameter and expert counted once), the final
parameters within 1e-5, and the all-to-all bytes as docs/MOE.md's formula summed over every
rank with each kept row sent once per tp pair (the experts are whole on both tp ranks, which
hold the same rows, so each sends its half of them and the pair gathers the halves on arrival:
the bytes per rank are half those of each tp rank sending its own copy). `mixtral` as the last argument: a Mixtral
(GQA 6 heads of 6 over 2 KV heads, hidden 36, 4 SwiGLU experts of 33, top-2, no capacity) at np 4
--tp 2 --ep 2 with the same checks. Sequence parallelism: ep_sp_equivalence.py.

Usage: ep_tp_equivalence.py TESSEL MPIRUN WORKDIR [mixtral]
"""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "common"))
from tessel_runs import (compare_losses, compare_params, fail, final_params, gpt2_config,  # noqa: E402
                         mpi_prefix, prepare_workdir, run, single_thread_env, step_records,
                         train_sets, write_json)

EXPERTS, TOP_K, LAYERS = 4, 2, 3
MOE_LAYERS = 2  # blocks 1 and 2
MICRO, SEQ, STEPS = 3, 13, 12
GPT2_EMBD, MIXTRAL_EMBD = 26, 36


def gpt2_moe_config(vocab):
    cfg = gpt2_config(vocab, n_positions=32, n_embd=GPT2_EMBD, n_layer=LAYERS, n_head=2)
    cfg.update({"model_type": "gpt2_moe", "architectures": ["GPT2MoELMHeadModel"],
                "expert_counts": [0, EXPERTS, EXPERTS], "top_k": TOP_K, "capacity_factor": 1.0,
                "z_loss_coef": 0.001})
    return cfg


def mixtral_config(vocab):
    return {"architectures": ["MixtralForCausalLM"], "model_type": "mixtral", "vocab_size": vocab,
            "hidden_size": MIXTRAL_EMBD, "intermediate_size": 33, "num_hidden_layers": MOE_LAYERS,
            "num_attention_heads": 6, "num_key_value_heads": 2, "max_position_embeddings": 32,
            "rms_norm_eps": 1e-5, "rope_theta": 10000.0, "num_local_experts": EXPERTS,
            "num_experts_per_tok": TOP_K, "sliding_window": None, "router_aux_loss_coef": 0.01,
            "tie_word_embeddings": True}  # an untied head needs a vocabulary tp divides


def check_routing(ref_dir, dir_, what, need_drops):
    """The same tokens, per-expert loads and drops in every MoE layer of every step; the step's
    mean auxiliary loss within 1e-5 (relative). Returns the pairs dropped and the worst aux diff."""
    drops, worst = 0, 0.0
    for a, b in zip(step_records(ref_dir), step_records(dir_), strict=True):
        for ea, eb in zip(a["experts"], b["experts"], strict=True):
            for key in ("layer", "tokens", "capacity", "tokens_per_expert", "dropped"):
                if ea[key] != eb[key]:
                    fail(f"{what}: step {a['step']} layer {ea['layer']} {key} {eb[key]} vs one "
                         f"rank {ea[key]}")
            drops += ea["dropped"]
        rel = abs(a["aux_loss"] - b["aux_loss"]) / abs(a["aux_loss"])
        if rel > 1e-5:
            fail(f"{what}: step {a['step']} aux_loss {b['aux_loss']} vs one rank {a['aux_loss']}")
        worst = max(worst, rel)
    if need_drops and drops == 0:
        fail(f"{what}: no pair was dropped in any step; the capacity test needs drops")
    return drops, worst


def check_grad_norms(ref_dir, dir_, what):
    """Every step's global gradient norm (before clipping) within 1e-5 (relative) of one rank's:
    the norm counts each tp piece, whole parameter and expert once. Returns the worst."""
    worst = 0.0
    for a, b in zip(step_records(ref_dir), step_records(dir_), strict=True):
        rel = abs(a["grad_norm"] - b["grad_norm"]) / abs(a["grad_norm"])
        if rel > 1e-5:
            fail(f"{what}: step {a['step']} grad_norm {b['grad_norm']} vs one rank {a['grad_norm']}")
        worst = max(worst, rel)
    return worst


def check_all_to_all(dir_, ranks, embd, what, elem=4):
    """Per MoE layer, micro-batch and rank: 8 E bytes of counts, and every kept row in one
    dispatch and one combine input forward and backward (4 x elem x embd bytes: elem 2 for 16-bit
    rows), sent once: the tp ranks of a pair hold the same rows and each sends its piece of
    them, with --etp or without (the bytes per rank divided by tp; every tp rank sending its own
    copy would double the rows' term). The calls: one rank's, 5 per MoE layer and micro-batch."""
    for r in step_records(dir_):
        kept = sum(sum(e["tokens_per_expert"]) for e in r["experts"])
        want = ranks * MOE_LAYERS * 8 * EXPERTS + 4 * elem * embd * kept
        calls = 5 * MOE_LAYERS
        if r["all_to_all_bytes"] != want or r["all_to_all_calls"] != calls:
            fail(f"{what}: step {r['step']} issued {r['all_to_all_calls']} all-to-alls of "
                 f"{r['all_to_all_bytes']} bytes (all ranks); the formula gives {calls} and "
                 f"{want} bytes ({kept} kept rows)")


def main():
    tessel, mpirun, work = sys.argv[1], sys.argv[2], sys.argv[3]
    mixtral = len(sys.argv) > 4 and sys.argv[4] == "mixtral"
    if len(sys.argv) > 4 and not mixtral:
        fail(f"mode {sys.argv[4]!r}: expected mixtral")
    vocab = prepare_workdir(tessel, work)
    config = write_json(os.path.join(work, "config.json"),
                        mixtral_config(vocab) if mixtral else gpt2_moe_config(vocab))
    embd = MIXTRAL_EMBD if mixtral else GPT2_EMBD
    env = single_thread_env()
    mpi = mpi_prefix(mpirun)

    def common(d, extra=()):
        return ["train"] + train_sets(config, os.path.join(work, "data"), STEPS, seq_len=SEQ,
                                      extra=["checkpoint.interval=12", f"train.micro_batch={MICRO}",
                                             "log.jsonl=train.jsonl", "checkpoint.dir=" + d] +
                                      list(extra))

    # (ranks, flags, ZeRO stage); the one-rank reference accumulates one micro-batch per dp rank.
    layouts = [(4, ["--tp", "2", "--ep", "2"], 0)]
    if not mixtral:
        layouts += [(4, ["--tp", "2", "--ep", "2"], 3), (2, ["--tp", "2"], 0),
                    (2, ["--ep", "2"], 0)]
    refs = {}
    for ranks, flags, stage in layouts:
        dp = ranks // (2 if "--tp" in flags else 1)
        if dp not in refs:
            refs[dp] = os.path.join(work, f"one_rank_accum{dp}")
            run([tessel] + common(refs[dp], [f"train.grad_accum={dp}"]), env=env)
        what = f"np {ranks} {' '.join(flags)} ZeRO-{stage}"
        d = os.path.join(work, f"np{ranks}_{'_'.join(f.strip('-') for f in flags)}_zero{stage}")
        out = run(mpi + ["-np", str(ranks), tessel] + common(d, [f"parallel.zero_stage={stage}"]) +
                  flags, env=env).stdout
        for flag, line in (("--tp", "tensor parallel: tp = 2"), ("--ep", "expert parallel: ep = 2")):
            if flag in flags and line not in out:
                fail(f"{what}: the run did not report '{line}'\n{out[-2000:]}")
        norms = check_grad_norms(refs[dp], d, what)
        worst = compare_losses(refs[dp], d, what, STEPS)
        drops, aux = check_routing(refs[dp], d, what, need_drops=not mixtral)
        if "--ep" in flags:
            check_all_to_all(d, ranks, embd, what)
        worst_p, name, worst_t = compare_params(final_params(refs[dp], STEPS),
                                                final_params(d, STEPS), what)
        print(f"{what}: {STEPS}-step losses within {worst:.1e} of one rank (grad_accum {dp}), the "
              f"same routing ({drops} pairs dropped in all), auxiliary losses within {aux:.1e}, "
              f"gradient norms within {norms:.1e}, "
              f"final parameters within {worst_p:.1e} (worst {name} {worst_t:.1e})")



if __name__ == "__main__":
    main()
