#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Layout-independent checkpoints: a checkpoint written at step 10 by one layout (every rank its
own piece file, plus an index) resumes in another layout and continues the trajectory of one rank:
every step's loss and the final parameters within 1e-5 (relative) of an uninterrupted one-rank run.
Saved at dp=2 ZeRO-3, resumed at dp=3 ZeRO-3 and on one rank; saved at tp=2, resumed at tp=1 and
tp=4; saved at pp=2, resumed at pp=1. With --composed, also saved at (dp, tp, pp) = (2, 2, 2) and
resumed at (1, 1, 1), (4, 1, 2) and (1, 2, 4); saved at (2, 2, 1) and (2, 1, 2) with ZeRO-3 and
resumed at (1, 1, 1), (2, 1, 2) ZeRO-3 and (1, 2, 1).

With --llama the model is a tiny LLaMA with 4 query heads and 2 KV heads, so that tp 2 splits the
KV heads and tp 4 replicates each over two ranks (written once, by the first): saved at tp=2 and
resumed at tp=4 and tp=1; saved at tp=4 and resumed at tp=1 and at (2, 2, 1) ZeRO-3; saved at
(2, 2, 2) ZeRO-1 and resumed at (1, 4, 2). Then greedy `tessel generate --tp 2` and `--tp 4` (KV
cache of split and of replicated KV heads) emit the ids of one rank.

Usage: reshard_equivalence.py TESSEL MPIRUN WORKDIR [--composed] [--llama]
"""
import json
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "common"))
from tessel_runs import (check_generate_tp, compare_losses, compare_params, fail,  # noqa: E402
                         final_params, gpt2_config, mpi_prefix, prepare_workdir, run,
                         seed_resume, single_thread_env, train_sets, write_json)


def compare(ref_dir, dir_, what, steps):
    worst = compare_losses(ref_dir, dir_, what, steps)
    pa = final_params(ref_dir, steps, check_f32=False)
    pb = final_params(dir_, steps, check_f32=False)
    if sorted(pa) != sorted(pb):
        fail(f"{what}: the final model holds {sorted(pb)}, one rank's {sorted(pa)}")
    rel_p = compare_params(pa, pb, what)[0]
    print(f"{what}: losses within {worst:.1e}, final parameters within {rel_p:.1e}")


def check_pieces(ckpt, world, what):
    """One piece file per rank, an index naming them all, and a manifest covering every file."""
    files = sorted(x for x in os.listdir(ckpt) if x.startswith("pieces_") and x.endswith(".safetensors"))
    want = [f"pieces_{r:05d}_of_{world:05d}.safetensors" for r in range(world)]
    if files != want:
        fail(f"{what}: {ckpt} holds piece files {files}, expected {want}")
    with open(os.path.join(ckpt, "pieces_index.json")) as f:
        index = json.load(f)
    if index["files"] != want or index["world"] != world:
        fail(f"{what}: the index lists {index['files']} for world {index['world']}")
    with open(os.path.join(ckpt, "COMMITTED")) as f:
        manifest = json.load(f)["files"]
    missing = [x for x in want + ["pieces_index.json", "model.safetensors", "state.json"] if x not in manifest]
    if missing:
        fail(f"{what}: the manifest of {ckpt} does not list {missing}")


def llama_config(vocab):
    """Width 24, 4 query heads of 6 rows sharing 2 KV heads, a tied head (the odd vocabulary is
    padded under tp, which only the tied embedding allows)."""
    return {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "vocab_size": vocab,
            "hidden_size": 24, "intermediate_size": 40, "num_hidden_layers": 2,
            "num_attention_heads": 4, "num_key_value_heads": 2, "max_position_embeddings": 32,
            "rms_norm_eps": 1e-5, "rope_theta": 10000.0, "tie_word_embeddings": True}


def main():
    tessel, mpirun, work = sys.argv[1], sys.argv[2], sys.argv[3]
    composed = "--composed" in sys.argv[4:]
    llama = "--llama" in sys.argv[4:]
    vocab = prepare_workdir(tessel, work)
    # n_head 4 splits over tp 4; the vocabulary (257) is padded under every tp > 1.
    model = (llama_config(vocab) if llama else
             gpt2_config(vocab, n_positions=32, n_embd=24, n_layer=2, n_head=4))
    config = write_json(os.path.join(work, "config.json"), model)
    batch, steps = 12, 20
    common = train_sets(config, os.path.join(work, "data"), steps, seq_len=16,
                        extra=["machine.peak_gflops=100", "checkpoint.interval=10", "train.grad_accum=4"])
    env = single_thread_env()
    mpi = mpi_prefix(mpirun)

    def launch(dp, tp, pp, stage, extra):
        world = dp * tp * pp
        head = (mpi + ["-np", str(world)]) if world > 1 else []
        return run(head + [tessel, "train"] + extra +
                   ["--dp", str(dp), "--tp", str(tp), "--pp", str(pp),
                    "--set", f"train.micro_batch={batch // dp}", "--set", f"parallel.zero_stage={stage}"],
                   env=env)

    ref = os.path.join(work, "ref")
    launch(1, 1, 1, 0, common + ["--set", "checkpoint.dir=" + ref])
    cases = [((2, 1, 1, 3), [(3, 1, 1, 3), (1, 1, 1, 0)]),
             ((1, 2, 1, 0), [(1, 1, 1, 0), (1, 4, 1, 0)]),
             ((1, 1, 2, 0), [(1, 1, 1, 0)])]
    if llama:
        cases = [((1, 2, 1, 0), [(1, 4, 1, 0), (1, 1, 1, 0)]),
                 ((1, 4, 1, 0), [(1, 1, 1, 0), (2, 2, 1, 3)]),
                 ((2, 2, 2, 1), [(1, 4, 2, 0)])]
    elif composed:
        cases.append(((2, 2, 2, 1), [(1, 1, 1, 0), (4, 1, 2, 2), (1, 2, 4, 0)]))
        # ZeRO-3 flat blocks cut through tp shards, and through a pipeline stage's parameters.
        cases.append(((2, 2, 1, 3), [(1, 1, 1, 0), (2, 1, 2, 3)]))
        cases.append(((2, 1, 2, 3), [(1, 2, 1, 0)]))
    for saved, resumes in cases:
        name = "dp{}_tp{}_pp{}_zero{}".format(*saved)
        src = os.path.join(work, name)
        launch(*saved, common + ["--set", "checkpoint.dir=" + src])
        compare(ref, src, name, steps)
        ckpt = os.path.join(src, "step_000010")
        check_pieces(ckpt, saved[0] * saved[1] * saved[2], name)
        for layout in resumes:
            to = "dp{}_tp{}_pp{}_zero{}".format(*layout)
            d = os.path.join(work, f"{name}_to_{to}")
            seed_resume(src, "step_000010", d)
            launch(*layout, ["--resume", d])
            compare(ref, d, f"saved at {name}, resumed at {to}", steps)
    if llama:
        check_generate_tp(tessel, mpi, work, model, (2, 4), [5, 9, 12, 30, 17], env)


if __name__ == "__main__":
    main()
