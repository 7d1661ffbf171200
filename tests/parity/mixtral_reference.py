#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""PyTorch reference for tessel's Mixtral family, written from the published architecture (Jiang
et al. 2024, "Mixtral of Experts") and Hugging Face transformers' modeling_mixtral semantics,
without transformers (Debian has none): LLaMA-style decoder layers (RMSNorm, rotary embeddings,
grouped-query attention, an optional sliding window) whose MLP is MixtralSparseMoeBlock: router
logits = gate(x), softmax over all experts in float, the top num_experts_per_tok renormalised to
sum to 1, each chosen expert w2(silu(w1(x)) * w3(x)) weighted and summed into its token (every
token computed, nothing dropped). The rotary helpers and the safetensors writer come from
llama_reference.py; the attention and the sparse block are written out here.

For each variant it writes a random model in the Hugging Face layout (one tensor per expert:
model.layers.N.block_sparse_moe.experts.E.w1/w2/w3.weight, gate.weight for the router) and, in
float64 from the same f32 weights: logits, the loss (cross-entropy; output_router_logits is false,
so Hugging Face adds no auxiliary loss), every parameter gradient (HF names) and 12 greedy ids.
A seed is used only when every token's k-th and (k+1)-th router probabilities differ by more
than 1e-4 (f32 rounding must not change a routing decision) and greedy decoding has no near-tie.

Usage: /usr/bin/python3 mixtral_reference.py OUT_DIR
"""
import json
import math
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from llama_reference import inv_freq_of, rms_norm, rotate_half, write_safetensors  # noqa: E402

GREEDY_STEPS = 12
PROMPT = [7, 3, 100, 42, 0]

BASE = {
    "architectures": ["MixtralForCausalLM"], "model_type": "mixtral", "vocab_size": 101,
    "hidden_size": 48, "intermediate_size": 40, "num_hidden_layers": 2,
    "num_attention_heads": 4, "num_key_value_heads": 2, "max_position_embeddings": 64,
    "rms_norm_eps": 1e-5, "rope_theta": 1000000.0, "rope_scaling": None,
    "tie_word_embeddings": False, "hidden_act": "silu", "initializer_range": 0.02,
    "bos_token_id": 1, "eos_token_id": 2, "attention_dropout": 0.0, "sliding_window": None,
    "num_local_experts": 4, "num_experts_per_tok": 2, "router_aux_loss_coef": 0.02,
    "output_router_logits": False, "router_jitter_noise": 0.0,
}


def variant(**changes):
    c = dict(BASE)
    c.update(changes)
    return c


# name -> (config, batch, seq)
VARIANTS = {
    # Odd sizes: hidden 33 with 3 heads of an explicit head_dim 6, one KV head, intermediate 13,
    # 5 experts, vocab 101.
    "odd": (variant(hidden_size=33, num_attention_heads=3, num_key_value_heads=1, head_dim=6,
                    intermediate_size=13, num_local_experts=5), 3, 7),
    # 4 experts, tied head, a sliding window of 5 over 13 tokens.
    "window": (variant(tie_word_embeddings=True, sliding_window=5), 2, 13),
}


def head_dim(cfg):
    return cfg.get("head_dim") or cfg["hidden_size"] // cfg["num_attention_heads"]


def make_params(cfg, gen):
    c, v, i = cfg["hidden_size"], cfg["vocab_size"], cfg["intermediate_size"]
    h, kv, d, e = (cfg["num_attention_heads"], cfg["num_key_value_heads"], head_dim(cfg),
                   cfg["num_local_experts"])

    def randn(*shape, std=0.2, mean=0.0):
        return torch.randn(*shape, generator=gen, dtype=torch.float32) * std + mean

    p = {"model.embed_tokens.weight": randn(v, c, std=0.5)}
    for layer in range(cfg["num_hidden_layers"]):
        n = f"model.layers.{layer}."
        p[n + "input_layernorm.weight"] = randn(c, std=0.1, mean=1.0)
        for proj, out in (("q_proj", h * d), ("k_proj", kv * d), ("v_proj", kv * d)):
            p[n + f"self_attn.{proj}.weight"] = randn(out, c)
        p[n + "self_attn.o_proj.weight"] = randn(c, h * d)
        p[n + "post_attention_layernorm.weight"] = randn(c, std=0.1, mean=1.0)
        p[n + "block_sparse_moe.gate.weight"] = randn(e, c, std=0.5)
        for x in range(e):
            m = n + f"block_sparse_moe.experts.{x}."
            p[m + "w1.weight"] = randn(i, c)
            p[m + "w2.weight"] = randn(c, i, std=0.1)
            p[m + "w3.weight"] = randn(i, c)
    p["model.norm.weight"] = randn(c, std=0.1, mean=1.0)
    if not cfg["tie_word_embeddings"]:
        p["lm_head.weight"] = randn(v, c)
    return p


def sparse_moe(cfg, p, n, x, margins):
    """MixtralSparseMoeBlock on x [B, T, C]; appends each token's top-k routing margin."""
    b, t, c = x.shape
    k, e = cfg["num_experts_per_tok"], cfg["num_local_experts"]
    flat = x.reshape(-1, c)
    logits = flat @ p[n + "block_sparse_moe.gate.weight"].t()
    probs = torch.softmax(logits, dim=1)
    sorted_probs = torch.sort(probs.detach(), dim=1, descending=True).values
    if k < e:
        margins.append(float((sorted_probs[:, k - 1] - sorted_probs[:, k]).min()))
    weights, chosen = torch.topk(probs, k, dim=-1)
    weights = weights / weights.sum(dim=-1, keepdim=True)
    out = torch.zeros_like(flat)
    for expert in range(e):
        token, slot = torch.where(chosen == expert)
        if token.numel() == 0:
            continue
        m = n + f"block_sparse_moe.experts.{expert}."
        rows = flat[token]
        y = torch.nn.functional.silu(rows @ p[m + "w1.weight"].t()) * (rows @ p[m + "w3.weight"].t())
        y = (y @ p[m + "w2.weight"].t()) * weights[token, slot, None]
        out = out.index_add(0, token, y)
    return out.reshape(b, t, c)


