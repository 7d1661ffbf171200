#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Rewrites a GGUF file with its 1-D F32 tensors (norm weights, biases) stored as Q8_0, as some
llama.cpp quantizations store them; every other tensor and the metadata are copied as they are.
Q8_0 is ggml's: per block of 32 values an f16 scale d = max|x| / 127 and 32 int8 codes round(x / d).
Standard library only (the GGUF reading of gguf_split_experts.py).
Usage: gguf_quantize_vectors.py IN.gguf OUT.gguf   (prints the tensors it quantized)
"""
import os
import struct
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gguf_split_experts import BLOCKS, Reader, gguf_string  # noqa: E402

F32, Q8_0 = 0, 8


def q8_0(values):
    out = bytearray()
    for b in range(0, len(values), 32):
        block = values[b:b + 32]
        d = max(abs(v) for v in block) / 127
        inv = 1 / d if d else 0.0
        out += struct.pack("<e", d)
        out += struct.pack("<32b", *[max(-127, min(127, round(v * inv))) for v in block])
    return bytes(out)


def quantize_vectors(path_in, path_out):
    with open(path_in, "rb") as f:
        data = f.read()
    r = Reader(data)
    if r.take("I") != 0x46554747 or r.take("I") != 3:
        raise SystemExit(f"{path_in}: not a GGUF v3 file")
    n_tensors, n_kv = r.take("Q"), r.take("Q")
    kv_start, alignment = r.at, 32
    for _ in range(n_kv):
        key, kind = r.string(), r.take("I")
        if key == "general.alignment":
            alignment = struct.unpack_from("<I", data, r.at)[0]
        r.skip_value(kind)
    kv_bytes = data[kv_start:r.at]
    infos = []
    for _ in range(n_tensors):
        name = r.string()
        dims = [r.take("Q") for _ in range(r.take("I"))]
        infos.append((name, dims, r.take("I"), r.take("Q")))
    data_start = (r.at + alignment - 1) // alignment * alignment
    out, quantized = [], []
    for name, dims, kind, offset in infos:
        count = 1
        for d in dims:
            count *= d
        elements, size = BLOCKS[kind]
        raw = data[data_start + offset:data_start + offset + count // elements * size]
        if kind == F32 and len(dims) == 1 and count % 32 == 0:
            raw, kind = q8_0(struct.unpack(f"<{count}f", raw)), Q8_0
            quantized.append(name)
        out.append((name, dims, kind, raw))
    header = struct.pack("<IIQQ", 0x46554747, 3, len(out), n_kv) + kv_bytes
    body, infos_out = bytearray(), bytearray()
    for name, dims, kind, b in out:
        infos_out += gguf_string(name) + struct.pack("<I", len(dims))
        infos_out += b"".join(struct.pack("<Q", d) for d in dims)
        infos_out += struct.pack("<IQ", kind, len(body))
        body += b + b"\0" * ((-len(b)) % alignment)
    head = header + infos_out
    head += b"\0" * ((-len(head)) % alignment)
    with open(path_out, "wb") as f:
        f.write(head + bytes(body))
    return quantized


if __name__ == "__main__":
    print("\n".join(quantize_vectors(sys.argv[1], sys.argv[2])))
