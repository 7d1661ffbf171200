#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""PyTorch (Debian python3-torch) at the shapes `tessel bench kernels` uses, so each tessel figure
has a peer measured on the same machine in the same session. One JSON object per line.

    /usr/bin/python3 bench/peers/torch_kernels.py [--seconds S] [--threads N]
"""
import argparse
import json
import os
import time

import torch


def time_it(fn, budget):
    fn()
    times = []
    start = time.perf_counter()
    while len(times) < 3 or time.perf_counter() - start < budget:
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    times.sort()
    return times[len(times) // 2]


def emit(**kv):
    kv["peer"] = "pytorch " + torch.__version__
    kv["threads"] = torch.get_num_threads()
    print(json.dumps(kv), flush=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=0.5)
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    b = args.seconds
    with torch.no_grad():
        for s in (1024, 2048):
            x, y = torch.randn(s, s), torch.randn(s, s)
            t = time_it(lambda: torch.mm(x, y), b)
            emit(figure="gemm_f32", shape=[s, s, s], gflops=2 * s**3 / t / 1e9)
        rows, c = 4096, 768
        x = torch.randn(rows, c)
        w, bias = torch.ones(c), torch.zeros(c)
        rw = 2 * rows * c * 4
        for name, fn in (
            ("layer_norm_fwd", lambda: torch.nn.functional.layer_norm(x, (c,), w, bias, 1e-5)),
            ("gelu_fwd", lambda: torch.nn.functional.gelu(x, approximate="tanh")),
            ("softmax_fwd", lambda: torch.softmax(x, -1)),
        ):
            t = time_it(fn, b)
            emit(figure=name, shape=[rows, c], ms=t * 1e3, gbs=rw / t / 1e9)
        shapes = (("gemm_fwd_NT", rows, 3072, c), ("gemm_dgrad_NN", rows, c, 3072),
                  ("gemm_wgrad_TN", 3072, c, rows))
        a_nt, w_nt = torch.randn(rows, c), torch.randn(3072, c)
        g_nn, w_nn = torch.randn(rows, 3072), torch.randn(3072, c)
        g_tn, x_tn = torch.randn(rows, 3072), torch.randn(rows, c)
        fns = (lambda: a_nt @ w_nt.t(), lambda: g_nn @ w_nn, lambda: g_tn.t() @ x_tn)
        for (name, m, n, k), fn in zip(shapes, fns):
            t = time_it(fn, b)
            emit(figure=name, shape=[m, n, k], gflops=2 * m * n * k / t / 1e9)
        # Causal attention the way torch 1.13 computes it (no fused SDPA kernel on CPU).
        bsz, T, H, D = 4, 256, 12, 64
        q, k, v = (torch.randn(bsz, H, T, D, requires_grad=True) for _ in range(3))
    mask = torch.ones(T, T, dtype=torch.bool).triu(1)

    def attn():
        s = (q @ k.transpose(-1, -2)) * (D ** -0.5)
        return torch.softmax(s.masked_fill(mask, float("-inf")), -1) @ v

    flops = 4 * bsz * H * T * T * D / 2
    with torch.no_grad():
        t = time_it(attn, b)
    emit(figure="attention_fwd_causal", shape=[bsz, T, H, D], ms=t * 1e3, gflops=flops / t / 1e9)
    dout = torch.randn(bsz, H, T, D)

    def fwd_bwd():
        out = attn()
        out.backward(dout)

    t_fb = time_it(fwd_bwd, b)
    emit(figure="attention_fwd_bwd_causal", shape=[bsz, T, H, D], ms=t_fb * 1e3,
         gflops=3.5 * flops / t_fb / 1e9)


if __name__ == "__main__":
    main()
