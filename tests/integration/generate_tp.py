#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""`mpirun -np 2 tessel generate --tp 2` loads only each rank's share and equals one rank.

For a random GPT-2 (transposed Conv1D weights, tied head, vocabulary padded to 258) and a LLaMA
with grouped-query heads (4 query, 2 key/value, untied head), both 64 wide (the row-parallel
splits fall on the int8 kernel's 32-element activation blocks; generate_tp_int8.py covers splits
that do not): greedy ids of `generate --tp 2`
with --weights stored, int8, bf16 and f16 must equal one rank's `generate --weights` (int8 under tp
quantizes each rank's slice with the whole rows' scales), and each rank must say it read fewer
weight values than the file holds, the two together at least all of them.
Usage: generate_tp.py TESSEL MPIEXEC WORKDIR
"""
import json
import os
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from serve_http_common import write_hf_model  # noqa: E402
from serve_http_common import ranks_read, stored_values  # noqa: E402

PROMPT = "5,9,12,40,77,3,101,250,7"
WEIGHTS = ["stored", "int8", "bf16", "f16"]


def fail(message):
    print(f"generate --tp test: {message}", file=sys.stderr)
    sys.exit(1)


def models(tessel, work):
    gpt2 = {"architectures": ["GPT2LMHeadModel"], "model_type": "gpt2", "vocab_size": 257,
            "n_positions": 64, "n_embd": 64, "n_head": 4, "n_layer": 2,
            "initializer_range": 0.5, "bos_token_id": 256, "eos_token_id": 256}
    llama = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "vocab_size": 258,
             "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
             "num_attention_heads": 4, "num_key_value_heads": 2, "max_position_embeddings": 64,
             "rms_norm_eps": 1e-5, "rope_theta": 10000.0, "initializer_range": 0.5,
             "tie_word_embeddings": False, "bos_token_id": 256, "eos_token_id": 256}
    return [write_hf_model(tessel, work, "gpt2", gpt2, 5),
            write_hf_model(tessel, work, "llama", llama, 6)]


def generate(command, env):
    r = subprocess.run(command, capture_output=True, text=True, env=env, timeout=300)
    if r.returncode != 0:
        fail(f"{' '.join(command[-14:])} exited {r.returncode}: {r.stderr[-2000:]}")
    return json.loads(r.stdout)["generated_ids"], r.stderr


def main():
    tessel, mpiexec, work = sys.argv[1:4]
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    env = dict(os.environ, TESSEL_NUM_THREADS="1", OMP_NUM_THREADS="1")
    mpirun = [mpiexec, "--oversubscribe", "--bind-to", "none", "-np", "2"]
    try:
        for model in models(tessel, work):
            whole = stored_values(model)
            name = os.path.basename(model)
            for weights in WEIGHTS:
                gen = [tessel, "generate", "-m", model, "--prompt-ids", PROMPT, "-n", "20",
                       "--temp", "0", "--ignore-eos", "--format", "json", "--weights", weights]
                want, _ = generate(gen, env)
                got, err = generate(mpirun + gen + ["--tp", "2"], env)
                if got != want:
                    fail(f"{name} --weights {weights}: tp 2 ids {got} != one rank's {want}")
                if len(set(want)) < 4:
                    fail(f"{name} --weights {weights}: only {len(set(want))} distinct ids {want}")
                read = ranks_read(err, r"tensor-parallel rank (\d+) read (\d+) weight values", 2,
                                  whole, fail, name)
                if weights != "stored" and "matrices converted on every rank" not in err:
                    fail(f"{name} --weights {weights}: no conversion line: {err[-2000:]}")
                print(f"generate --tp 2 {name} --weights {weights}: {len(want)} ids equal to one "
                      f"rank's ({len(set(want))} distinct), ranks read {read} of {whole} values")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
