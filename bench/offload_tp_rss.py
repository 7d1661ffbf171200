#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Peak resident set per rank of a GPT-2 trained at tp 2, in memory and offloaded
(docs/BENCHMARKS.md, "Memory offload with tensor parallelism"): two steps of each, the build
record's peak after start-up and the step records' peak, per rank.

Usage: offload_tp_rss.py TESSEL MPIRUN WORKDIR [C LAYERS CHUNK_MIB DEVICE_CHUNKS HOST_CHUNKS]
"""
import json
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests",
                                "common"))
from tessel_runs import (gpt2_config, mpi_prefix, prepare_workdir, run,  # noqa: E402
                         single_thread_env, step_records, train_sets, write_json)

MIB = 1 << 20


def records(d):
    with open(os.path.join(d, "train.jsonl")) as f:
        build = [j for j in map(json.loads, f) if j.get("checkpoint_event") == "build"][0]
    return build, step_records(d)


def main():
    tessel, mpirun, work = sys.argv[1:4]
    c, layers, chunk, dev, host = (int(x) for x in (sys.argv[4:9] or (768, 6, 8, 8, 6)))
    vocab = prepare_workdir(tessel, work)
    cfg = write_json(os.path.join(work, "config.json"),
                     gpt2_config(vocab, n_positions=32, n_embd=c, n_layer=layers, n_head=12))
    common = ["train"] + train_sets(cfg, os.path.join(work, "data"), 2, seq_len=16,
                                    extra=["train.micro_batch=1", "optim.warmup_steps=1"])
    mpi = mpi_prefix(mpirun) + ["-np", "2", tessel]
    nvme = os.path.join(work, "nvme")
    os.makedirs(nvme)
    offload = [f"memory.chunk_size={chunk * MIB}", f"memory.device_budget={dev * chunk * MIB}",
               f"memory.host_budget={host * chunk * MIB}", f"memory.nvme_dir={nvme}"]
    print(f"GPT-2 C = {c}, {layers} blocks, tp 2; offloaded: {chunk} MiB chunks, device {dev}, "
          f"host {host} chunks, the rest on NVMe")
    for tag, sets in (("memory", []), ("offload", offload)):
        d = os.path.join(work, tag)
        run(mpi + common + ["--tp", "2"] + [a for s in sets + [f"checkpoint.dir={d}"] for a in ("--set", s)],
            env=single_thread_env())
        build, steps = records(d)
        for r in range(2):
            start = build["ranks"][r]["peak_rss_after_bytes"] / MIB
            step = max(s["ranks"][r]["rss_peak_bytes"] for s in steps) / MIB
            params = build["ranks"][r]["param_bytes"] / MIB
            print(f"{tag:8s} rank {r}: parameters {params:.0f} MiB, peak RSS after start-up "
                  f"{start:.0f} MiB, after 2 steps {step:.0f} MiB")


if __name__ == "__main__":
    main()
