#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""PyTorch (Debian python3-torch) peer of `tessel bench train`: one GPT-2 training step (learned
positions, pre-LN blocks, tanh GELU, LM head tied to the token embedding, no dropout) on random
tokens, fp32: forward + mean cross-entropy, backward, clip_grad_norm_(1.0), AdamW with weight decay
on the matrices only, zero_grad. Prints one JSON line with ms/step and tokens/s (medians over the
timed steps); with --breakdown also torch.profiler's per-op self CPU time of one step.

    /usr/bin/python3 bench/peers/torch_train.py [-B 4] [-T 64] [--threads N] [--steps S]
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


def median(v):
    return sorted(v)[len(v) // 2]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("-B", "--batch", type=int, default=4)
    ap.add_argument("-T", "--seq", type=int, default=64)
    ap.add_argument("--n-layer", type=int, default=12)
    ap.add_argument("--n-embd", type=int, default=768)
    ap.add_argument("--n-head", type=int, default=12)
    ap.add_argument("--vocab", type=int, default=50257)
    ap.add_argument("--positions", type=int, default=1024)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--lr", type=float, default=3e-4)
    ap.add_argument("--weight-decay", type=float, default=0.1)
    ap.add_argument("--breakdown", action="store_true", help="torch.profiler table of one step")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)

    model = GPT2(args.vocab, args.positions, args.n_layer, args.n_embd, args.n_head).train()
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
