#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""`generate --tp T --weights int8` equals one process when the splits cut the int8 blocks.

The weight-only int8 product rounds its activations to int8 per 32-column block. A row-parallel
layer whose split does not fall on a multiple of 32 must still round in one process's blocks
(parallel/tensor/int8_row_blocks.h): each rank pads its slice to the whole row's blocks and gets
the shared blocks' maxima from the other ranks. Random models (`tessel init`, weights at
initializer_range 0.3, so that the rounding shows in the logits) whose row-parallel widths are
not multiples of 32 at any tp:
- GPT-2-MoE, 4 blocks of width 26 (MLP of 104: 52 / 52 at tp 2; blocks 1 and 3 MoE), np 2;
- dense GPT-2, 4 blocks of width 42, 6 heads, MLP of 91 = 7 x 13 (n_inner), np 2 and 3 (at 3 the
  attention projection's 14 / 14 / 14 puts one block over three ranks);
- LLaMA, 2 layers, hidden 48 over 6 heads, intermediate 91, untied head, np 2 and 3.
`serve --tp 2 --weights int8` of the GPT-2-MoE (np 2: concurrent requests batched in one step, a
prefix-cache hit) must answer with one process's texts, token logprobs within 2e-5.
Each `mpirun -np T tessel generate --tp T --weights int8` must give one process's 24 greedy ids and
its chosen tokens' logits (`generated_logits`) within 2e-5 (the f32 order of the sums over tp:
measured 1.4e-6 to 2.4e-6; rounding in other blocks moved them by 1e-2 to 1e-1).
Usage: generate_tp_int8.py TESSEL MPIEXEC WORKDIR
"""
import copy
import json
import os
import shutil
import signal
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from generate_ep import GPT2_MOE  # noqa: E402
from serve_ep_http import (PROMPTS, completion, served_like_reference, server_command,  # noqa: E402
                           stop)
from serve_http_common import (mpi_ranks, start_server, stop_mpi_job,  # noqa: E402
                               write_hf_model)

PROMPT = "5,9,12,40,77,3,101,250,7,7,7,64,33"
BOUND = 2e-5


def fail(message):
    print(f"generate --tp --weights int8 test: {message}", file=sys.stderr)
    sys.exit(1)


def models(tessel, work):
    moe = copy.deepcopy(GPT2_MOE)
    moe["n_layer"] = 4
    gpt2 = {"architectures": ["GPT2LMHeadModel"], "model_type": "gpt2", "vocab_size": 257,
            "n_positions": 64, "n_embd": 42, "n_head": 6, "n_inner": 91, "n_layer": 4,
            "initializer_range": 0.3, "bos_token_id": 256, "eos_token_id": 256}
    llama = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "vocab_size": 258,
             "hidden_size": 48, "intermediate_size": 91, "num_hidden_layers": 2,
             "num_attention_heads": 6, "num_key_value_heads": 6, "max_position_embeddings": 64,
             "rms_norm_eps": 1e-5, "rope_theta": 10000.0, "initializer_range": 0.3,
             "tie_word_embeddings": False, "bos_token_id": 256, "eos_token_id": 256}
    return [(write_hf_model(tessel, work, "gpt2-moe", moe, 6), [2]),
            (write_hf_model(tessel, work, "gpt2", gpt2, 7), [2, 3]),
            (write_hf_model(tessel, work, "llama", llama, 8), [2, 3])]


def generate(command, env):
    r = subprocess.run(command, capture_output=True, text=True, env=env, timeout=300)
    if r.returncode != 0:
        fail(f"{' '.join(command[-16:])} exited {r.returncode}: {r.stderr[-2000:]}")
    out = json.loads(r.stdout)
    return out["generated_ids"], out["generated_logits"]


def check_serve(tessel, mpiexec, env, model):
    name = os.path.basename(model)
    weights = ["--weights", "int8"]
    server, url = start_server(server_command(model, [tessel, "serve"] + weights), env, fail)
    try:
        want = [completion(url, p) for p in PROMPTS]
        stop(server, server.pid, name)
    finally:
        if server.poll() is None:
            os.killpg(server.pid, signal.SIGKILL)
            server.wait()
    mpirun = [mpiexec, "--oversubscribe", "--bind-to", "none", "-np", "2"]
    server, url = start_server(
        server_command(model, mpirun + [tessel, "serve", "--tp", "2"] + weights), env, fail)
    try:
        count, worst = served_like_reference(url, want, f"{name} serve --tp 2 --weights int8",
                                             BOUND)
        stop_mpi_job(server, mpi_ranks(server, 2, fail, name), fail, name)
    finally:
        if server.poll() is None:
            os.killpg(server.pid, signal.SIGKILL)
            server.wait()
    print(f"serve --tp 2 --weights int8 {name}: {count} completions equal to one process's, "
          f"logprobs within {worst:.3g}")


def main():
    tessel, mpiexec, work = sys.argv[1:4]
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    env = dict(os.environ, TESSEL_NUM_THREADS="1", OMP_NUM_THREADS="1")
    try:
        built = models(tessel, work)
        for model, tps in built:
            name = os.path.basename(model)
            gen = [tessel, "generate", "-m", model, "--prompt-ids", PROMPT, "-n", "24", "--temp",
                   "0", "--ignore-eos", "--format", "json", "--weights", "int8"]
            want, want_logits = generate(gen, env)
            if len(set(want)) < 4:
                fail(f"{name}: only {len(set(want))} distinct ids {want}")
            for tp in tps:
                mpirun = [mpiexec, "--oversubscribe", "--bind-to", "none", "-np", str(tp)]
                got, logits = generate(mpirun + gen + ["--tp", str(tp)], env)
                worst = max(abs(a - b) for a, b in zip(logits, want_logits))
                if got != want or worst > BOUND:
                    fail(f"{name} --tp {tp} --weights int8: ids {got}, one process's {want}; "
                         f"chosen logits differ by up to {worst:.3g} (bound {BOUND:g})")
                print(f"generate --tp {tp} --weights int8 {name}: 24 ids equal to one process's "
                      f"({len(set(want))} distinct), chosen logits within {worst:.3g}")
        check_serve(tessel, mpiexec, env, built[0][0])
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
