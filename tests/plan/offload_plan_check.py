#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""`tessel plan offload` against `tessel train` with the same memory.* budgets (docs/PLANNER.md,
"Offload"): the predicted chunk count, device working set and every step's traffic between the
tiers (NVMe bytes read and written, evictions and clean ones, bytes between the memory tiers) are
the ones the run's train.jsonl reports, exactly, for f32 and bf16 GPT-2s and a LLaMA with an untied
head, with an NVMe tier and prefetch, without prefetch, over micro-batches, and without NVMe (the
host tier holding everything). A device budget below the working set is refused by both, naming
the same smallest budget. With MPIRUN, rank 0 of `--tp 2` (its own pieces, offloaded as one process
does) in f32 and in bf16 with sequence parallelism, rank 0 of `--pp 2` (1F1B, GPipe, interleaved;
f32 and bf16), and rank 0 of `--dp 2` at ZeRO-3 (its shards: the gathers', the reductions' and
the update's holds), with the gradient buckets in chunks and in
plain memory, clipped, over two micro-batches, in bf16 and for the LLaMA, exactly too; rank 0
of `--dp 2` at ZeRO-1 and ZeRO-2 (DataParallel's buckets of 1 MiB filled in the order backward
makes the gradients ready, each one's buffer held until its reduction is retired, the norm, the
scaling and the update in the host tier) with the buffers in chunks and in plain memory, clipped,
over two micro-batches and in bf16 (the replicas' copies held unit by unit); rank 0 of
`--dp 2 --tp 2` at ZeRO-1, 2 and 3 (each rank's shards of its own pieces), with --sp too (tp's
gradient sums: buffers in plain memory, reductions after backward); rank 0 of `--dp 2 --pp 2`
at ZeRO-1, 2 and 3 (1F1B, GPipe, interleaved; bf16 at ZeRO-3; buffers in chunks and in plain
memory; prefetch; bf16 at ZeRO-1 and 2, the replicas' copies held over the offload layer's
unit spans), whose schedule's holds the plan records from the runtime's own objects; rank 0 of
`--pp 2 --tp 2` (1F1B in f32, GPipe in bf16 with --sp) and of `--dp 2 --pp 2 --tp 2` at ZeRO-3
(with --sp too, and at ZeRO-2 in bf16 with --sp);
and
memory.nvme_budget at the fewest slots the runtime accepts (one process, ZeRO-2), the swap file
that size. With "ep" (its own CTest, plan.offload_traffic_ep): rank 0 of `--dp 2` and `--dp 4`
with `--ep 2` at ZeRO-1, 2 and 3 (its dense shards over dp, its experts' over the ranks holding
the same ones), f32 and bf16, of `--dp 2 --pp 2 --ep 2` (its stage's), of `--dp 2 --tp 2
--ep 2` (its tp pieces' and its experts', whole or with --etp their columns, with --sp too: each
piece routed on its own, the dense reductions after tp's sums) and of `--dp 2 --tp 2 --pp 2
--ep 2` (eight ranks), on a GPT-2-MoE and one of wide experts whose gradient shards leave
memory before their 1 / ep scaling. A GPT-2 with C = 26, 2 heads, 5 blocks and sequences of 9; for ZeRO-1/2 one with
C = 128, 4 heads, 4 blocks (four buckets), and under dp x pp one of 8 blocks.

Usage: offload_plan_check.py TESSEL WORKDIR [MPIRUN [ep]]  (ep: the expert-parallel cases alone)
"""
import json
import os
import re
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "common"))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "train"))
from ep_equivalence import moe_config  # noqa: E402
from offload_runs import small_gpt2  # noqa: E402
from tessel_runs import (fail, gpt2_config, mpi_prefix, prepare_workdir,  # noqa: E402
                         remove_workdir, run, single_thread_env, step_records, train_sets,
                         write_json)

STEPS = 4
CHUNK = 32 << 10  # the largest tensor, the 257 x 26 embedding (26,728 bytes), fits one

# (name, precision, device chunks beyond the working set, host chunks, NVMe, prefetch,
# micro-batches, model, layout, chunk KiB). Layouts: "" one process; "tp": rank 0 of --tp 2 (with
# --sp for bf16); "dp": rank 0 of --dp 2 at ZeRO-3, no clipping; "dp-clip": the same with every
# step clipped (a scaling pass over the gradient shards); "z1", "z2" (and "-clip"): rank 0 of
# --dp 2 at ZeRO-1 or 2 with buckets of 1 MiB; "tz1", "tz2", "tz3" (and "-sp"): rank 0 of
# --dp 2 --tp 2 at that ZeRO stage; "pp[-SCHEDULE]": rank 0 of --pp 2; "pzN[-SCHEDULE]": rank 0
# of --dp 2 --pp 2 at ZeRO-N; "pt[-SCHEDULE][-sp]": rank 0 of --pp 2 --tp 2;
# "ptzN[-SCHEDULE][-sp]": rank 0 of --dp 2 --pp 2 --tp 2 at ZeRO-N. An eleventh
# field "min": memory.nvme_budget of the fewest slots the runtime accepts (default: one a chunk).
CASES = [
    ("f32, every tier", "fp32", 0, 6, True, 0, 1, "gpt2", "", 32),
    ("f32, every tier, prefetch 4", "fp32", 0, 6, True, 4, 1, "gpt2", "", 32),
    ("f32, a larger device tier", "fp32", 3, 4, True, 0, 1, "gpt2", "", 32),
    ("f32, two micro-batches", "fp32", 2, 8, True, 0, 2, "gpt2", "", 32),
    ("bf16 copies, every tier", "bf16", 1, 7, True, 0, 1, "gpt2", "", 32),
    ("f32, no NVMe (the host holds all)", "fp32", 0, 64, False, 0, 1, "gpt2", "", 32),
    ("LLaMA, untied head, every tier", "fp32", 0, 6, True, 0, 1, "llama", "", 32),
    ("LLaMA, untied head, prefetch 8", "fp32", 1, 5, True, 8, 1, "llama", "", 32),
    ("tp 2, rank 0, every tier", "fp32", 0, 6, True, 0, 1, "gpt2", "tp", 32),
    ("tp 2 --sp, rank 0, bf16 copies", "bf16", 1, 7, True, 0, 1, "gpt2", "tp", 32),
    ("dp 2 ZeRO-3, rank 0, gradient buckets in chunks", "fp32", 0, 4, True, 0, 1, "gpt2", "dp",
     40),
    ("dp 2 ZeRO-3, buckets in plain memory, clipped", "fp32", 0, 5, True, 0, 1, "gpt2",
     "dp-clip", 32),
    ("dp 2 ZeRO-3, two micro-batches", "fp32", 1, 4, True, 0, 2, "gpt2", "dp", 40),
    ("dp 2 ZeRO-3, bf16", "bf16", 0, 4, True, 0, 1, "gpt2", "dp", 40),
    ("dp 2 ZeRO-3, LLaMA", "fp32", 0, 4, True, 0, 1, "llama", "dp", 40),
    ("dp 2 ZeRO-3, prefetch 8", "fp32", 1, 5, True, 8, 1, "gpt2", "dp", 40),
    ("pp 2 1F1B, rank 0 (the first stage, tied embedding)", "fp32", 0, 5, True, 0, 4, "gpt2",
     "pp", 32),
    ("pp 2 GPipe, rank 0", "fp32", 1, 4, True, 0, 3, "gpt2", "pp-gpipe", 32),
    ("pp 2 interleaved:2, rank 0 (stages 0 and 2)", "fp32", 0, 5, True, 0, 4, "gpt2",
     "pp-interleaved:2", 32),
    ("pp 2 1F1B, LLaMA, rank 0", "fp32", 0, 4, True, 0, 4, "llama", "pp", 32),
    ("pp 2 1F1B, bf16, rank 0 (copies kept over the step)", "bf16", 0, 5, True, 0, 4, "gpt2",
     "pp", 32),
    ("pp 2 GPipe, bf16, rank 0", "bf16", 1, 5, True, 0, 3, "gpt2", "pp-gpipe", 32),
    ("dp 2 ZeRO-1, rank 0, all-reduced buckets in chunks", "fp32", 0, 4, True, 0, 1, "gpt2m",
     "z1", 1536),
    ("dp 2 ZeRO-1, two micro-batches", "fp32", 0, 4, True, 0, 2, "gpt2m", "z1", 1536),
    ("dp 2 ZeRO-1, buckets in plain memory, clipped", "fp32", 1, 2, True, 0, 1, "gpt2m",
     "z1-clip", 512),
    ("dp 2 ZeRO-2, rank 0, full buckets in chunks", "fp32", 0, 4, True, 0, 1, "gpt2m", "z2",
     1536),
    ("dp 2 ZeRO-2, two micro-batches, clipped", "fp32", 1, 5, True, 0, 2, "gpt2m", "z2-clip",
     1536),
    ("dp 2 ZeRO-2, buckets in plain memory", "fp32", 1, 3, True, 0, 1, "gpt2m", "z2", 512),
    ("dp 2 ZeRO-2, prefetch 8", "fp32", 1, 4, True, 8, 1, "gpt2m", "z2", 1536),
    ("dp 2 ZeRO-1, bf16 replica copies", "bf16", 0, 4, True, 0, 1, "gpt2m", "z1", 1536),
    ("dp 2 ZeRO-2, bf16, two micro-batches", "bf16", 1, 5, True, 0, 2, "gpt2m", "z2", 1536),
    # dp 2 x tp 2, rank 0: its ZeRO shards of its own pieces.
    ("dp 2 x tp 2 ZeRO-3, rank 0", "fp32", 0, 4, True, 0, 1, "gpt2", "tz3", 40),
    ("dp 2 x tp 2 ZeRO-2, buckets in plain memory", "fp32", 1, 3, True, 0, 1, "gpt2m", "tz2",
     768),
    ("dp 2 x tp 2 ZeRO-1, bf16", "bf16", 1, 3, True, 0, 1, "gpt2m", "tz1", 768),
    # With --sp tp sums gradients: the buffers stay plain memory, the reductions follow backward.
    ("dp 2 x tp 2 --sp ZeRO-3", "fp32", 1, 4, True, 0, 1, "gpt2", "tz3-sp", 40),
    ("dp 2 x tp 2 --sp ZeRO-2, bf16", "bf16", 0, 3, True, 0, 1, "gpt2m", "tz2-sp", 768),
    # dp 2 x pp 2, rank 0 (the first stage, its ZeRO shards): the holds of the runtime's own
    # DataParallel and Zero3Parameters over the schedule, recorded on meta.
    ("dp 2 x pp 2 ZeRO-3 1F1B, rank 0", "fp32", 0, 4, True, 0, 4, "gpt2", "pz3", 40),
    ("dp 2 x pp 2 ZeRO-3 GPipe, bf16", "bf16", 1, 4, True, 0, 3, "gpt2", "pz3-gpipe", 40),
    ("dp 2 x pp 2 ZeRO-3 interleaved:2, LLaMA", "fp32", 0, 4, True, 0, 4, "llama",
     "pz3-interleaved:2", 24),
    ("dp 2 x pp 2 ZeRO-2 1F1B, full buckets in chunks", "fp32", 0, 3, True, 0, 4, "gpt2p",
     "pz2", 1536),
    ("dp 2 x pp 2 ZeRO-2, buckets in plain memory", "fp32", 1, 3, True, 0, 4, "gpt2p", "pz2",
     512),
    ("dp 2 x pp 2 ZeRO-1 interleaved:2", "fp32", 0, 3, True, 0, 4, "gpt2p",
     "pz1-interleaved:2", 1536),
    ("dp 2 x pp 2 ZeRO-3, prefetch 8", "fp32", 1, 4, True, 8, 4, "gpt2", "pz3", 40),
    # ZeRO-1/2 in bf16 under a pipeline: the replicas' copies held over the offload layer's unit
    # spans (every unit's kept over the step), recorded among the ZeRO holds.
    ("dp 2 x pp 2 ZeRO-2 1F1B, bf16 replica copies", "bf16", 0, 4, True, 0, 4, "gpt2p", "pz2",
     1536),
    ("dp 2 x pp 2 ZeRO-1 interleaved:2, bf16", "bf16", 1, 4, True, 0, 4, "gpt2p",
     "pz1-interleaved:2", 1536),
    # pp 2 x tp 2, rank 0: its stage's tp pieces, as a pipeline rank; with dp 2 its shards of
    # them (eight ranks).
    ("pp 2 x tp 2 1F1B, rank 0", "fp32", 0, 5, True, 0, 4, "gpt2", "pt", 32),
    ("pp 2 x tp 2 GPipe --sp, bf16", "bf16", 1, 5, True, 0, 3, "gpt2", "pt-gpipe-sp", 32),
    ("dp 2 x pp 2 x tp 2 ZeRO-3 1F1B, rank 0", "fp32", 0, 4, True, 0, 4, "gpt2", "ptz3", 12),
    # With --sp (tp sums gradients): ZeRO-2/3's reductions wait for the sums.
    ("dp 2 x pp 2 x tp 2 --sp ZeRO-3 1F1B", "fp32", 0, 4, True, 0, 4, "gpt2", "ptz3-sp", 12),
    ("dp 2 x pp 2 x tp 2 --sp ZeRO-2 GPipe, bf16", "bf16", 0, 3, True, 0, 4, "gpt2p",
     "ptz2-gpipe-sp", 768),
    # memory.nvme_budget at its smallest, n - M + 1 slots (M: the host tier's chunks): slots
    # taken back from chunks in memory.
    ("f32, the smallest NVMe budget", "fp32", 0, 6, True, 0, 1, "gpt2", "", 32, "min"),
    ("dp 2 ZeRO-2, the smallest NVMe budget", "fp32", 0, 4, True, 0, 1, "gpt2m", "z2", 1536,
     "min"),
]

# Expert parallelism (--ep 2, rank 0 of --dp 2 or 4): its ZeRO shards of the dense parameters over
# dp and of its experts over the ranks holding the same ones (the GPT-2-MoE of
# train.ep_equivalence: 2 blocks, 4 experts each, top-2), the holds of both axes' runtime objects
# recorded on meta. ZeRO-3: 40 KiB holds an MoE layer's expert shard; ZeRO-1/2: 80 KiB a bucket's.
EP_CASES = [
    ("dp 2 ep 2 ZeRO-3, rank 0", "fp32", 0, 4, True, 0, 1, "moe", "ep2z3", 40),
    ("dp 4 ep 2 ZeRO-3, two micro-batches", "fp32", 1, 4, True, 0, 2, "moe", "ep4z3", 40),
    ("dp 4 ep 2 ZeRO-3, bf16", "bf16", 0, 4, True, 0, 1, "moe", "ep4z3", 40),
    ("dp 2 ep 2 ZeRO-2, two micro-batches, clipped", "fp32", 1, 3, True, 0, 2, "moe",
     "ep2z2-clip", 80),
    ("dp 4 ep 2 ZeRO-2, bf16", "bf16", 0, 3, True, 0, 1, "moe", "ep4z2", 80),
    ("dp 2 ep 2 ZeRO-1, all-reduced buckets in chunks", "fp32", 0, 3, True, 0, 1, "moe",
     "ep2z1", 80),
    ("dp 2 ep 2 ZeRO-1, bf16, prefetch 4", "bf16", 1, 3, True, 4, 1, "moe", "ep2z1", 80),
    # Wide experts in 8 blocks, chunks of 944 KiB (an expert bucket's shard): the experts'
    # gradient shards leave memory between their reductions and the 1/ep scaling, whose holds
    # then change the step's traffic (a model without them predicts other figures).
    ("dp 2 ep 2 ZeRO-2, wide experts", "fp32", 1, 3, True, 0, 1, "moew", "ep2z2", 944),
    ("dp 4 ep 2 ZeRO-3, wide experts", "fp32", 0, 4, True, 0, 1, "moew", "ep4z3", 944),
    # With --pp 2 too (dp 2 inside each stage, four ranks): rank 0's stage's dense and expert
    # shards, the holds recorded over its schedule.
    ("dp 2 pp 2 ep 2 ZeRO-3 1F1B", "fp32", 0, 4, True, 0, 4, "moe", "eppz3-1f1b", 40),
    ("dp 2 pp 2 ep 2 ZeRO-2 GPipe, bf16", "bf16", 0, 3, True, 0, 4, "moe", "eppz2-gpipe", 40),
    ("dp 2 pp 2 ep 2 ZeRO-1 1F1B", "fp32", 0, 3, True, 0, 4, "moe", "eppz1-1f1b", 40),
    # With --tp 2 (dp 2 inside each tp rank's group): its tp pieces' and its experts' shards, on
    # a GPT-2-MoE whose first block is dense (tp's plan splits its MLP).
    ("dp 2 tp 2 ep 2 ZeRO-3", "fp32", 0, 4, True, 0, 1, "moeh", "eptz3", 40),
    ("dp 2 tp 2 ep 2 ZeRO-2, bf16, two micro-batches", "bf16", 0, 3, True, 0, 2, "moeh", "eptz2",
     40),
    ("dp 2 tp 2 ep 2 ZeRO-1", "fp32", 0, 3, True, 0, 1, "moeh", "eptz1", 40),
    # With --etp (each expert's FFN split over the tp pair): the rank's columns of its experts.
    ("dp 2 tp 2 ep 2 --etp ZeRO-3", "fp32", 0, 4, True, 0, 1, "moeh", "eptz3-etp", 20),
    ("dp 2 tp 2 ep 2 --etp ZeRO-2, bf16", "bf16", 0, 4, True, 0, 1, "moeh", "eptz2-etp", 20),
    # With --sp (tp sums the sequence-parallel gradients, and without --etp each tp rank routes
    # its own piece of the sequence): the dense reductions wait for tp's sums.
    ("dp 2 tp 2 ep 2 --sp ZeRO-3", "fp32", 0, 4, True, 0, 1, "moeh", "eptz3-sp", 40),
    ("dp 2 tp 2 ep 2 --sp ZeRO-2, bf16, two micro-batches", "bf16", 0, 3, True, 0, 2, "moeh",
     "eptz2-sp", 40),
    ("dp 2 tp 2 ep 2 --sp ZeRO-1", "fp32", 1, 3, True, 0, 1, "moeh", "eptz1-sp", 40),
    ("dp 2 tp 2 ep 2 --etp --sp ZeRO-3, bf16", "bf16", 0, 4, True, 0, 1, "moeh", "eptz3-etp-sp",
     20),
    # Wide experts every other block (944 KiB chunks): the dense shards' reductions wait for
    # tp's sums, which moves their holds after backward (a recording that let them launch during
    # backward predicts 8.7 MB read a step where the run reads 7.7 MB).
    ("dp 2 tp 2 ep 2 --sp ZeRO-3, wide experts", "fp32", 0, 4, True, 0, 1, "moewh", "eptz3-sp",
     944),
    # With --tp 2 and --pp 2 at once (eight ranks): rank 0's stage's tp pieces and experts'
    # shards over the schedule, on a GPT-2-MoE of four blocks whose first stage holds a dense
    # block and an MoE one.
    ("dp 2 tp 2 pp 2 ep 2 ZeRO-3 1F1B", "fp32", 0, 4, True, 0, 4, "moeq", "eptpz3-1f1b", 40),
    ("dp 2 tp 2 pp 2 ep 2 ZeRO-2 GPipe, bf16", "bf16", 0, 3, True, 0, 4, "moeq",
     "eptpz2-gpipe", 40),
    ("dp 2 tp 2 pp 2 ep 2 --etp ZeRO-1 1F1B", "fp32", 1, 2, True, 0, 4, "moeq",
     "eptpz1-1f1b-etp", 20),
    ("dp 2 tp 2 pp 2 ep 2 --sp ZeRO-3 1F1B", "fp32", 0, 4, True, 0, 4, "moeq", "eptpz3-1f1b-sp",
     40),
    ("dp 2 tp 2 pp 2 ep 2 --sp ZeRO-2 GPipe, bf16", "bf16", 0, 3, True, 0, 4, "moeq",
     "eptpz2-gpipe-sp", 40),
]

FIELDS = ["nvme_read_bytes", "nvme_write_bytes", "h2d_bytes", "d2h_bytes", "evictions",
          "clean_evictions"]


def llama(work, vocab):
    return write_json(os.path.join(work, "llama.json"), {
        "model_type": "llama", "vocab_size": vocab, "hidden_size": 28, "intermediate_size": 33,
        "num_hidden_layers": 3, "num_attention_heads": 2, "num_key_value_heads": 1,
        "max_position_embeddings": 17, "tie_word_embeddings": False, "rms_norm_eps": 1e-5})


def expert(layout):
    """(ranks, dp, ZeRO stage, clipped, the other axes' flags) for layouts "epNzS[-clip]"
    (--dp N --ep 2), "eppzS-SCHEDULE" (--dp 2 --pp 2 --ep 2), "eptzS[-etp]" (--dp 2 --tp 2
    --ep 2, with --etp each expert's FFN split over tp) and "eptpzS-SCHEDULE[-etp]" (--dp 2
    --tp 2 --pp 2 --ep 2, eight ranks), else None."""
    m = re.fullmatch(r"ep(\d)z(\d)(-clip)?", layout)
    if m:
        return int(m.group(1)), int(m.group(1)), m.group(2), bool(m.group(3)), []
    m = re.fullmatch(r"eppz(\d)-(\w+)", layout)
    if m:
        return 4, 2, m.group(1), False, ["--pp", "2", "--schedule", m.group(2)]
    m = re.fullmatch(r"eptz(\d)(-etp)?(-sp)?", layout)
    if m:
        return 4, 2, m.group(1), False, ["--tp", "2"] + (["--etp"] if m.group(2) else []) + (
            ["--sp"] if m.group(3) else [])
    m = re.fullmatch(r"eptpz(\d)-(\w+?)(-etp)?(-sp)?", layout)
    if m:
        return 8, 2, m.group(1), False, ["--tp", "2", "--pp", "2", "--schedule", m.group(2)] + (
            ["--etp"] if m.group(3) else []) + (["--sp"] if m.group(4) else [])
    return None


def zero12(layout):
    """ZeRO-1 or 2 for layouts "z1", "z2" (and their "-clip"), else None."""
    return int(layout[1]) if layout[:2] in ("z1", "z2") else None


def ranks(layout):
    if expert(layout):
        return expert(layout)[0]
    if layout.startswith("ptz"):
        return 8
    return 4 if layout[:2] in ("tz", "pz", "pt") else 2 if layout else 1


def pipeline_tp(layout):
    """(ZeRO stage or None, schedule, sp) for layouts "pt[zN][-SCHEDULE][-sp]" (pp 2 x tp 2,
    with dp 2 at ZeRO-N), else None."""
    if not layout.startswith("pt"):
        return None
    head, *rest = layout.split("-")
    sp = rest[-1:] == ["sp"]
    if sp:
        rest = rest[:-1]
    return (head[3] if head.startswith("ptz") else None), "-".join(rest) or "1f1b", sp


def pipeline_dp(layout):
    """(ZeRO stage, schedule) for layouts "pzN[-SCHEDULE]" (dp 2 x pp 2), else None."""
    if not layout.startswith("pz"):
        return None
    return layout[2], layout[4:] or "1f1b"


def plan_flags(layout, precision):
    if expert(layout):
        _, dp, stage, clipped, other = expert(layout)
        return ["--dp", str(dp), "--ep", "2", "--zero", stage,
                "--bucket-mb", "1"] + other + (["--clipped"] if clipped else [])
    if pipeline_tp(layout):
        stage, schedule, sp = pipeline_tp(layout)
        return ["--pp", "2", "--tp", "2", "--schedule", schedule] + (["--sp"] if sp else []) + (
            ["--dp", "2", "--zero", stage, "--bucket-mb", "1"] if stage else [])
    if pipeline_dp(layout):
        stage, schedule = pipeline_dp(layout)
        return ["--dp", "2", "--pp", "2", "--zero", stage, "--bucket-mb", "1", "--schedule",
                schedule]
    if layout.startswith("tz"):
        return ["--dp", "2", "--tp", "2", "--zero", layout[2], "--bucket-mb", "1"] + (
            ["--sp"] if layout.endswith("-sp") else [])
    if zero12(layout):
        return ["--dp", "2", "--zero", str(zero12(layout)), "--bucket-mb", "1"] + (
            ["--clipped"] if layout.endswith("-clip") else [])
    if layout == "tp":
        return ["--tp", "2"] + (["--sp"] if precision == "bf16" else [])
    if layout.startswith("dp"):
        return ["--dp", "2", "--zero", "3"] + (["--clipped"] if layout == "dp-clip" else [])
    if layout.startswith("pp"):
        return ["--pp", "2", "--schedule", layout[3:] or "1f1b"]
    return []


def train_flags(layout, precision):
    if expert(layout):
        _, dp, stage, clipped, other = expert(layout)
        return ["--dp", str(dp), "--ep", "2", "--set",
                f"parallel.zero_stage={stage}", "--set", "parallel.bucket_mb=1", "--set",
                f"optim.grad_clip={1e-9 if clipped else 0}"] + other
    if pipeline_tp(layout):
        stage, schedule, sp = pipeline_tp(layout)
        return ["--pp", "2", "--tp", "2", "--schedule", schedule] + (["--sp"] if sp else []) + (
            ["--dp", "2", "--set", f"parallel.zero_stage={stage}", "--set",
             "parallel.bucket_mb=1", "--set", "optim.grad_clip=0"] if stage else [])
    if pipeline_dp(layout):
        stage, schedule = pipeline_dp(layout)
        return ["--dp", "2", "--pp", "2", "--schedule", schedule, "--set",
                f"parallel.zero_stage={stage}", "--set", "parallel.bucket_mb=1", "--set",
                "optim.grad_clip=0"]
    if layout.startswith("tz"):
        return ["--dp", "2", "--tp", "2", "--set", f"parallel.zero_stage={layout[2]}", "--set",
                "parallel.bucket_mb=1", "--set", "optim.grad_clip=0"] + (
            ["--sp"] if layout.endswith("-sp") else [])
    if zero12(layout):
        clip = "1e-9" if layout.endswith("-clip") else "0"
        return ["--dp", "2", "--set", f"parallel.zero_stage={zero12(layout)}", "--set",
                "parallel.bucket_mb=1", "--set", f"optim.grad_clip={clip}"]
    if layout == "tp":
        return ["--tp", "2"] + (["--sp"] if precision == "bf16" else [])
    if layout.startswith("dp"):
        clip = "1e-9" if layout == "dp-clip" else "0"
        return ["--dp", "2", "--set", "parallel.zero_stage=3", "--set", f"optim.grad_clip={clip}"]
    if layout.startswith("pp"):
        return ["--pp", "2", "--schedule", layout[3:] or "1f1b"]
    return []


def plan(tessel, config, precision, device, host, nvme, micro_batches, layout="", chunk=CHUNK,
         nvme_budget=0):
    cmd = [tessel, "plan", "offload", "-m", config, "--precision", precision, "--chunk-size",
           str(chunk), "--device-budget", str(device * chunk), "--host-budget",
           str(host * chunk), "--grad-accum", str(micro_batches), "--steps", str(STEPS),
           "--json"] + (["--nvme", "--nvme-budget", str(nvme_budget)] if nvme else []) + \
        plan_flags(layout, precision)
    return json.loads(run(cmd).stdout)


def train(tessel, work, tag, config, precision, device, host, nvme, prefetch, micro_batches,
          env, launch=None, layout="", chunk=CHUNK, nvme_budget=0):
    d = os.path.join(work, tag)
    sets = [f"memory.chunk_size={chunk}", f"memory.device_budget={device * chunk}",
            f"memory.host_budget={host * chunk}", f"memory.prefetch={prefetch}",
            f"memory.nvme_budget={nvme_budget}",
            f"train.precision={precision}", f"train.grad_accum={micro_batches}",
            "train.micro_batch=2", f"checkpoint.dir={d}", "checkpoint.interval=0",
            "machine.peak_gflops=100", "eval.batches=1"]
    if nvme:
        os.makedirs(os.path.join(work, tag + "_nvme"))
        sets.append("memory.nvme_dir=" + os.path.join(work, tag + "_nvme"))
    cmd = (launch or []) + [tessel, "train"] + train_sets(
        config, os.path.join(work, "data"), STEPS, seq_len=9, extra=sets) + train_flags(
            layout, precision)
    return cmd, d


def main():
    tessel, work = sys.argv[1], sys.argv[2]
    mpirun = sys.argv[3] if len(sys.argv) > 3 else None
    experts = len(sys.argv) > 4 and sys.argv[4] == "ep"  # the expert-parallel cases alone
    vocab = prepare_workdir(tessel, work)
    env = single_thread_env()
    configs = {"gpt2": small_gpt2(work, vocab), "llama": llama(work, vocab),
               "gpt2m": write_json(os.path.join(work, "gpt2m.json"),
                                   gpt2_config(vocab, n_positions=17, n_embd=128, n_layer=4,
                                               n_head=4)),
               # Eight blocks: a pipeline stage's four make several 1 MiB buckets.
               "gpt2p": write_json(os.path.join(work, "gpt2p.json"),
                                   gpt2_config(vocab, n_positions=17, n_embd=128, n_layer=8,
                                               n_head=4)),
               "moe": write_json(os.path.join(work, "moe.json"), moe_config(vocab)),
               "moew": write_json(os.path.join(work, "moew.json"),
                                  moe_config(vocab, n_inner=700, n_layer=8)),
               "moeh": write_json(os.path.join(work, "moeh.json"), moe_config(vocab, moe_every=2)),
               "moewh": write_json(os.path.join(work, "moewh.json"),
                                   moe_config(vocab, n_inner=700, n_layer=8, moe_every=2)),
               "moeq": write_json(os.path.join(work, "moeq.json"),
                                  moe_config(vocab, moe_every=2, n_layer=4))}
    for i, (what, precision, extra, host, nvme, prefetch, mb, model, layout, kib,
            *slots) in enumerate(EP_CASES if experts else CASES):
        if layout and not mpirun:
            print(f"{what}: skipped (no mpirun)")
            continue
        chunk = kib << 10
        launch = mpi_prefix(mpirun) + ["-np", str(ranks(layout))] if layout else None
        device = plan(tessel, configs[model], precision, 256, 256, True, mb, layout,
                      chunk)["device_working_set"] + extra
        nvme_budget = 0
        if slots:  # n - M + 1 chunks, the fewest slots eviction can need
            n = plan(tessel, configs[model], precision, device, host, nvme, mb, layout,
                     chunk)["chunks"]
            nvme_budget = (n - host + 1) * chunk
        p = plan(tessel, configs[model], precision, device, host, nvme, mb, layout, chunk,
                 nvme_budget)
        cmd, d = train(tessel, work, f"run{i}", configs[model], precision, device, host, nvme,
                       prefetch, mb, env, launch, layout, chunk, nvme_budget)
        r = subprocess.run(cmd, env=env, capture_output=True, text=True)
        if r.returncode != 0:
            fail(f"{what}: {' '.join(cmd)} exited {r.returncode}\n{r.stderr[-2000:]}")
        recs = [x["offload"] for x in step_records(d)]
        if len(recs) != STEPS:
            fail(f"{what}: {len(recs)} step records, expected {STEPS}")
        measured = [{f: x[f] for f in FIELDS} for x in recs]
        predicted = [{f: s["offload_" + f] for f in FIELDS} for s in p["steps"]]
        if prefetch == 0 and measured != predicted:
            fail(f"{what}: per-step traffic\n measured  {measured}\n predicted {predicted}")
        if prefetch > 0:
            # Reads ahead start at the end of a step for the next one's first accesses (counted
            # in the earlier step), and whether a victim's write has landed when the walk meets
            # it depends on the disk: equal within 3 chunks or 10% per step and field.
            for m, q in zip(measured, predicted):
                for f in FIELDS[:4]:
                    if abs(m[f] - q[f]) > max(3 * chunk, 0.1 * q[f]):
                        fail(f"{what}: {f} {m[f]} measured, {q[f]} predicted\n measured  "
                             f"{measured}\n predicted {predicted}")
        if not any(s["nvme_read_bytes"] or s["h2d_bytes"] for s in measured[1:]):
            fail(f"{what}: nothing moved after step 1, the case tests nothing: {measured}")
        file_bytes = recs[-1]["nvme_file_bytes"]
        if nvme_budget and file_bytes != nvme_budget:
            fail(f"{what}: swap file {file_bytes} bytes, memory.nvme_budget {nvme_budget}")
        if file_bytes != p["nvme_file_bytes"]:
            fail(f"{what}: swap file {file_bytes} bytes, predicted {p['nvme_file_bytes']}")
        s = measured[-1]
        print(f"{what}: {p['chunks']} chunks, working set {p['device_working_set']}; steps 1-"
              f"{STEPS} {'exactly' if prefetch == 0 else 'within 3 chunks or 10% of'} the "
              f"prediction (steady, measured: read {s['nvme_read_bytes']}, written "
              f"{s['nvme_write_bytes']}, h2d {s['h2d_bytes']}, d2h {s['d2h_bytes']} bytes, "
              f"{s['evictions']} evictions of which {s['clean_evictions']} clean)")

    if experts:
        # The last pipeline rank holds the second MoE layer only: its experts are numbered over
        # the layers it holds (the run's records carry rank 0's traffic, so this one is planned
        # only; numbering the model's layers left its first layer without experts).
        p = plan(tessel, configs["moe"], "fp32", 4, 4, True, 4, "eppz3-1f1b", 40 << 10)
        last = json.loads(run([tessel, "plan", "offload", "-m", configs["moe"], "--chunk-size",
                               str(40 << 10), "--device-budget", str(4 * (40 << 10)),
                               "--host-budget", str(4 * (40 << 10)), "--grad-accum", "4",
                               "--nvme", "--json", "--pp-rank", "1"] +
                              plan_flags("eppz3-1f1b", "fp32")).stdout)
        if last["chunks"] < 4 or last["state_bytes"] == p["state_bytes"]:
            fail(f"pipeline rank 1 of --dp 2 --pp 2 --ep 2: {last['chunks']} chunks, "
                 f"{last['state_bytes']} bytes of state (rank 0: {p['state_bytes']})")
        print(f"pipeline rank 1 of --dp 2 --pp 2 --ep 2 planned: {last['chunks']} chunks, "
              f"{last['state_bytes']} bytes of state")
        # The last pipeline rank in bf16 at ZeRO-1/2 (its copy of the tied embedding, which the
        # head multiplies with and the first stage trains, is rounded when the step's scope
        # opens; the recording once left it waiting for a unit that never ran: a dtype error).
        for model, layout, kib in [("moeq", "eptpz2-gpipe", 64),
                                   ("gpt2p", "pz1-interleaved:2", 1536)]:
            r = run([tessel, "plan", "offload", "-m", configs[model], "--precision", "bf16",
                     "--chunk-size", str(kib << 10), "--device-budget", str(64 << 20),
                     "--host-budget", str(64 << 20), "--grad-accum", "4", "--nvme", "--json",
                     "--pp-rank", "1"] + plan_flags(layout, "bf16"))
            last = json.loads(r.stdout)
            if last["chunks"] < 2:
                fail(f"pipeline rank 1 of {layout} in bf16: {last['chunks']} chunks")
            print(f"pipeline rank 1 of {' '.join(plan_flags(layout, 'bf16'))} in bf16 planned: "
                  f"{last['chunks']} chunks")
        # --etp without --tp is refused by name.
        base = [tessel, "plan", "offload", "-m", configs["moeh"], "--chunk-size", str(40 << 10),
                "--device-budget", str(4 * (40 << 10)), "--nvme", "--dp", "2", "--ep", "2"]
        for flags, expected in [(["--etp"], "--etp splits each expert's FFN over --tp")]:
            r = subprocess.run(base + flags, env=env, capture_output=True, text=True)
            if r.returncode == 0 or expected not in r.stderr or r.stderr.count("\n") > 1:
                fail(f"plan offload {' '.join(flags)}: expected one line naming '{expected}', "
                     f"rc {r.returncode}: {r.stderr[-800:]}")
            print(f"plan offload --dp 2 --ep 2 {' '.join(flags)}: refused ({r.stderr.strip()})")
    # Below the working set: both refuse, naming the same smallest device budget (one process;
    # with the expert-parallel cases, rank 0 of --dp 2 --ep 2 at ZeRO-3, both axes' gathers).
    model, layout, kib = ("moe", "ep2z3", 40) if experts else ("gpt2", "", 32)
    chunk = kib << 10
    launch = mpi_prefix(mpirun) + ["-np", str(ranks(layout))] if layout else None
    ws = plan(tessel, configs[model], "fp32", 256, 256, True, 1, layout, chunk)["device_working_set"]
    names = []
    for cmd in ([tessel, "plan", "offload", "-m", configs[model], "--chunk-size", str(chunk),
                 "--device-budget", str((ws - 1) * chunk), "--host-budget", str(6 * chunk),
                 "--nvme"] + plan_flags(layout, "fp32"),
                train(tessel, work, "refused", configs[model], "fp32", ws - 1, 6, True, 4, 1,
                      env, launch, layout, chunk)[0]):
        r = subprocess.run(cmd, env=env, capture_output=True, text=True)
        m = re.search(r"smallest device budget that works is (\d+) bytes", r.stdout + r.stderr)
        if r.returncode == 0 or not m:
            fail(f"a device tier of {ws - 1} chunks: expected a refusal, rc {r.returncode}: "
                 f"{r.stderr[-800:]}")
        names.append(int(m.group(1)))
    if names != [ws * chunk] * 2:
        fail(f"smallest device budgets named by plan and train: {names}, expected {ws * chunk}")
    print(f"a device tier of {ws - 1} chunks{' (' + layout + ')' if layout else ''}: plan and "
          f"train both name {ws * chunk} bytes")
    remove_workdir(work)


if __name__ == "__main__":
    main()
