#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""`mpirun -np 2 tessel generate --ep 2` spreads the experts over the ranks and equals one process.

For a random Mixtral (6 experts, top-2, one stored tensor per expert) and a random GPT-2-MoE
(4 GELU experts in its second block, a capacity that drops pairs in training but not in eval),
greedy ids of `generate --ep 2` with --weights stored and int8 must equal one process's, and each
rank must say it read fewer weight values than the file holds, the two together at least all of
them (the dense part is read by both). Refused on 2 ranks with one error for the job: 5 experts,
a model without MoE layers (--ep with --tp: moe_tp_cli.py).
Usage: generate_ep.py TESSEL MPIEXEC WORKDIR
"""
import json
import os
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from serve_http_common import write_hf_model  # noqa: E402
from serve_http_common import ranks_read, stored_values  # noqa: E402

PROMPT = "5,9,12,40,77,3,101,250,7,7,7,64,33"


def fail(message):
    print(f"generate --ep test: {message}", file=sys.stderr)
    sys.exit(1)


def mixtral(experts):
    return {"architectures": ["MixtralForCausalLM"], "model_type": "mixtral",
            "vocab_size": 257, "hidden_size": 24, "intermediate_size": 33,
            "num_hidden_layers": 2, "num_attention_heads": 6, "num_key_value_heads": 2,
            "max_position_embeddings": 128, "rms_norm_eps": 1e-5, "rope_theta": 10000.0,
            "num_local_experts": experts, "num_experts_per_tok": 2, "sliding_window": None,
            "router_aux_loss_coef": 0.01, "tie_word_embeddings": False,
            "initializer_range": 0.3, "bos_token_id": 256, "eos_token_id": 256}


GPT2_MOE = {"architectures": ["GPT2MoELMHeadModel"], "model_type": "gpt2_moe",
            "vocab_size": 257, "n_positions": 128, "n_embd": 26, "n_head": 2, "n_layer": 2,
            "num_experts": 4, "top_k": 2, "moe_every": 2, "capacity_factor": 0.5,
            "initializer_range": 0.3, "bos_token_id": 256, "eos_token_id": 256}


DENSE_GPT2 = {"architectures": ["GPT2LMHeadModel"], "model_type": "gpt2", "vocab_size": 257,
              "n_positions": 128, "n_embd": 26, "n_head": 2, "n_layer": 1,
              "bos_token_id": 256, "eos_token_id": 256}


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
        odd = write_hf_model(tessel, work, "odd", mixtral(5), 3)
        dense = write_hf_model(tessel, work, "dense", DENSE_GPT2, 4)
        models = [write_hf_model(tessel, work, "mixtral", mixtral(6), 5),
                  write_hf_model(tessel, work, "gpt2-moe", GPT2_MOE, 6)]
        for model, extra, message in [
                (odd, [], "has 5 experts, which --ep 2 ranks cannot split"),
                (dense, [], "needs a mixture-of-experts model")]:
            r = subprocess.run(mpirun + [tessel, "generate", "--ep", "2", "-m", model,
                                         "--prompt-ids", PROMPT, "--format", "json"] + extra,
                               capture_output=True, text=True, env=env, timeout=120)
            said = (r.stdout + r.stderr).count(message)
            if r.returncode == 0 or said != 1:
                fail(f"{os.path.basename(model)} {extra}: exit {r.returncode}, {message!r} "
                     f"printed {said} times: {r.stderr[-2000:]}")
        for model in models:
            whole = stored_values(model)
            name = os.path.basename(model)
            for weights in ["stored", "int8"]:
                gen = [tessel, "generate", "-m", model, "--prompt-ids", PROMPT, "-n", "24",
                       "--temp", "0", "--ignore-eos", "--format", "json", "--weights", weights]
                want, _ = generate(gen, env)
                got, err = generate(mpirun + gen + ["--ep", "2"], env)
                if got != want:
                    fail(f"{name} --weights {weights}: ep 2 ids {got} != one process's {want}")
                if len(set(want)) < 4:
                    fail(f"{name} --weights {weights}: only {len(set(want))} distinct ids {want}")
                read = ranks_read(err, r"expert-parallel rank (\d+) read (\d+) weight values", 2,
                                  whole, fail, name)
                print(f"generate --ep 2 {name} --weights {weights}: {len(want)} ids equal to one "
                      f"process's ({len(set(want))} distinct), ranks read {read} of {whole}")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
