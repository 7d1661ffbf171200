#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Memory offload composed with tensor parallelism (docs/MEMORY.md, "With tensor parallelism"):
`mpirun -np 2 tessel train --tp 2` with each tp rank's parameter pieces, gradients and AdamW
moments in chunks of its own (streamed through the device tier by the one-process hooks) equals
the same tp run in memory bit for bit: every step's loss and gradient norm, and the checkpoints'
bytes. Budgets leave chunks in the device, host and NVMe tiers; each rank's NVMe files are in a
folder of its own. The same with sequence parallelism and with a LLaMA whose one K/V head is
replicated over tp (tp's gradient sums write gradient chunks, which by then have reached NVMe:
without the hold both fail), and in bf16. The offloaded tp checkpoint resumes in memory at tp 2 on the uninterrupted
trajectory, and the in-memory one resumes offloaded. A GPT-2 with C = 26, 2 heads, 5 blocks, sequences of 13, two
micro-batches of 3 per step and clipping.

Usage: offload_tp_equivalence.py TESSEL MPIRUN WORKDIR
"""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "common"))
from offload_runs import offload_sets, resumes_both_ways, same_checkpoint, same_records  # noqa: E402
from tessel_runs import (fail, gpt2_config, mpi_prefix, prepare_workdir, run,  # noqa: E402
                         single_thread_env, step_records, train_sets, write_json)

CHUNK = 16 << 10  # holds a rank's largest piece (half of the 256 x 26 embedding: 13 KiB)
HOST, DEVICE = 4, 8  # chunks: the update's row; a block's parameters and gradients with the embeddings'
STEPS, SAVE = 8, 4


def check_tiers(d, what):
    """Every tier held chunks and NVMe was read and written: the budgets forced all of them."""
    recs = [r["offload"] for r in step_records(d) if "offload" in r]
    if len(recs) < STEPS or not all(r["device_bytes"] > 0 and r["host_bytes"] > 0 and
                                    r["nvme_bytes"] > 0 for r in recs):
        fail(f"{what}: some step did not hold chunks in every tier: {recs}")
    if not any(r["nvme_read_bytes"] > 0 for r in recs) or not any(
            r["nvme_write_bytes"] > 0 for r in recs):
        fail(f"{what}: no NVMe traffic: {recs}")


def main():
    tessel, mpirun, work = sys.argv[1], sys.argv[2], sys.argv[3]
    vocab = prepare_workdir(tessel, work)
    cfg = gpt2_config(vocab, n_positions=17, n_embd=26, n_layer=5, n_head=2)
    config = write_json(os.path.join(work, "config.json"), cfg)
    def common_for(model_config):
        return ["train"] + train_sets(
            model_config, os.path.join(work, "data"), STEPS, seq_len=13,
            extra=["machine.peak_gflops=100", f"checkpoint.interval={SAVE}",
                   "train.micro_batch=3", "train.global_batch=6", "optim.grad_clip=0.05",
                   "optim.weight_decay=0.1"])

    common = common_for(config)
    env = single_thread_env()
    mpi = mpi_prefix(mpirun) + ["-np", "2", tessel]
    tp2 = ["--tp", "2"]

    def nvme(tag):
        d = os.path.join(work, "nvme_" + tag)
        os.makedirs(d)
        return d

    ref, off = (os.path.join(work, k) for k in ("memory_tp2", "offload_tp2"))
    run(mpi + common + tp2 + ["--set", "checkpoint.dir=" + ref], env=env)
    swap = nvme("tp2")
    run(mpi + common + tp2 + ["--set", "checkpoint.dir=" + off] +
        offload_sets(swap, HOST, DEVICE, CHUNK), env=env)
    what = "tp 2 offloaded"
    same_records(ref, off, what, STEPS)
    check_tiers(off, what)
    if sorted(os.listdir(swap)) != ["rank0", "rank1"] or any(
            os.listdir(os.path.join(swap, r)) for r in ("rank0", "rank1")):
        fail(f"{what}: {swap} holds {sorted(os.listdir(swap))}: expected one empty folder per "
             f"rank (the swap files are unlinked)")
    for step in (SAVE, STEPS):
        files = same_checkpoint(ref, off, step, what)
    print(f"{what}: {STEPS} steps' losses and norms bitwise the in-memory run's; checkpoints at "
          f"steps {SAVE} and {STEPS} byte for byte ({', '.join(files)})")

    # Sequence parallelism (its gradient sums write the whole parameters' gradient chunks, held
    # one at a time) and bf16 (the 16-bit copies in chunks of their own): bitwise the same runs in
    # memory. The bf16 run's device tier holds the copies' working set and the f32 one's.
    for tag, extra, host in (("sp", ["--sp"], HOST), ("bf16", ["--set", "train.precision=bf16"],
                                                       HOST + 1)):
        m, o = (os.path.join(work, f"{k}_{tag}") for k in ("memory", "offload"))
        run(mpi + common + tp2 + extra + ["--set", "checkpoint.dir=" + m], env=env)
        run(mpi + common + tp2 + extra + ["--set", "checkpoint.dir=" + o] +
            offload_sets(nvme(tag), host, DEVICE, CHUNK), env=env)
        what = f"tp 2 offloaded ({tag})"
        same_records(m, o, what, STEPS)
        check_tiers(o, what)
        same_checkpoint(m, o, STEPS, what)
        print(f"{what}: bitwise the in-memory run's")

    # LLaMA with one K/V head, replicated over the 2 tp ranks: tp sums the copies' gradients
    # after backward, reading and writing their chunks through the same hold.
    llama = write_json(os.path.join(work, "llama.json"), {
        "architectures": ["LlamaForCausalLM"], "model_type": "llama", "vocab_size": vocab,
        "hidden_size": 28, "intermediate_size": 42, "num_hidden_layers": 8,
        "num_attention_heads": 2, "num_key_value_heads": 1, "max_position_embeddings": 32,
        "rms_norm_eps": 1e-5, "rope_theta": 10000.0, "tie_word_embeddings": True})
    m, o = (os.path.join(work, f"{k}_llama_kv1") for k in ("memory", "offload"))
    run(mpi + common_for(llama) + tp2 + ["--set", "checkpoint.dir=" + m], env=env)
    run(mpi + common_for(llama) + tp2 + ["--set", "checkpoint.dir=" + o] +
        offload_sets(nvme("llama"), HOST, 6, CHUNK), env=env)  # its working set: 6 chunks
    what = "tp 2 offloaded (LLaMA, one K/V head replicated)"
    same_records(m, o, what, STEPS)
    check_tiers(o, what)
    same_checkpoint(m, o, STEPS, what)
    print(f"{what}: bitwise the in-memory run's")

    # The offloaded checkpoint resumes in memory, and the in-memory one offloaded, both on the
    # uninterrupted trajectory.
    resumes_both_ways(mpi, tp2, ref, off, work, STEPS, SAVE,
                      offload_sets(nvme("resume"), HOST, DEVICE, CHUNK), "tp 2", env)

if __name__ == "__main__":
    main()
