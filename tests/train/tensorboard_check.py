#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""TensorBoard event files of a real run, read by a decoder written here from the format's
specification and nothing of tessel's: TFRecord framing (uint64 little-endian length, masked
CRC-32C of the length, the data, masked CRC-32C of the data), both CRCs checked with this file's
own bit-at-a-time CRC-32C, and every record decoded as protobuf wire format into
tensorflow.Event fields (wall_time = 1, step = 2, file_version = 3, summary = 5; Summary.value = 1;
Value.tag = 1, Value.simple_value = 2).

`tessel train --set log.tensorboard=true` is killed midway through step 8 (fault.kill_at_step)
after the checkpoint of step 6, then resumed: the run directory's tensorboard/ folder must hold
one file per start, the first cut back to step 6, and together exactly the steps and values of
train.jsonl (as float32): train/loss, train/lr, train/grad_norm, train/tokens_per_s, train/mfu,
train/mem_bytes, train/mem_peak_bytes at every step, val/loss at every evaluation.

Usage: tensorboard_check.py TESSEL WORKDIR
"""
import json
import os
import re
import socket
import struct
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "common"))
from tessel_runs import (fail, gpt2_config, prepare_workdir, run, single_thread_env,  # noqa: E402
                         train_sets, write_json)


def crc32c(data):
    c = 0xFFFFFFFF
    for b in data:
        c ^= b
        for _ in range(8):
            c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
    return c ^ 0xFFFFFFFF


def masked(crc):
    return ((((crc >> 15) | (crc << 17)) & 0xFFFFFFFF) + 0xA282EAD8) & 0xFFFFFFFF


def varint(buf, at):
    v, shift = 0, 0
    while True:
        b = buf[at]
        at += 1
        v |= (b & 0x7F) << shift
        if not b & 0x80:
            return v, at
        shift += 7


def fields(buf):
    """(field number, wire type, value) of a protobuf message; bytes for length-delimited."""
    at, out = 0, []
    while at < len(buf):
        key, at = varint(buf, at)
        number, wire = key >> 3, key & 7
        if wire == 0:
            value, at = varint(buf, at)
        elif wire == 1:
            value, at = buf[at:at + 8], at + 8
        elif wire == 2:
            n, at = varint(buf, at)
            value, at = buf[at:at + n], at + n
        elif wire == 5:
            value, at = buf[at:at + 4], at + 4
        else:
            fail(f"wire type {wire} in an Event")
        if at > len(buf):
            fail("a field overruns its message")
        out.append((number, wire, value))
    return out


def decode_event(data):
    event = {"values": {}}
    for number, wire, value in fields(data):
        if number == 1 and wire == 1:
            event["wall_time"] = struct.unpack("<d", value)[0]
        elif number == 2 and wire == 0:
            event["step"] = value - (1 << 64) if value >= 1 << 63 else value
        elif number == 3 and wire == 2:
            event["file_version"] = value.decode()
        elif number == 5 and wire == 2:
            for n, w, v in fields(value):
                if (n, w) != (1, 2):
                    fail(f"Summary field {n} (wire type {w}); expected only value = 1")
                tag, simple = None, None
                for vn, vw, vv in fields(v):
                    if (vn, vw) == (1, 2):
                        tag = vv.decode()
                    elif (vn, vw) == (2, 5):
                        simple = struct.unpack("<f", vv)[0]
                    else:
                        fail(f"Value field {vn} (wire type {vw}); expected tag = 1, simple_value = 2")
                if tag is None or simple is None:
                    fail(f"a Summary.Value without tag or simple_value: {v!r}")
                event["values"][tag] = simple
        else:
            fail(f"Event field {number} (wire type {wire}); expected 1, 2, 3 or 5")
    return event


def read_events(path):
    with open(path, "rb") as f:
        buf = f.read()
    at, events = 0, []
    while at < len(buf):
        if len(buf) - at < 12:
            fail(f"{path}: {len(buf) - at} stray bytes at offset {at}")
        head = buf[at:at + 8]
        (n,) = struct.unpack("<Q", head)
        (head_crc,) = struct.unpack("<I", buf[at + 8:at + 12])
        if head_crc != masked(crc32c(head)):
            fail(f"{path}: bad length CRC at offset {at}")
        data = buf[at + 12:at + 12 + n]
        if len(data) != n or len(buf) < at + 16 + n:
            fail(f"{path}: record at offset {at} is cut short")
        (data_crc,) = struct.unpack("<I", buf[at + 12 + n:at + 16 + n])
        if data_crc != masked(crc32c(data)):
            fail(f"{path}: bad data CRC at offset {at}")
        events.append(decode_event(data))
        at += 16 + n
    return events


def f32(v):
    return struct.unpack("<f", struct.pack("<f", v))[0]


def expected_from_jsonl(path):
    """step -> {tag: float32 value}, as the run's JSONL has them."""
    want = {}
    with open(path) as f:
        for line in f:
            r = json.loads(line)
            if "step" in r:
                tags = want.setdefault(r["step"], {})
                for tag, field in (("train/loss", "loss"), ("train/lr", "lr"),
                                   ("train/grad_norm", "grad_norm"),
                                   ("train/tokens_per_s", "tokens_per_s"), ("train/mfu", "mfu"),
                                   ("train/mem_bytes", "mem_bytes"),
                                   ("train/mem_peak_bytes", "mem_peak_bytes")):
                    if r[field] is not None:
                        tags[tag] = f32(r[field])
            elif "eval_step" in r:
                want.setdefault(r["eval_step"], {})["val/loss"] = f32(r["val_loss"])
    return want


