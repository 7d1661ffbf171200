#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""PyTorch reference for tessel's GPT-2: a GPT-2 in plain torch with Hugging Face semantics
(Conv1D weights stored [in, out], tanh GELU, pre-LN blocks, tied LM head), odd sizes and seeded
random weights. Writes the model in the HF layout twice (names with and without the
`transformer.` prefix; the prefixed one also carries the attn.bias / attn.masked_bias buffers and a
tied lm_head.weight, as GPT2LMHeadModel.state_dict() does), then the reference computed in float64
from the same f32 weights: logits, loss, every parameter gradient (HF names and layout) and the
ids of a 20-step greedy loop, plus the named intermediates of the forward (act.h.0.ln_1, ...)
for layer-by-layer comparison. Uses its own safetensors writer (struct + json).

Usage: /usr/bin/python3 gpt2_reference.py OUT_DIR
"""
import json
import math
import os
import struct
import sys

import torch

CONFIG = {
    "model_type": "gpt2", "architectures": ["GPT2LMHeadModel"], "vocab_size": 101,
    "n_positions": 17, "n_embd": 48, "n_layer": 2, "n_head": 3, "n_inner": None,
    "activation_function": "gelu_new", "layer_norm_epsilon": 1e-5, "resid_pdrop": 0.0,
    "embd_pdrop": 0.0, "attn_pdrop": 0.0, "initializer_range": 0.02,
    "tie_word_embeddings": True, "scale_attn_weights": True,
    "scale_attn_by_inverse_layer_idx": False, "reorder_and_upcast_attn": False,
}
BATCH, SEQ = 3, 17
PROMPT = [7, 3, 100, 42, 0]
GREEDY_STEPS = 20
DTYPES = {torch.float32: "F32", torch.float64: "F64", torch.int64: "I64"}


def write_safetensors(path, tensors, metadata=None):
    """tensors: list of (name, tensor). Header JSON padded with spaces to 8 bytes."""
    header, blobs, offset = {}, [], 0
    for name, t in tensors:
        data = t.detach().contiguous().cpu().numpy().tobytes()
        header[name] = {"dtype": DTYPES[t.dtype], "shape": list(t.shape),
                        "data_offsets": [offset, offset + len(data)]}
        blobs.append(data)
        offset += len(data)
    if metadata:
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


def make_params(gen):
    """HF names (no prefix) -> f32 tensors; Conv1D weights [in, out]. Larger-than-GPT-2 spread
    (weights 0.2, random biases and LN affines) so every path is exercised and logits are far
    from ties."""
    c, v, p, inner = CONFIG["n_embd"], CONFIG["vocab_size"], CONFIG["n_positions"], 4 * CONFIG["n_embd"]

    def randn(*shape, std=0.2, mean=0.0):
        return (torch.randn(*shape, generator=gen, dtype=torch.float32) * std + mean)

    params = {"wte.weight": randn(v, c, std=0.5), "wpe.weight": randn(p, c, std=0.3)}
    for i in range(CONFIG["n_layer"]):
        h = f"h.{i}."
        params[h + "ln_1.weight"] = randn(c, std=0.1, mean=1.0)
        params[h + "ln_1.bias"] = randn(c, std=0.1)
        params[h + "attn.c_attn.weight"] = randn(c, 3 * c)
        params[h + "attn.c_attn.bias"] = randn(3 * c, std=0.1)
        params[h + "attn.c_proj.weight"] = randn(c, c)
        params[h + "attn.c_proj.bias"] = randn(c, std=0.1)
        params[h + "ln_2.weight"] = randn(c, std=0.1, mean=1.0)
        params[h + "ln_2.bias"] = randn(c, std=0.1)
        params[h + "mlp.c_fc.weight"] = randn(c, inner)
        params[h + "mlp.c_fc.bias"] = randn(inner, std=0.1)
        params[h + "mlp.c_proj.weight"] = randn(inner, c, std=0.1)
        params[h + "mlp.c_proj.bias"] = randn(c, std=0.1)
    params["ln_f.weight"] = randn(c, std=0.1, mean=1.0)
    params["ln_f.bias"] = randn(c, std=0.1)
    return params


def gelu_new(x):
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * torch.pow(x, 3.0))))


def conv1d(x, w, b):
    # HF Conv1D: y = x @ W + b with W [in, out].
    return torch.addmm(b, x.reshape(-1, x.shape[-1]), w).reshape(*x.shape[:-1], w.shape[-1])


def forward(p, ids, acts=None):
    """Logits; with `acts` (a dict), also the named intermediates tessel reports."""
    record = (lambda name, value: acts.__setitem__(name, value.detach())) if acts is not None \
        else (lambda name, value: None)
    c, nh, eps = CONFIG["n_embd"], CONFIG["n_head"], CONFIG["layer_norm_epsilon"]
    b, t = ids.shape
    d = c // nh
    x = p["wte.weight"][ids] + p["wpe.weight"][torch.arange(t)]
    record("embd", x)
    mask = torch.tril(torch.ones(t, t, dtype=torch.bool))
    for i in range(CONFIG["n_layer"]):
        h = f"h.{i}."
        a = torch.nn.functional.layer_norm(x, (c,), p[h + "ln_1.weight"], p[h + "ln_1.bias"], eps)
        record(h + "ln_1", a)
        qkv = conv1d(a, p[h + "attn.c_attn.weight"], p[h + "attn.c_attn.bias"])
        record(h + "attn.c_attn", qkv)
        q, k, v = qkv.split(c, dim=2)
        q, k, v = (z.view(b, t, nh, d).transpose(1, 2) for z in (q, k, v))
        w = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(d)
        w = torch.where(mask, w, torch.tensor(torch.finfo(w.dtype).min, dtype=w.dtype))
        y = torch.matmul(torch.softmax(w, dim=-1), v).transpose(1, 2).reshape(b, t, c)
        record(h + "attn.y", y)
        x = x + conv1d(y, p[h + "attn.c_proj.weight"], p[h + "attn.c_proj.bias"])
        record(h + "resid_attn", x)
        m = torch.nn.functional.layer_norm(x, (c,), p[h + "ln_2.weight"], p[h + "ln_2.bias"], eps)
        record(h + "ln_2", m)
        m = gelu_new(conv1d(m, p[h + "mlp.c_fc.weight"], p[h + "mlp.c_fc.bias"]))
        record(h + "mlp.act", m)
        x = x + conv1d(m, p[h + "mlp.c_proj.weight"], p[h + "mlp.c_proj.bias"])
        record(h.rstrip("."), x)
    x = torch.nn.functional.layer_norm(x, (c,), p["ln_f.weight"], p["ln_f.bias"], eps)
    record("ln_f", x)
    return x @ p["wte.weight"].t()


def greedy(p, prompt, steps):
    """The usual full-recompute greedy loop; past n_positions the context window slides."""
    ids, margins = list(prompt), []
    with torch.no_grad():
        for _ in range(steps):
            window = ids[-CONFIG["n_positions"]:]
            logits = forward(p, torch.tensor([window]))[0, -1]
            top = torch.topk(logits, 2).values
            margins.append(float(top[0] - top[1]))
            ids.append(int(torch.argmax(logits)))
    return ids[len(prompt):], min(margins)


def main():
    out = sys.argv[1]
    torch.manual_seed(0)
    gen = torch.Generator().manual_seed(20241129)
    params32 = make_params(gen)
    ids = torch.randint(0, CONFIG["vocab_size"], (BATCH, SEQ), generator=gen)
    targets = torch.randint(0, CONFIG["vocab_size"], (BATCH, SEQ), generator=gen)
    targets[1, 4] = -100  # one ignored position, as HF labels use

    for variant, prefix in (("plain", ""), ("prefixed", "transformer.")):
        d = os.path.join(out, variant)
        os.makedirs(d, exist_ok=True)
        tensors = [(prefix + n, t) for n, t in params32.items()]
        if prefix:
            t = CONFIG["n_positions"]
            for i in range(CONFIG["n_layer"]):
                tensors.append((f"{prefix}h.{i}.attn.bias",
                                torch.tril(torch.ones(t, t)).view(1, 1, t, t)))
                tensors.append((f"{prefix}h.{i}.attn.masked_bias", torch.tensor(-1e4)))
            tensors.append(("lm_head.weight", params32["wte.weight"]))
        write_safetensors(os.path.join(d, "model.safetensors"), tensors, {"format": "pt"})
        with open(os.path.join(d, "config.json"), "w") as f:
            json.dump(CONFIG, f, indent=2)

    # The reference in float64 from the same (f32-representable) weights.
    p = {n: t.double().requires_grad_(True) for n, t in params32.items()}
    acts = {}
    logits = forward(p, ids, acts)
    loss = torch.nn.functional.cross_entropy(logits.reshape(-1, CONFIG["vocab_size"]),
                                             targets.reshape(-1), ignore_index=-100)
    loss.backward()
    generated, margin = greedy({n: t.detach() for n, t in p.items()}, PROMPT, GREEDY_STEPS)
    # Float32 rounding in tessel must not be able to flip an argmax.
    assert margin > 1e-3, f"greedy top-2 margin {margin} too small for a stable comparison"

    ref = [("ids", ids), ("targets", targets), ("logits", logits.detach()),
           ("loss", loss.detach().reshape(1)), ("prompt", torch.tensor(PROMPT)),
           ("greedy", torch.tensor(generated))]
    ref += [("grad." + n, t.grad) for n, t in p.items()]
    ref += [("act." + n, t) for n, t in acts.items()]
    write_safetensors(os.path.join(out, "reference.safetensors"), ref,
                      {"torch": torch.__version__, "greedy_min_margin": repr(margin)})
    print(f"wrote {out}: loss {loss.item():.6f}, greedy {generated}, min margin {margin:.4g}")


if __name__ == "__main__":
    main()
