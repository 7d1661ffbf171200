#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""PyTorch reference for tessel's optimizer pieces, driven by files a C++ test wrote.

DIR/index.json says what to run:
  {"mode": "adamw", "betas": [b1, b2], "eps": e, "weight_decay": wd, "lrs": [lr per step],
   "params": [{"name": n, "shape": [...]}, ...]}
      reads init.<name>.f32 and grad.<step>.<name>.f32 (step 1-based), runs torch.optim.AdamW with
      two groups (weight_decay on the tensors of two or more dims, 0 on the others) and the given
      lr per step, and writes out.param.<name>.f32, out.exp_avg.<name>.f32 and
      out.exp_avg_sq.<name>.f32.
  {"mode": "clip", "cases": [{"name": c, "max_norm": m, "grads": [{"name": n, "shape": [...]}]}]}
      reads clip.<c>.<name>.f32, runs torch.nn.utils.clip_grad_norm_, and writes
      out.clip.<c>.<name>.f32 (the clipped gradients), out.clip.<c>.norm.f64 (torch's returned
      norm) and out.clip.<c>.norm64.f64 (the same norm computed in float64).
Files are raw little-endian arrays, row-major.

Usage: /usr/bin/python3 torch_optim_reference.py DIR
"""
import json
import os
import sys

import torch


def read_f32(path, shape):
    with open(path, "rb") as f:
        data = bytearray(f.read())
    t = torch.frombuffer(data, dtype=torch.float32).clone()
    count = 1
    for d in shape:
        count *= d
    if t.numel() != count:
        sys.exit(f"{path}: {t.numel()} floats, expected {count} for shape {shape}")
    return t.reshape(shape)


def write(path, t, dtype):
    with open(path, "wb") as f:
        f.write(t.detach().to(dtype).contiguous().numpy().tobytes())


def run_adamw(d, index):
    specs = index["params"]
    params = [torch.nn.Parameter(read_f32(os.path.join(d, f"init.{p['name']}.f32"), p["shape"]))
              for p in specs]
    decay = [p for p in params if p.dim() >= 2]
    no_decay = [p for p in params if p.dim() < 2]
    lrs = index["lrs"]
    opt = torch.optim.AdamW(
        [{"params": decay, "weight_decay": index["weight_decay"]},
         {"params": no_decay, "weight_decay": 0.0}],
        lr=lrs[0], betas=tuple(index["betas"]), eps=index["eps"], foreach=False)
    for step, lr in enumerate(lrs, start=1):
        for spec, p in zip(specs, params):
            p.grad = read_f32(os.path.join(d, f"grad.{step}.{spec['name']}.f32"), spec["shape"])
        for group in opt.param_groups:
            group["lr"] = lr
        opt.step()
    for spec, p in zip(specs, params):
        state = opt.state[p]
        write(os.path.join(d, f"out.param.{spec['name']}.f32"), p, torch.float32)
        write(os.path.join(d, f"out.exp_avg.{spec['name']}.f32"), state["exp_avg"], torch.float32)
        write(os.path.join(d, f"out.exp_avg_sq.{spec['name']}.f32"), state["exp_avg_sq"],
              torch.float32)


def run_clip(d, index):
    for case in index["cases"]:
        c = case["name"]
        params = []
        for g in case["grads"]:
            p = torch.nn.Parameter(torch.zeros(g["shape"]))
            p.grad = read_f32(os.path.join(d, f"clip.{c}.{g['name']}.f32"), g["shape"])
            params.append(p)
        norm64 = torch.sqrt(sum((p.grad.double() ** 2).sum() for p in params))
        norm = torch.nn.utils.clip_grad_norm_(params, case["max_norm"])
        for g, p in zip(case["grads"], params):
            write(os.path.join(d, f"out.clip.{c}.{g['name']}.f32"), p.grad, torch.float32)
        write(os.path.join(d, f"out.clip.{c}.norm.f64"), norm.reshape(1), torch.float64)
        write(os.path.join(d, f"out.clip.{c}.norm64.f64"), norm64.reshape(1), torch.float64)


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: torch_optim_reference.py DIR")
    d = sys.argv[1]
    with open(os.path.join(d, "index.json")) as f:
        index = json.load(f)
    torch.set_num_threads(1)
    modes = {"adamw": run_adamw, "clip": run_clip}
    if index.get("mode") not in modes:
        sys.exit(f"index.json: mode must be one of {sorted(modes)}, got {index.get('mode')!r}")
    modes[index["mode"]](d, index)


if __name__ == "__main__":
    main()
