#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""PyTorch (Debian python3-torch) peer of `tessel bench train`: one training step on random tokens,
fp32: forward + mean cross-entropy, backward, clip_grad_norm_(1.0), AdamW with weight decay on the
matrices only, zero_grad. Prints one JSON line with ms/step and tokens/s (medians over the timed
steps); with --breakdown also torch.profiler's per-op self CPU time of one step.

--family gpt2 (default): GPT-2 (learned positions, pre-LN blocks, tanh GELU, LM head tied to the
token embedding, no dropout). --family llama: LLaMA (RMSNorm, rotary embeddings in the rotate_half
layout, SwiGLU MLP, grouped-query attention by repeating the k/v heads, causal attention, LM head
tied or not, optional q/k/v, o and MLP biases as Llama's attention_bias / mlp_bias and Qwen2 have);
no rope_scaling and no sliding window (`tessel bench train` refuses configs that have them).

    /usr/bin/python3 bench/peers/torch_train.py [-B 4] [-T 64] [--threads N] [--steps S]
        [--family llama --n-layer L --n-embd C --n-head H --kv-heads K --head-dim D
         --intermediate I --rope-theta R --rms-eps E --tied 0|1]
"""
import argparse
import json
import math
import os
import resource
import time

import torch
import torch.nn.functional as F


class Block(torch.nn.Module):
    def __init__(self, c, heads):
        super().__init__()
        self.heads = heads
        self.ln_1 = torch.nn.LayerNorm(c, eps=1e-5)
        self.c_attn = torch.nn.Linear(c, 3 * c)
        self.c_proj = torch.nn.Linear(c, c)
        self.ln_2 = torch.nn.LayerNorm(c, eps=1e-5)
        self.c_fc = torch.nn.Linear(c, 4 * c)
        self.mlp_proj = torch.nn.Linear(4 * c, c)

    def forward(self, x, mask):
        b, t, c = x.shape
        d = c // self.heads
        q, k, v = self.c_attn(self.ln_1(x)).split(c, dim=2)
        q, k, v = (z.view(b, t, self.heads, d).transpose(1, 2) for z in (q, k, v))
        # Torch 1.13 has no fused attention on CPU: scores, mask, softmax, weighted sum.
        scores = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(d))
        scores = scores.masked_fill(mask[:t, :t], float("-inf"))
        y = (scores.softmax(-1) @ v).transpose(1, 2).reshape(b, t, c)
        x = x + self.c_proj(y)
        return x + self.mlp_proj(F.gelu(self.c_fc(self.ln_2(x)), approximate="tanh"))


class GPT2(torch.nn.Module):
    def __init__(self, vocab, positions, layers, c, heads):
        super().__init__()
        self.wte = torch.nn.Embedding(vocab, c)
        self.wpe = torch.nn.Embedding(positions, c)
        self.h = torch.nn.ModuleList(Block(c, heads) for _ in range(layers))
        self.ln_f = torch.nn.LayerNorm(c, eps=1e-5)
        self.register_buffer("mask", ~torch.ones(positions, positions, dtype=torch.bool).tril())
        for p in self.parameters():
            if p.dim() == 2:
                torch.nn.init.normal_(p, 0.0, 0.02)

    def forward(self, ids, targets):
        t = ids.shape[1]
        x = self.wte(ids) + self.wpe(torch.arange(t))
        for blk in self.h:
            x = blk(x, self.mask)
        logits = F.linear(self.ln_f(x), self.wte.weight)
        return F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))


def causal_attention(q, k, v, mask):
    """softmax(q k^T / sqrt(d), causal) v over (b, heads, t, d)."""
    if hasattr(F, "scaled_dot_product_attention"):  # torch >= 2.0
        return F.scaled_dot_product_attention(q, k, v, is_causal=True)
    # Torch 1.13 has no fused attention on CPU: scores, mask, softmax, weighted sum.
    t = q.shape[-2]
    scores = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(q.shape[-1]))
    scores = scores.masked_fill(mask[:t, :t], float("-inf"))
    return scores.softmax(-1) @ v


class RMSNorm(torch.nn.Module):
    def __init__(self, c, eps):
        super().__init__()
        self.eps = eps
        self.weight = torch.nn.Parameter(torch.ones(c))

    def forward(self, x):
        return self.weight * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps))


def rotate_half(x):
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


class LlamaLayer(torch.nn.Module):
    def __init__(self, a):
        super().__init__()
        self.heads, self.kv_heads, self.d = a.n_head, a.kv_heads, a.head_dim
        c, qkv_bias = a.n_embd, bool(a.qkv_bias)
        self.input_layernorm = RMSNorm(c, a.rms_eps)
        self.q_proj = torch.nn.Linear(c, self.heads * self.d, bias=qkv_bias)
        self.k_proj = torch.nn.Linear(c, self.kv_heads * self.d, bias=qkv_bias)
        self.v_proj = torch.nn.Linear(c, self.kv_heads * self.d, bias=qkv_bias)
        self.o_proj = torch.nn.Linear(self.heads * self.d, c, bias=bool(a.o_bias))
        self.post_attention_layernorm = RMSNorm(c, a.rms_eps)
        self.gate_proj = torch.nn.Linear(c, a.intermediate, bias=bool(a.mlp_bias))
        self.up_proj = torch.nn.Linear(c, a.intermediate, bias=bool(a.mlp_bias))
        self.down_proj = torch.nn.Linear(a.intermediate, c, bias=bool(a.mlp_bias))

    def forward(self, x, cos, sin, mask):
        b, t, _ = x.shape
        h = self.input_layernorm(x)
        q = self.q_proj(h).view(b, t, self.heads, self.d).transpose(1, 2)
        k = self.k_proj(h).view(b, t, self.kv_heads, self.d).transpose(1, 2)
        v = self.v_proj(h).view(b, t, self.kv_heads, self.d).transpose(1, 2)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        rep = self.heads // self.kv_heads
        if rep > 1:  # transformers' repeat_kv: each k/v head serves `rep` consecutive q heads
            k = k.repeat_interleave(rep, dim=1)
            v = v.repeat_interleave(rep, dim=1)
        y = causal_attention(q, k, v, mask).transpose(1, 2).reshape(b, t, self.heads * self.d)
        x = x + self.o_proj(y)
        h = self.post_attention_layernorm(x)
        return x + self.down_proj(F.silu(self.gate_proj(h)) * self.up_proj(h))


class Llama(torch.nn.Module):
    def __init__(self, a):
        super().__init__()
        self.embed_tokens = torch.nn.Embedding(a.vocab, a.n_embd)
        self.layers = torch.nn.ModuleList(LlamaLayer(a) for _ in range(a.n_layer))
        self.norm = RMSNorm(a.n_embd, a.rms_eps)
        self.lm_head = None if a.tied else torch.nn.Linear(a.n_embd, a.vocab, bias=False)
        inv_freq = 1.0 / (a.rope_theta ** (torch.arange(0, a.head_dim, 2).double() / a.head_dim))
        angles = torch.arange(a.positions).double()[:, None] * inv_freq[None, :]
        angles = torch.cat((angles, angles), dim=-1)
        self.register_buffer("cos", angles.cos().float())
        self.register_buffer("sin", angles.sin().float())
        self.register_buffer("mask", ~torch.ones(a.positions, a.positions, dtype=torch.bool).tril())
        for p in self.parameters():
            if p.dim() == 2:
                torch.nn.init.normal_(p, 0.0, 0.02)
        for m in self.modules():
            if isinstance(m, torch.nn.Linear) and m.bias is not None:
                torch.nn.init.zeros_(m.bias)

    def forward(self, ids, targets):
        t = ids.shape[1]
        cos, sin = self.cos[:t], self.sin[:t]
        x = self.embed_tokens(ids)
        for layer in self.layers:
            x = layer(x, cos, sin, self.mask)
        x = self.norm(x)
        logits = F.linear(x, self.embed_tokens.weight) if self.lm_head is None else self.lm_head(x)
        return F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))


def median(v):
    return sorted(v)[len(v) // 2]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--family", choices=["gpt2", "llama"], default="gpt2")
    ap.add_argument("-B", "--batch", type=int, default=4)
    ap.add_argument("-T", "--seq", type=int, default=64)
    ap.add_argument("--n-layer", type=int, default=12)
    ap.add_argument("--n-embd", type=int, default=768)
    ap.add_argument("--n-head", type=int, default=12)
    ap.add_argument("--vocab", type=int, default=50257)
    ap.add_argument("--positions", type=int, default=1024)
    # LLaMA only (--family llama); --n-head is the query heads.
    ap.add_argument("--intermediate", type=int, default=None, help="MLP width (default 8/3 C)")
    ap.add_argument("--kv-heads", type=int, default=None, help="key/value heads (default n_head)")
    ap.add_argument("--head-dim", type=int, default=None, help="default n_embd / n_head")
    ap.add_argument("--rope-theta", type=float, default=10000.0)
    ap.add_argument("--rms-eps", type=float, default=1e-5)
    ap.add_argument("--tied", type=int, choices=[0, 1], default=1, help="LM head = embedding")
    ap.add_argument("--qkv-bias", type=int, choices=[0, 1], default=0)
    ap.add_argument("--o-bias", type=int, choices=[0, 1], default=0)
    ap.add_argument("--mlp-bias", type=int, choices=[0, 1], default=0)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--lr", type=float, default=3e-4)
    ap.add_argument("--weight-decay", type=float, default=0.1)
    ap.add_argument("--breakdown", action="store_true", help="torch.profiler table of one step")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)

    if args.family == "gpt2":
        model = GPT2(args.vocab, args.positions, args.n_layer, args.n_embd, args.n_head).train()
    else:
        args.kv_heads = args.kv_heads or args.n_head
        args.head_dim = args.head_dim or args.n_embd // args.n_head
        args.intermediate = args.intermediate or (8 * args.n_embd) // 3
        if args.n_head % args.kv_heads != 0:
            ap.error(f"--n-head {args.n_head} is not a multiple of --kv-heads {args.kv_heads}")
        if args.head_dim % 2 != 0:
            ap.error(f"--head-dim {args.head_dim} must be even (rotary embeddings)")
        model = Llama(args).train()
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": args.weight_decay},
                             {"params": no_decay, "weight_decay": 0.0}], lr=args.lr)
    ids = torch.randint(0, args.vocab, (args.batch, args.seq))
    targets = torch.randint(0, args.vocab, (args.batch, args.seq))

    def step():
        loss = model(ids, targets)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss

    for _ in range(args.warmup):
        step()
    times = []
    r0 = resource.getrusage(resource.RUSAGE_SELF)
    for _ in range(args.steps):
        t0 = time.perf_counter()
        loss = step()
        times.append(time.perf_counter() - t0)
    r1 = resource.getrusage(resource.RUSAGE_SELF)
    cpu = (r1.ru_utime + r1.ru_stime - r0.ru_utime - r0.ru_stime) / args.steps
    s = median(times)
    tokens = args.batch * args.seq
    print(json.dumps({"bench": "train", "figure": "step", "peer": "pytorch " + torch.__version__,
                      "family": args.family,
                      "threads": torch.get_num_threads(), "batch": args.batch, "seq": args.seq,
                      "ms_per_step": s * 1e3, "best_ms": min(times) * 1e3,
                      "tokens_per_s": tokens / s, "steps": len(times),
                      "cpu_ms_per_step": cpu * 1e3,
                      "page_faults_per_step": (r1.ru_minflt - r0.ru_minflt) / args.steps,
                      "loss": float(loss)}), flush=True)
    if args.breakdown:
        from torch.profiler import ProfilerActivity, profile
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            step()
        total = sum(e.self_cpu_time_total for e in prof.key_averages())
        for e in sorted(prof.key_averages(), key=lambda e: -e.self_cpu_time_total)[:25]:
            print(json.dumps({"bench": "train", "figure": "breakdown",
                              "peer": "pytorch " + torch.__version__, "op": e.key,
                              "ms_per_step": e.self_cpu_time_total / 1e3, "calls": e.count,
                              "share": e.self_cpu_time_total / total}), flush=True)


if __name__ == "__main__":
    main()