def forward(cfg, p, ids, margins):
    b, t = ids.shape
    h, kv, d = cfg["num_attention_heads"], cfg["num_key_value_heads"], head_dim(cfg)
    eps, window = cfg["rms_norm_eps"], cfg.get("sliding_window") or 0
    angles = torch.arange(t, dtype=torch.float64)[:, None] * inv_freq_of(cfg, t)[None, :]
    emb = torch.cat((angles, angles), dim=-1)
    cos, sin = emb.cos()[None, None], emb.sin()[None, None]
    pos = torch.arange(t)
    visible = pos[None, :] <= pos[:, None]
    if window:
        visible = visible & (pos[None, :] > pos[:, None] - window)
    x = p["model.embed_tokens.weight"][ids]
    for layer in range(cfg["num_hidden_layers"]):
        n = f"model.layers.{layer}."
        a = rms_norm(x, p[n + "input_layernorm.weight"], eps)
        q = (a @ p[n + "self_attn.q_proj.weight"].t()).view(b, t, h, d).transpose(1, 2)
        k = (a @ p[n + "self_attn.k_proj.weight"].t()).view(b, t, kv, d).transpose(1, 2)
        v = (a @ p[n + "self_attn.v_proj.weight"].t()).view(b, t, kv, d).transpose(1, 2)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        k = k.repeat_interleave(h // kv, dim=1)
        v = v.repeat_interleave(h // kv, dim=1)
        s = (q @ k.transpose(-1, -2)) / math.sqrt(d)
        s = s.masked_fill(~visible, float("-inf"))
        y = (torch.softmax(s, dim=-1) @ v).transpose(1, 2).reshape(b, t, h * d)
        x = x + y @ p[n + "self_attn.o_proj.weight"].t()
        m = rms_norm(x, p[n + "post_attention_layernorm.weight"], eps)
        x = x + sparse_moe(cfg, p, n, m, margins)
    x = rms_norm(x, p["model.norm.weight"], eps)
    head = p["model.embed_tokens.weight"] if cfg["tie_word_embeddings"] else p["lm_head.weight"]
    return x @ head.t()


def greedy(cfg, p, prompt, steps, margins):
    ids, logit_margins = list(prompt), []
    with torch.no_grad():
        for _ in range(steps):
            logits = forward(cfg, p, torch.tensor([ids]), margins)[0, -1]
            top = torch.topk(logits, 2).values
            logit_margins.append(float(top[0] - top[1]))
            ids.append(int(torch.argmax(logits)))
    return ids[len(prompt):], min(logit_margins)


def build(name, cfg, batch, seq, out):
    for attempt in range(200):
        gen = torch.Generator().manual_seed(20260101 + 1000 * sorted(VARIANTS).index(name) + attempt)
        params32 = make_params(cfg, gen)
        p64 = {n: t.double() for n, t in params32.items()}
        ids = torch.randint(0, cfg["vocab_size"], (batch, seq), generator=gen)
        targets = torch.randint(0, cfg["vocab_size"], (batch, seq), generator=gen)
        targets[1, 4] = -100  # one ignored position, as HF labels use
        route_margins = []
        generated, margin = greedy(cfg, p64, PROMPT, GREEDY_STEPS, route_margins)
        with torch.no_grad():
            forward(cfg, p64, ids, route_margins)
        if margin > 1e-3 and min(route_margins) > 1e-4:
            break
    else:
        raise SystemExit(f"{name}: no seed gives clear routing and greedy margins")
    d = os.path.join(out, name)
    os.makedirs(os.path.join(d, "model"), exist_ok=True)
    write_safetensors(os.path.join(d, "model", "model.safetensors"), list(params32.items()),
                      {"format": "pt"})
    with open(os.path.join(d, "model", "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)

    p = {n: t.double().requires_grad_(True) for n, t in params32.items()}
    logits = forward(cfg, p, ids, [])
    loss = torch.nn.functional.cross_entropy(logits.reshape(-1, cfg["vocab_size"]),
                                             targets.reshape(-1), ignore_index=-100)
    loss.backward()
    ref = [("ids", ids), ("targets", targets), ("logits", logits.detach()),
           ("loss", loss.detach().reshape(1)), ("prompt", torch.tensor(PROMPT)),
           ("greedy", torch.tensor(generated))]
    ref += [("grad." + n, t.grad) for n, t in p.items()]
    write_safetensors(os.path.join(d, "reference.safetensors"), ref,
                      {"torch": torch.__version__, "greedy_min_margin": repr(margin),
                       "routing_min_margin": repr(min(route_margins))})
    print(f"{name}: loss {loss.item():.6f}, greedy {generated}, margins {margin:.3g} / "
          f"{min(route_margins):.3g}")


def main():
    out = sys.argv[1]
    torch.manual_seed(0)
    for name, (cfg, batch, seq) in VARIANTS.items():
        build(name, cfg, batch, seq, out)


if __name__ == "__main__":
    main()
