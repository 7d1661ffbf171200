#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""PyTorch reference for tessel's mixture-of-experts layer (nn/moe.h), written from the papers
(GShard, Switch Transformer, ST-MoE, Mixtral, DeepSpeed-MoE's PR-MoE) and docs/MOE.md, without
tessel's algorithm: capacity positions come from a cumulative sum over one-hot dispatch masks in
priority order (GShard's formulation) and every expert runs densely on every token, its output
masked by the dispatch, so neither the grouping nor the permutation of tessel's code is shared.

For each case it writes OUT_DIR/<case>.safetensors holding, in float64: the input x, an upstream
gradient r, the layer's parameters (tessel's names), and the reference: the output y, the
unweighted load-balancing and z losses, the weighted aux loss, the chosen experts and kept mask
[T, k], tokens computed per expert, and the gradient of L = sum(y * r) + aux_loss with respect to
x and every parameter ("grad.<name>"). The case's config is the metadata entry "config".

Usage: /usr/bin/python3 moe_reference.py OUT_DIR
"""
import json
import math
import os
import struct
import sys

import torch

DTYPES = {torch.float64: "F64", torch.int64: "I64"}

BASE = {"hidden": 13, "ffn_hidden": 7, "num_experts": 5, "top_k": 2, "gate_form": "mixtral",
        "expert": "swiglu", "drop_tokens": True, "capacity_factor": 0.75, "aux_loss_coef": 0.01,
        "z_loss_coef": 0.001, "residual": False, "batch": [3, 11]}

CASES = {
    "top2_mixtral_swiglu_drop": {},
    "top2_mixtral_swiglu_nodrop": {"drop_tokens": False},
    "top2_switch_gelu_drop": {"gate_form": "switch", "expert": "gelu", "capacity_factor": 1.0},
    "top1_switch_gelu_drop": {"top_k": 1, "gate_form": "switch", "expert": "gelu"},
    "top1_switch_swiglu_nodrop": {"top_k": 1, "gate_form": "switch", "drop_tokens": False,
                                  "num_experts": 7},
    "top1_mixtral_gelu_nodrop": {"top_k": 1, "expert": "gelu", "drop_tokens": False},
    "top2_mixtral_gelu_nodrop_e3": {"expert": "gelu", "drop_tokens": False, "num_experts": 3,
                                    "batch": [33]},
    "residual_swiglu_drop": {"top_k": 1, "gate_form": "switch", "residual": True,
                             "capacity_factor": 1.0},
    "residual_gelu_nodrop": {"top_k": 1, "gate_form": "switch", "expert": "gelu",
                             "residual": True, "drop_tokens": False},
}


def write_safetensors(path, tensors, metadata):
    header, blobs, offset = {}, [], 0
    for name, t in tensors:
        data = t.detach().contiguous().numpy().tobytes()
        header[name] = {"dtype": DTYPES[t.dtype], "shape": list(t.shape),
                        "data_offsets": [offset, offset + len(data)]}
        blobs.append(data)
        offset += len(data)
    header["__metadata__"] = metadata
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for b in blobs:
            f.write(b)
    os.replace(tmp, path)


def make_params(cfg, gen):
    c, f, e = cfg["hidden"], cfg["ffn_hidden"], cfg["num_experts"]

    def rnd(*shape, scale=0.5):
        return (torch.randn(*shape, generator=gen, dtype=torch.float64) * scale).requires_grad_()

    p = {"router.weight": rnd(e, c)}
    if cfg["expert"] == "swiglu":
        p["experts.gate_proj"] = rnd(e, f, c)
        p["experts.up_proj"] = rnd(e, f, c)
        p["experts.down_proj"] = rnd(e, c, f)
    else:
        p["experts.fc_weight"] = rnd(e, f, c)
        p["experts.fc_bias"] = rnd(e, f, scale=0.1)
        p["experts.proj_weight"] = rnd(e, c, f)
        p["experts.proj_bias"] = rnd(e, c, scale=0.1)
    if cfg["residual"]:
        if cfg["expert"] == "swiglu":
            p["dense.gate_proj.weight"] = rnd(f, c)
            p["dense.up_proj.weight"] = rnd(f, c)
            p["dense.down_proj.weight"] = rnd(c, f)
        else:
            p["dense.c_fc.weight"] = rnd(f, c)
            p["dense.c_fc.bias"] = rnd(f, scale=0.1)
            p["dense.c_proj.weight"] = rnd(c, f)
            p["dense.c_proj.bias"] = rnd(c, scale=0.1)
    return p


def gelu_tanh(x):
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x ** 3)))


def mlp(kind, x, w_a, w_b, w_c, b_a=None, b_c=None):
    """SwiGLU: w_c(silu(w_a x) * w_b x); GELU: w_c gelu(w_a x + b_a) + b_c (w_b unused)."""
    if kind == "swiglu":
        return torch.nn.functional.silu(x @ w_a.T) * (x @ w_b.T) @ w_c.T
    return gelu_tanh(x @ w_a.T + b_a) @ w_c.T + b_c


def expert_out(cfg, p, e, x):
    if cfg["expert"] == "swiglu":
        return mlp("swiglu", x, p["experts.gate_proj"][e], p["experts.up_proj"][e],
                   p["experts.down_proj"][e])
    return mlp("gelu", x, p["experts.fc_weight"][e], None, p["experts.proj_weight"][e],
               p["experts.fc_bias"][e], p["experts.proj_bias"][e])


def dense_out(cfg, p, x):
    if cfg["expert"] == "swiglu":
        return mlp("swiglu", x, p["dense.gate_proj.weight"], p["dense.up_proj.weight"],
                   p["dense.down_proj.weight"])
    return mlp("gelu", x, p["dense.c_fc.weight"], None, p["dense.c_proj.weight"],
               p["dense.c_fc.bias"], p["dense.c_proj.bias"])


def moe(cfg, p, x):
    c, e, k = cfg["hidden"], cfg["num_experts"], cfg["top_k"]
    x2 = x.reshape(-1, c)
    t = x2.shape[0]
    logits = x2 @ p["router.weight"].T
    probs = torch.softmax(logits, dim=-1)
    top_p, top_i = torch.topk(probs, k, dim=-1)  # sorted, descending
    gates = top_p / top_p.sum(-1, keepdim=True) if cfg["gate_form"] == "mixtral" else top_p

    # GShard dispatch: one-hot [k, T, E] in priority order (choice rank, then token); a pair's
    # place in its expert is the running count of earlier pairs there.
    onehot = torch.nn.functional.one_hot(top_i.T, e).to(torch.int64)  # [k, T, E]
    place = (torch.cumsum(onehot.reshape(k * t, e), 0).reshape(k, t, e) - 1) * onehot
    place = place.sum(-1).T  # [T, k]
    if cfg["drop_tokens"]:
        cap = max(1, math.ceil(cfg["capacity_factor"] * t * k / e))
        kept = place < cap
    else:
        kept = torch.ones_like(place, dtype=torch.bool)

    y = torch.zeros_like(x2)
    for ex in range(e):
        out = expert_out(cfg, p, ex, x2)  # every token, masked below
        w = ((top_i == ex) & kept).to(x2.dtype) * gates  # [T, k]
        y = y + w.sum(-1, keepdim=True) * out
    if cfg["residual"]:
        y = y + dense_out(cfg, p, x2)

    f = torch.bincount(top_i[:, 0], minlength=e).to(x2.dtype) / t
    balance = e * (f * probs.mean(0)).sum()
    z = (torch.logsumexp(logits, -1) ** 2).mean()
    aux = cfg["aux_loss_coef"] * balance + cfg["z_loss_coef"] * z
    per_expert = torch.stack([((top_i == ex) & kept).sum() for ex in range(e)])
    return y.reshape(x.shape), balance, z, aux, top_i, kept, per_expert


def run_case(name, overrides, out_dir, seed):
    cfg = dict(BASE)
    cfg.update(overrides)
    gen = torch.Generator().manual_seed(seed)
    p = make_params(cfg, gen)
    x = torch.randn(*cfg["batch"], cfg["hidden"], generator=gen,
                    dtype=torch.float64).requires_grad_()
    r = torch.randn(*cfg["batch"], cfg["hidden"], generator=gen, dtype=torch.float64)
    y, balance, z, aux, top_i, kept, per_expert = moe(cfg, p, x)
    loss = (y * r).sum() + aux
    names = list(p)
    grads = torch.autograd.grad(loss, [x] + [p[n] for n in names])
    tensors = [("x", x), ("r", r)] + [(n, p[n]) for n in names]
    tensors += [("y", y), ("balance_loss", balance.reshape(1)), ("z_loss", z.reshape(1)),
                ("aux_loss", aux.reshape(1)), ("choice", top_i), ("kept", kept.to(torch.int64)),
                ("tokens_per_expert", per_expert), ("grad.x", grads[0])]
    tensors += [("grad." + n, g) for n, g in zip(names, grads[1:])]
    write_safetensors(os.path.join(out_dir, name + ".safetensors"), tensors,
                      {"config": json.dumps(cfg)})
    return int(kept.numel() - kept.sum())


def main():
    out_dir = sys.argv[1]
    os.makedirs(out_dir, exist_ok=True)
    for i, (name, overrides) in enumerate(CASES.items()):
        dropped = run_case(name, overrides, out_dir, 1000 + i)
        print(f"{name}: {dropped} dropped pairs")


if __name__ == "__main__":
    main()
