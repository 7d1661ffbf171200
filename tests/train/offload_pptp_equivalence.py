#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Memory offload composed with pipeline stages and tensor parallelism (docs/MEMORY.md, "With
pipeline stages"): each rank offloads its own tp pieces of its stage's parameters, or under dp its
ZeRO shards of them, and the run equals the same layout in memory bit for bit: every step's loss
and gradient norm, the validation losses and the checkpoints' bytes.

- `--pp 2 --tp 2` in f32 (GPT-2, tied embeddings: the last stage's head exchanges the embedding's
  tp piece with the first), every tier in use; the offloaded checkpoint resumes in memory and the
  in-memory one offloaded, both on the uninterrupted trajectory;
- `--pp 2 --tp 2 --sp` in bf16 (16-bit copies of each piece in chunks of their own, sequence
  parallelism's gradient sums through the gradient hold), and a LLaMA with one K/V head (its
  replicated K/V pieces' gradients summed over tp);
- `--pp 2 --tp 2 --dp 2` on eight ranks: ZeRO-1 in bf16 with --sp, ZeRO-3 in f32.

A GPT-2 with C = 26, 2 heads, 5 blocks, sequences of 13, micro-batches of 3, two per step under
1F1B, clipping and weight decay.

Usage: offload_pptp_equivalence.py TESSEL MPIRUN WORKDIR
"""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "common"))
from offload_runs import (check_tiers, offload_sets, resumes_both_ways,  # noqa: E402
                          same_checkpoint, same_records, same_val_losses, small_gpt2)
from tessel_runs import (mpi_prefix, prepare_workdir, run, single_thread_env,  # noqa: E402
                         train_sets, write_json)

CHUNK = 32 << 10  # holds a rank's largest piece (half of the 257 x 26 embedding) and its copies
HOST, DEVICE = 8, 6  # chunks; each rank's state takes 11-14 chunks, so NVMe holds the rest
STEPS, SAVE = 8, 4


def main():
    tessel, mpirun, work = sys.argv[1], sys.argv[2], sys.argv[3]
    vocab = prepare_workdir(tessel, work)
    gpt2 = small_gpt2(work, vocab)
    llama = write_json(os.path.join(work, "llama.json"), {
        "architectures": ["LlamaForCausalLM"], "model_type": "llama", "vocab_size": vocab,
        "hidden_size": 28, "intermediate_size": 42, "num_hidden_layers": 6,
        "num_attention_heads": 2, "num_key_value_heads": 1, "max_position_embeddings": 32,
        "rms_norm_eps": 1e-5, "rope_theta": 10000.0, "tie_word_embeddings": True})
    env = single_thread_env()

    def common(config, global_batch):
        return ["train"] + train_sets(
            config, os.path.join(work, "data"), STEPS, seq_len=13,
            extra=["machine.peak_gflops=100", f"checkpoint.interval={SAVE}",
                   f"eval.interval={SAVE}", "eval.batches=2", "train.micro_batch=3",
                   f"train.global_batch={global_batch}", "optim.grad_clip=0.05",
                   "optim.weight_decay=0.1"])

    def nvme(tag):
        d = os.path.join(work, "nvme_" + tag)
        os.makedirs(d)
        return d

    def compare(tag, ranks, layout, config=gpt2, precision="fp32", zero=None, chunk=CHUNK,
                tiers=True, model="GPT-2"):
        launch = mpi_prefix(mpirun) + ["-np", str(ranks), tessel]
        dp = ranks // 4
        args = common(config, 6 * dp) + layout + ["--set", f"train.precision={precision}"]
        if zero:
            args += ["--set", f"parallel.zero_stage={zero}"]
        m, o = (os.path.join(work, f"{k}_{tag}") for k in ("memory", "offload"))
        run(launch + args + ["--set", "checkpoint.dir=" + m], env=env)
        run(launch + args + ["--set", "checkpoint.dir=" + o] +
            offload_sets(nvme(tag), HOST, DEVICE, chunk), env=env)
        what = (f"{model} {' '.join(layout)} {precision}" + (f" ZeRO-{zero}" if zero else "") +
                " offloaded")
        same_records(m, o, what, STEPS)
        if tiers:
            check_tiers(o, what, STEPS)
        same_val_losses(m, o, what, STEPS // SAVE)
        for step in (SAVE, STEPS):
            files = same_checkpoint(m, o, step, what)
        print(f"{what}: {STEPS} steps' losses and norms and the validation losses bitwise the "
              f"in-memory run's; checkpoints at steps {SAVE} and {STEPS} byte for byte "
              f"({len(files)} files)")
        return launch, m, o

    pptp = ["--pp", "2", "--tp", "2"]
    launch, ref, off = compare("pptp", 4, pptp)
    resumes_both_ways(launch, pptp, ref, off, work, STEPS, SAVE,
                      offload_sets(nvme("resume"), HOST, DEVICE, CHUNK), "pp 2 x tp 2", env)
    compare("pptp_sp_bf16", 4, pptp + ["--sp"], precision="bf16")
    compare("pptp_llama", 4, pptp, config=llama, model="LLaMA")
    # Eight ranks: ZeRO-1's moments' shards of a stage's bucket need 64 KiB chunks, and each
    # rank's shards are then a few chunks, which the memory tiers hold without NVMe.
    pptpdp = pptp + ["--dp", "2"]
    compare("pptpdp_zero1_bf16", 8, pptpdp + ["--sp"], precision="bf16", zero=1, chunk=64 << 10,
            tiers=False)
    compare("pptpdp_zero3", 8, pptpdp, zero=3, chunk=64 << 10, tiers=False)


if __name__ == "__main__":
    main()
