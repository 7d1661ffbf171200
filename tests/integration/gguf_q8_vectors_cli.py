#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""A GGUF file whose 1-D tensors (norm weights, biases) are Q8_0 loads on every parallel path.

One process dequantizes such a tensor at load (models/gguf_model.cpp); the per-rank loaders read
it as a float region, and refused it before ("... is Q8_0, which only a Linear or Embedding weight
may be under tensor parallelism"). Q8_0 exports of a GPT-2 (biases split over tp with their
column-parallel layers), a LLaMA and a Mixtral (gguf_tp_cli.py's and gguf_ep_cli.py's random models)
are rewritten with every 1-D tensor in Q8_0 (gguf_quantize_vectors.py); `generate` under `--tp 2`,
`--pp 2` and, for the Mixtral, `--ep 2` and `--ep 2 --pp 2` must give one process's 16 greedy ids.
Usage: gguf_q8_vectors_cli.py TESSEL MPIEXEC WORKDIR
"""
import os
import shutil
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gguf_ep_cli import mixtral  # noqa: E402
from gguf_quantize_vectors import quantize_vectors  # noqa: E402
from gguf_tp_cli import llama_config, quantize, run, write_model  # noqa: E402

PROMPT = "5,9,12,40,77,3,101,250,7,7,7,64,33"
GPT2 = {"architectures": ["GPT2LMHeadModel"], "model_type": "gpt2", "vocab_size": 259,
        "n_positions": 64, "n_embd": 64, "n_head": 4, "n_layer": 2, "initializer_range": 0.5,
        "bos_token_id": 257, "eos_token_id": 257}


def fail(message):
    print(f"GGUF Q8_0 vectors test: {message}", file=sys.stderr)
    sys.exit(1)


def main():
    tessel, mpiexec, work = sys.argv[1:4]
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    env = dict(os.environ, TESSEL_NUM_THREADS="1", OMP_NUM_THREADS="1")
    moe = mixtral(6)
    moe["intermediate_size"] = 128
    dense = [["--tp", "2"], ["--pp", "2"]]
    try:
        for name, config, seed, layouts in [
                ("gpt2", GPT2, 5, dense), ("llama", llama_config(128), 6, dense),
                ("mixtral", moe, 7, dense + [["--ep", "2"], ["--ep", "2", "--pp", "2"]])]:
            q8 = quantize(tessel, write_model(tessel, work, name, config, seed), "q8_0", env)
            gguf = os.path.join(work, name + "-q8_0-vectors.gguf")
            vectors = quantize_vectors(q8, gguf)
            if not any("norm" in v for v in vectors):
                fail(f"{name}: no norm weight among the tensors quantized: {vectors}")
            gen = [tessel, "generate", "-m", gguf, "--prompt-ids", PROMPT, "-n", "16", "--temp",
                   "0", "--ignore-eos", "--format", "json"]
            want, _ = run(gen, env)
            before, _ = run(gen[:2] + ["-m", q8] + gen[4:], env)
            if want == before:
                print(f"{name}: (the Q8_0 vectors left the 16 ids unchanged)")
            for flags in layouts:
                ranks = 4 if len(flags) == 4 else 2
                mpirun = [mpiexec, "--oversubscribe", "--bind-to", "none", "-np", str(ranks)]
                got, _ = run(mpirun + gen + flags, env)
                if got != want:
                    fail(f"{name} {' '.join(flags)}: ids {got} != one process's {want}")
            print(f"{name}: {len(vectors)} 1-D tensors in Q8_0; 16 ids equal to one process's "
                  f"under {', '.join(' '.join(f) for f in layouts)}")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
