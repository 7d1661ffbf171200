#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""`tessel serve` of the mixture-of-experts families end to end on loopback.

For a random Mixtral (MixtralForCausalLM, one stored tensor per expert as Hugging Face writes it)
and a random GPT-2-MoE (experts in its second block, a capacity that drops pairs in training),
each written in the Hugging Face layout with a byte-level tokenizer by `tessel init`: starts one
server on a free port with small blocks and a small token budget (prompts arrive in chunks, the
decode steps batch several requests, so each expert's GEMM holds tokens of several requests),
sends concurrent greedy completions and requires each text to equal `tessel generate` for the same
prompt, sends one prompt again (a prefix-cache hit), then SIGTERM: the server must drain and exit 0
with nothing left running.
Usage: serve_moe_http.py TESSEL WORKDIR
"""
import os
import shutil
import signal
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from serve_http_common import (completion, concurrent_completions, generate_greedy,  # noqa: E402
                               start_server, write_hf_model)


def fail(message):
    print(f"serve MoE test: {message}", file=sys.stderr)
    sys.exit(1)


CONFIGS = {
    "mixtral": {"architectures": ["MixtralForCausalLM"], "model_type": "mixtral",
                "vocab_size": 257, "hidden_size": 24, "intermediate_size": 13,
                "num_hidden_layers": 2, "num_attention_heads": 6, "num_key_value_heads": 2,
                "max_position_embeddings": 128, "rms_norm_eps": 1e-5, "rope_theta": 10000.0,
                "num_local_experts": 5, "num_experts_per_tok": 2, "sliding_window": None,
                "router_aux_loss_coef": 0.01, "tie_word_embeddings": False,
                "initializer_range": 0.2, "bos_token_id": 256, "eos_token_id": 256},
    "gpt2-moe": {"architectures": ["GPT2MoELMHeadModel"], "model_type": "gpt2_moe",
                 "vocab_size": 257, "n_positions": 128, "n_embd": 24, "n_head": 3, "n_layer": 2,
                 "num_experts": 4, "top_k": 2, "moe_every": 2, "capacity_factor": 0.5,
                 "initializer_range": 0.2, "bos_token_id": 256, "eos_token_id": 256},
}


def check_family(tessel, work, name, env):
    model = write_hf_model(tessel, work, name, CONFIGS[name], 5)
    if name == "mixtral":
        with open(os.path.join(model, "model.safetensors"), "rb") as f:
            header = f.read(8 + int.from_bytes(f.read(8), "little"))
        if b"block_sparse_moe.experts.4.w2.weight" not in header:
            fail("the Mixtral checkpoint does not hold one tensor per expert")
    prompts = ["The sea", "Once upon a time, there", "abc abc abc abc abc abc abc abc x",
               "q", "Experts, experts everywhere"]
    expected = generate_greedy(tessel, model, prompts, 11, env)
    server, url = start_server(
        [tessel, "serve", "-m", model, "--port", "0", "--block-size", "4",
         "--max-batch-tokens", "11", "--drain-timeout", "20"],
        env, lambda message: fail(f"{name}: {message}"))
    try:
        texts = concurrent_completions(url, prompts, 11)
        for i, p in enumerate(prompts):
            if texts[i] != expected[i]:
                fail(f"{name}, {p!r}: server {texts[i]!r} != generate {expected[i]!r}")
        if completion(url, prompts[1], 11) != expected[1]:
            fail(f"{name}: a repeated prompt (prefix-cache hit) gave other text")
        server.send_signal(signal.SIGTERM)
        try:
            code = server.wait(timeout=60)
        except subprocess.TimeoutExpired:
            fail(f"{name}: the server did not end within 60 s of SIGTERM")
        if code != 0:
            fail(f"{name}: the server exited {code} after SIGTERM: {server.stderr.read()[-3000:]}")
    finally:
        if server.poll() is None:
            os.killpg(server.pid, signal.SIGKILL)
            server.wait()
        server.stdout.close()
        server.stderr.close()
    return len(prompts) + 1


def main():
    tessel, work = sys.argv[1:3]
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    env = dict(os.environ, TESSEL_NUM_THREADS="1", OMP_NUM_THREADS="1")
    try:
        for name in CONFIGS:
            n = check_family(tessel, work, name, env)
            print(f"serve {name}: {n} completions equal to `tessel generate`, drained on SIGTERM")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
