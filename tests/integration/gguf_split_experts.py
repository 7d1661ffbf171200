#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Rewrites a GGUF file in older llama.cpp's Mixtral layout: every stacked expert tensor
blk.N.X_exps.weight (dims [in, out, experts]) becomes one tensor per expert, blk.N.X.E.weight
(dims [in, out], expert E's bytes of the stack), written expert by expert (every stack of the
layer's expert 0, then expert 1, ...) so no stack's experts are adjacent in the file. The metadata is
copied as it is. Standard library only (a GGUF v3 reader and writer of what this needs).
Usage: gguf_split_experts.py IN.gguf OUT.gguf
"""
import re
import struct
import sys

STACK = re.compile(r"blk\.(\d+)\.(\w+)_exps\.weight")
# Byte sizes of the fixed-size metadata value types (ggml's gguf_type numbering).
FIXED = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}
STRING, ARRAY = 8, 9
# ggml type -> (elements, bytes) of a block, for the types tessel writes.
BLOCKS = {0: (1, 4), 1: (1, 2), 30: (1, 2), 8: (32, 34), 2: (32, 18), 12: (256, 144),
          13: (256, 176), 14: (256, 210)}


class Reader:
    def __init__(self, data):
        self.data, self.at = data, 0

    def take(self, fmt):
        v = struct.unpack_from("<" + fmt, self.data, self.at)
        self.at += struct.calcsize("<" + fmt)
        return v[0]

    def string(self):
        n = self.take("Q")
        s = self.data[self.at:self.at + n].decode()
        self.at += n
        return s

    def skip_value(self, kind):
        if kind == STRING:
            n = self.take("Q")
            self.at += n
        elif kind == ARRAY:
            item, count = self.take("I"), self.take("Q")
            for _ in range(count):
                self.skip_value(item)
        else:
            self.at += FIXED[kind]


def gguf_string(s):
    b = s.encode()
    return struct.pack("<Q", len(b)) + b


def split(path_in, path_out, drop=()):
    """Writes path_out; tensors named in `drop` are left out (a broken file, for refusals)."""
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

    def nbytes(dims, kind):
        if kind not in BLOCKS:
            raise SystemExit(f"{path_in}: ggml type {kind} is not one this script knows")
        elements, nbytes = BLOCKS[kind]
        count = 1
        for d in dims:
            count *= d
        return count // elements * nbytes

    def raw(offset, size):
        return data[data_start + offset:data_start + offset + size]

    stacks = {}
    for name, dims, kind, offset in infos:
        m = STACK.fullmatch(name)
        if m:
            stacks.setdefault(m[1], []).append((m[2], dims, kind, offset))
    out, done = [], set()
    for name, dims, kind, offset in infos:
        m = STACK.fullmatch(name)
        if not m:
            out.append((name, dims, kind, raw(offset, nbytes(dims, kind))))
            continue
        if m[1] in done:
            continue
        done.add(m[1])
        experts = dims[2]
        for e in range(experts):
            for proj, sdims, skind, soffset in stacks[m[1]]:
                each = nbytes(sdims, skind) // experts  # the stack: its experts back to back
                out.append((f"blk.{m[1]}.{proj}.{e}.weight", sdims[:2], skind,
                            raw(soffset + e * each, each)))
    out = [t for t in out if t[0] not in drop]
    header = struct.pack("<IIQQ", 0x46554747, 3, len(out), n_kv) + kv_bytes
    body, at, infos_out = bytearray(), 0, bytearray()
    for name, dims, kind, b in out:
        infos_out += gguf_string(name) + struct.pack("<I", len(dims))
        infos_out += b"".join(struct.pack("<Q", d) for d in dims)
        infos_out += struct.pack("<IQ", kind, at)
        body += b
        at += len(b)
        pad = (-at) % alignment
        body += b"\0" * pad
        at += pad
    head = header + infos_out
    head += b"\0" * ((-len(head)) % alignment)
    with open(path_out, "wb") as f:
        f.write(head + bytes(body))


if __name__ == "__main__":
    split(sys.argv[1], sys.argv[2])
