#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Memory offload composed with pipeline stages (docs/MEMORY.md, "With pipeline stages"):
`mpirun -np 2 tessel train --pp 2` with each stage's own parameters, gradients and AdamW moments in
chunks of its own equals the same pp run in memory bit for bit: every step's loss and gradient
norm, the validation losses (every rank evaluates the whole model: the first stage's tied
embedding is held while the head uses it) and the checkpoints' bytes. A GPT-2 with tied
embeddings (the last stage keeps its copy in plain memory and sends its gradient to the first
stage, which adds it into its gradient chunk), C = 26, 2 heads, 5 blocks, sequences of 13, two
micro-batches of 3 under 1F1B, clipping; budgets that leave chunks in the device, host and NVMe
tiers, each rank's NVMe files in a folder of its own. The same in bf16 (whose device tier holds
the stage's copies and gradients) and with an untied LLaMA.
The offloaded checkpoint resumes in memory on the uninterrupted trajectory, and the in-memory one
offloaded. (pp with dp: offload_ppdp_equivalence.py.)

Usage: offload_pp_equivalence.py TESSEL MPIRUN WORKDIR
"""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "common"))
from offload_runs import (check_tiers, offload_sets, resumes_both_ways,  # noqa: E402
                          same_checkpoint, same_records, same_val_losses, small_gpt2)
from tessel_runs import (fail, mpi_prefix, prepare_workdir, run,  # noqa: E402
                         single_thread_env, train_sets, write_json)

CHUNK = 32 << 10  # holds the largest tensor, the 257 x 26 embedding (26.7 KB)
HOST, DEVICE = 4, 6  # chunks: the update's row; a unit's parameters and gradients with the embedding's
STEPS, SAVE = 8, 4



def main():
    tessel, mpirun, work = sys.argv[1], sys.argv[2], sys.argv[3]
    vocab = prepare_workdir(tessel, work)
    gpt2 = small_gpt2(work, vocab)

    def common_for(model_config):
        return ["train"] + train_sets(
            model_config, os.path.join(work, "data"), STEPS, seq_len=13,
            extra=["machine.peak_gflops=100", f"checkpoint.interval={SAVE}",
                   f"eval.interval={SAVE}", "eval.batches=2", "train.micro_batch=3",
                   "train.global_batch=6", "optim.grad_clip=0.05", "optim.weight_decay=0.1"])

    env = single_thread_env()
    mpi = mpi_prefix(mpirun) + ["-np", "2", tessel]
    pp2 = ["--pp", "2"]

    def nvme(tag):
        d = os.path.join(work, "nvme_" + tag)
        os.makedirs(d)
        return d

    def compare(model_config, tag, extra=(), host=HOST, device=DEVICE):
        m, o = (os.path.join(work, f"{k}_{tag}") for k in ("memory", "offload"))
        common = common_for(model_config) + pp2 + list(extra)
        run(mpi + common + ["--set", "checkpoint.dir=" + m], env=env)
        swap = nvme(tag)
        run(mpi + common + ["--set", "checkpoint.dir=" + o] +
            offload_sets(swap, host, device, CHUNK), env=env)
        what = f"pp 2 offloaded ({tag})"
        same_records(m, o, what, STEPS)
        check_tiers(o, what, STEPS)
        same_val_losses(m, o, what, STEPS // SAVE)
        if sorted(os.listdir(swap)) != ["rank0", "rank1"] or any(
                os.listdir(os.path.join(swap, r)) for r in ("rank0", "rank1")):
            fail(f"{what}: {swap} holds {sorted(os.listdir(swap))}: expected one empty folder "
                 f"per rank (the swap files are unlinked)")
        for step in (SAVE, STEPS):
            files = same_checkpoint(m, o, step, what)
        print(f"{what}: {STEPS} steps' losses and norms and the validation losses bitwise the "
              f"in-memory run's; checkpoints at steps {SAVE} and {STEPS} byte for byte "
              f"({', '.join(files)})")
        return m, o

    ref, off = compare(gpt2, "f32")
    # bf16: the step's one set of 16-bit copies serves both micro-batches, so every unit's copies
    # and gradients stay in the device tier until the last backward (8 chunks on the first stage).
    compare(gpt2, "bf16", ["--set", "train.precision=bf16"], host=HOST + 1, device=8)
    llama = write_json(os.path.join(work, "llama.json"), {
        "architectures": ["LlamaForCausalLM"], "model_type": "llama", "vocab_size": vocab,
        "hidden_size": 28, "intermediate_size": 42, "num_hidden_layers": 6,
        "num_attention_heads": 2, "num_key_value_heads": 1, "max_position_embeddings": 32,
        "rms_norm_eps": 1e-5, "rope_theta": 10000.0, "tie_word_embeddings": False})
    compare(llama, "llama_untied")

    # The offloaded checkpoint resumes in memory, and the in-memory one offloaded, both on the
    # uninterrupted trajectory.
    resumes_both_ways(mpi, pp2, ref, off, work, STEPS, SAVE,
                      offload_sets(nvme("resume"), HOST, DEVICE, CHUNK), "pp 2", env)

if __name__ == "__main__":
    main()
