#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""PyTorch (Debian python3-torch) peer of `tessel bench generate`: a minimal GPT-2 (learned
positions, pre-LN blocks, tanh GELU, LM head tied to the token embedding) with a per-layer key/value
cache, random weights, fp32, batch 1. Measures prefill tokens/s over a random prompt and greedy
cached decode tokens/s. With --tessel PATH it then runs `PATH bench generate` with the same settings
and prints tessel's lines and the tessel/torch ratios, so both are measured in one invocation.

    /usr/bin/python3 bench/peers/torch_generate.py [--tessel PATH] [--threads N] [--seconds S]
"""
import argparse
import json
import math
import os
import subprocess
import sys
import time

import torch
import torch.nn.functional as F

CONFIGS = {  # n_layer, n_embd, n_head
    "124M": (12, 768, 12),
    "355M": (24, 1024, 16),
    "774M": (36, 1280, 20),
    "1558M": (48, 1600, 25),
}


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

    def forward(self, x, cache, pos):
        # cache: (k, v) buffers [1, heads, capacity, head_dim]; x holds positions [pos, pos + t).
        b, t, c = x.shape
        d = c // self.heads
        q, k, v = self.c_attn(self.ln_1(x)).split(c, dim=2)
        q, k, v = (z.view(b, t, self.heads, d).transpose(1, 2) for z in (q, k, v))
        kc, vc = cache
        kc[:, :, pos:pos + t] = k
        vc[:, :, pos:pos + t] = v
        keys, values = kc[:, :, :pos + t], vc[:, :, :pos + t]
        scores = (q @ keys.transpose(-2, -1)) * (1.0 / math.sqrt(d))
        if t > 1:
            mask = torch.ones(t, pos + t, dtype=torch.bool).tril(diagonal=pos)
            scores = scores.masked_fill(~mask, float("-inf"))
        y = (scores.softmax(-1) @ values).transpose(1, 2).reshape(b, t, c)
        x = x + self.c_proj(y)
        return x + self.mlp_proj(F.gelu(self.c_fc(self.ln_2(x)), approximate="tanh"))


class GPT2(torch.nn.Module):
    def __init__(self, vocab, positions, layers, c, heads):
        super().__init__()
        self.wte = torch.nn.Embedding(vocab, c)
        self.wpe = torch.nn.Embedding(positions, c)
        self.h = torch.nn.ModuleList(Block(c, heads) for _ in range(layers))
        self.ln_f = torch.nn.LayerNorm(c, eps=1e-5)
        for p in self.parameters():
            if p.dim() == 2:
                torch.nn.init.normal_(p, 0.0, 0.02)

    def make_cache(self, capacity):
        blk = self.h[0]
        d = blk.c_proj.in_features // blk.heads
        return [(torch.empty(1, blk.heads, capacity, d), torch.empty(1, blk.heads, capacity, d))
                for _ in self.h]

    def forward(self, ids, cache, pos):
        t = ids.shape[1]
        x = self.wte(ids) + self.wpe(torch.arange(pos, pos + t))
        for blk, layer_cache in zip(self.h, cache):
            x = blk(x, layer_cache, pos)
        # Logits of the last position only, as tessel's generate asks of forward_step: all that
        # sampling needs, so both sides do the same work in prefill.
        return F.linear(self.ln_f(x[:, -1:]), self.wte.weight)


def generate(model, prompt, tokens):
    """Prefill then greedy cached decode; returns (prefill seconds, decode seconds, forwards)."""
    n = prompt.shape[1]
    cache = model.make_cache(n + tokens)
    t0 = time.perf_counter()
    logits = model(prompt, cache, 0)
    prefill = time.perf_counter() - t0
    t0 = time.perf_counter()
    forwards = 0
    for s in range(tokens):
        nxt = int(logits[0, -1].argmax())
        if s + 1 == tokens:
            break
        logits = model(torch.tensor([[nxt]]), cache, n + s)
        forwards += 1
    return prefill, time.perf_counter() - t0, forwards


def median(v):
    return sorted(v)[len(v) // 2]


def emit(**kv):
    kv["peer"] = "pytorch " + torch.__version__
    kv["threads"] = torch.get_num_threads()
    print(json.dumps(kv), flush=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--config", default="124M", choices=sorted(CONFIGS))
    ap.add_argument("--prompt", type=int, default=512)
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument("--seconds", type=float, default=1.0)
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--tessel", help="tessel executable: also run `tessel bench generate`")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    layers, c, heads = CONFIGS[args.config]
    vocab, positions = 50257, 1024
    assert args.prompt + args.tokens <= positions, "prompt + tokens exceeds 1024 positions"

    with torch.no_grad():
        model = GPT2(vocab, positions, layers, c, heads).eval()
        prompt = torch.randint(0, vocab, (1, args.prompt))
        generate(model, prompt, args.tokens)  # warm-up
        prefill_tps, decode_tps = [], []
        start = time.perf_counter()
        while True:
            p, d, f = generate(model, prompt, args.tokens)
            prefill_tps.append(args.prompt / p)
            decode_tps.append(f / d)
            if time.perf_counter() - start >= args.seconds:
                break
    torch_rates = {"prefill": median(prefill_tps), "decode": median(decode_tps)}
    emit(bench="generate", figure="prefill", config=args.config, prompt=args.prompt,
         tokens_per_s=torch_rates["prefill"], ms=args.prompt / torch_rates["prefill"] * 1e3,
         runs=len(prefill_tps))
    emit(bench="generate", figure="decode", config=args.config, prompt=args.prompt,
         tokens=args.tokens, tokens_per_s=torch_rates["decode"],
         ms_per_token=1e3 / torch_rates["decode"], runs=len(decode_tps))
    if not args.tessel:
        return

    env = dict(os.environ, TESSEL_NUM_THREADS=str(args.threads))
    cmd = [args.tessel, "bench", "generate", "--config", args.config, "--prompt",
           str(args.prompt), "--tokens", str(args.tokens), "--seconds", str(args.seconds)]
    out = subprocess.run(cmd, env=env, check=True, stdout=subprocess.PIPE, text=True).stdout
    tessel_rates = {}
    for line in out.splitlines():
        print(line, flush=True)
        rec = json.loads(line)
        if rec.get("bench") == "generate" and rec.get("figure") in torch_rates:
            tessel_rates[rec["figure"]] = rec["tokens_per_s"]
    for figure, torch_tps in torch_rates.items():
        if figure not in tessel_rates:
            sys.exit("tessel bench generate printed no '%s' figure" % figure)
        print(json.dumps({"bench": "generate", "figure": figure + "_ratio_tessel_over_torch",
                          "ratio": tessel_rates[figure] / torch_tps,
                          "tessel_tokens_per_s": tessel_rates[figure],
                          "torch_tokens_per_s": torch_tps,
                          "peer": "pytorch " + torch.__version__}), flush=True)


if __name__ == "__main__":
    main()