def main():
    tessel, work = sys.argv[1], sys.argv[2]
    vocab = prepare_workdir(tessel, work)
    config = write_json(os.path.join(work, "config.json"),
                        gpt2_config(vocab, n_positions=32, n_embd=24, n_layer=2, n_head=2))
    d = os.path.join(work, "run")
    env = single_thread_env()
    train = [tessel, "train"] + train_sets(
        config, os.path.join(work, "data"), 9, seq_len=16,
        extra=["machine.peak_gflops=100", "log.tensorboard=true", "eval.interval=3",
               "checkpoint.interval=3", "train.micro_batch=4", "checkpoint.dir=" + d])
    killed = subprocess.run(train + ["--set", "fault.kill_at_step=8"], capture_output=True,
                            text=True, env=env)
    if killed.returncode != -9:
        fail(f"the run to be killed at step 8 exited {killed.returncode}\n{killed.stderr[-2000:]}")
    tb = os.path.join(d, "tensorboard")
    files = sorted(os.listdir(tb))
    if len(files) != 1:
        fail(f"{tb} holds {files}, expected one event file")
    before = read_events(os.path.join(tb, files[0]))
    if max(e["step"] for e in before) != 7:
        fail(f"the killed run wrote steps {[e['step'] for e in before]}, expected up to 7")
    run([tessel, "train", "--resume", d], env=env)

    name = re.compile(r"events\.out\.tfevents\.(\d{10})\." + re.escape(socket.gethostname()) +
                      r"(\.\d+)?$")
    files = sorted(os.listdir(tb))
    if len(files) != 2 or not all(name.match(f) for f in files):
        fail(f"{tb} holds {files}, expected two events.out.tfevents.<seconds>.<host> files")
    got, per_file = {}, []
    for f in files:
        events = read_events(os.path.join(tb, f))
        first = events[0]
        if first.get("file_version") != "brain.Event:2" or first["values"]:
            fail(f"{f}: the first record is {first}, expected file_version brain.Event:2")
        steps = []
        for e in events[1:]:
            if "file_version" in e or not e["values"]:
                fail(f"{f}: a record without scalars: {e}")
            if not 1.5e9 < e["wall_time"] < 4e9:
                fail(f"{f}: wall_time {e['wall_time']} is not a Unix time")
            for tag, v in e["values"].items():
                if tag in got.get(e["step"], {}):
                    fail(f"{tag} at step {e['step']} written twice")
                got.setdefault(e["step"], {})[tag] = v
            steps.append(e["step"])
        per_file.append(steps)
    # The first file was cut back to the checkpoint of step 6 (its evaluation included).
    if per_file[0] != [1, 2, 3, 3, 4, 5, 6, 6] or per_file[1] != [7, 8, 9, 9]:
        fail(f"steps per file {per_file}, expected the first cut back to 6 and 7..9 in the second")
    want = expected_from_jsonl(os.path.join(d, "train.jsonl"))
    if got != want:
        diff = {s: (got.get(s), want.get(s)) for s in sorted(set(got) | set(want))
                if got.get(s) != want.get(s)}
        fail(f"event files and train.jsonl differ (step: (events, jsonl)): {diff}")
    print(f"tensorboard: {sum(len(v) for v in got.values())} scalars over {len(got)} steps in "
          f"{len(files)} files equal train.jsonl; framing and CRCs verified")


if __name__ == "__main__":
    main()
