#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Each rank of `mpirun -np 2 tessel generate --pp 2 -m model.gguf` peaks below one process on the
same file, in resident set (VmHWM) and in address space (VmPeak).

A random LLaMA of 8 blocks, 1024 wide, MLP 2816, 8 heads / 4 KV heads, vocabulary 258 (93 M
parameters: 373 MB of f32) is quantized by `tessel quantize` to Q8_0 (101 MB). One process maps
the file and binds the matrices to its blocks; a `--pp 2` rank maps the file too, and holds its
stage only. Each prints `peak RSS ... (VmHWM), peak address space ... (VmPeak)`. A rank under
mpirun starts with about 270 MiB more address space than one process (OpenMPI's buffers and
the heap arenas of its threads), and one process allocates the whole model's f32 tensors
untouched before binding its matrices to the file, so the comparison holds only for a model
whose f32 tensors are larger than that overhead: the test's model is. What fails without the
change: the rank built the whole model's f32 tensors without values (allocated, never touched)
beside the mapped file, so every rank's VmPeak was above one process's (1047 vs 719 MiB for this
file); built shape-only, a rank allocates only its stage's f32 tensors (628 MiB).

A rank maps only the byte ranges of the file it reads (windows of the file, io::GgufMapping), not
the whole file: its VmPeak above that of a `--pp 2` rank of a tiny LLaMA GGUF (the runtime, MPI
and libraries alone) must be under three quarters of the file, where mapping the whole file put
it above the whole file (its stage's share is half; before the change each rank mapped all of
it). Greedy ids must equal one process's.
No timings.
Usage: gguf_pp_memory.py TESSEL MPIEXEC WORKDIR
"""
import json
import os
import re
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gguf_tp_cli import quantize, write_model  # noqa: E402

MIB = 1 << 20
PROMPT = "5,9,12,40,77"
LINE = re.compile(r"rank (\d+) peak RSS ([\d.]+) MiB \(VmHWM\), peak address space ([\d.]+) MiB "
                  r"\(VmPeak\)")


def fail(message):
    print(f"GGUF pp memory test: {message}", file=sys.stderr)
    sys.exit(1)


def run(command, env):
    r = subprocess.run(command, capture_output=True, text=True, env=env, timeout=300)
    if r.returncode != 0:
        fail(f"{' '.join(command[-14:])} exited {r.returncode}: {r.stderr[-2000:]}")
    return r


def main():
    tessel, mpiexec, work = sys.argv[1:4]
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    # One malloc arena: the 64 MiB heap arenas that threads (MPI's, the runtime's) may or may not
    # reserve moved a rank's VmPeak by 64 MiB from run to run (718 and 782 MiB for two ranks of
    # the same F16 job), more than the half file the windows check tells apart.
    env = dict(os.environ, TESSEL_NUM_THREADS="1", OMP_NUM_THREADS="1", MALLOC_ARENA_MAX="1")
    llama = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "vocab_size": 258,
             "hidden_size": 1024, "intermediate_size": 2816, "num_hidden_layers": 8,
             "num_attention_heads": 8, "num_key_value_heads": 4, "max_position_embeddings": 64,
             "rms_norm_eps": 1e-5, "rope_theta": 10000.0, "initializer_range": 0.05,
             "tie_word_embeddings": False, "bos_token_id": 257, "eos_token_id": 257}
    try:
        tiny = quantize(tessel, write_model(tessel, work, "tiny", dict(
            llama, hidden_size=64, intermediate_size=96, num_hidden_layers=2), 3), "q8_0", env)
        model = write_model(tessel, work, "llama", llama, 3)
        gguf = quantize(tessel, model, "q8_0", env)
        shutil.rmtree(model)  # the f32 safetensors: 373 MB of disk the test no longer needs
        file_mib = os.path.getsize(gguf) / MIB
        mpi = [mpiexec, "--oversubscribe", "--bind-to", "none", "-np", "2"]

        def generate(path):
            return [tessel, "generate", "-m", path, "--prompt-ids", PROMPT, "-n", "8", "--temp",
                    "0", "--ignore-eos", "--format", "json"]

        base = {int(k): float(v) for k, _, v in
                LINE.findall(run([*mpi, *generate(tiny), "--pp", "2"], env).stderr)}
        if set(base) != {0, 1}:
            fail("expected both ranks' memory lines from the tiny model's run")
        gen = generate(gguf)
        one = json.loads(run(gen, env).stdout)
        hwm1, vm1 = one["peak_rss_bytes"] / MIB, one["peak_vm_bytes"] / MIB
        r = run([*mpi, *gen, "--pp", "2"], env)
        if json.loads(r.stdout)["generated_ids"] != one["generated_ids"]:
            fail(f"--pp 2 ids {r.stdout} != one process's {one['generated_ids']}")
        ranks = {int(k): (float(h), float(v)) for k, h, v in LINE.findall(r.stderr)}
        if set(ranks) != {0, 1}:
            fail(f"expected both ranks' memory lines: {r.stderr[-2000:]}")
        for rank, (hwm, vm) in sorted(ranks.items()):
            if vm >= vm1:
                fail(f"rank {rank}'s VmPeak {vm:.1f} MiB is not below one process's {vm1:.1f} MiB "
                     "(the rank allocates more than its stage, or maps more than the file)")
            if hwm >= hwm1:
                fail(f"rank {rank}'s VmHWM {hwm:.1f} MiB is not below one process's {hwm1:.1f} MiB")
            if vm - base[rank] >= 0.75 * file_mib:
                fail(f"rank {rank}'s VmPeak {vm:.1f} MiB is {vm - base[rank]:.1f} MiB above a tiny "
                     f"model's rank ({base[rank]:.1f} MiB): not under three quarters of the "
                     f"{file_mib:.1f} MiB file (the rank maps more than its stage's share)")
        print(f"Q8_0 LLaMA ({file_mib:.1f} MiB): one process VmHWM {hwm1:.1f} MiB, VmPeak "
              f"{vm1:.1f} MiB; --pp 2 ranks (VmHWM, VmPeak) {ranks}; tiny model's ranks' VmPeak "
              f"{base}")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
