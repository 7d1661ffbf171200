#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""`tessel generate` holds the weights once, and at `--tp 2` each rank holds only its share.

A random GPT-2 of 81M parameters (768 wide, 6 blocks, GPT-2's vocabulary: 325 MB of f32, the
embedding nearly half of it) is generated from at one process and at `mpirun -np 2 ... --tp 2`;
each process prints its peak resident set (VmHWM) and peak address space (VmPeak). The same two
runs on a tiny model (64 wide, vocabulary 257; under 1 MiB of weights) measure the fixed
overhead F of a process: the runtime, its libraries, OpenMPI's buffers under mpirun. With W the
model's f32 bytes and H_r what rank r says it read (its pieces: half of every split matrix, the
replicated biases, norms and position table; the one zero padding row of the vocabulary is not
read and is left out), the formula is

    one process:  peak = W + F1          tp 2, rank r:  peak = H_r + F2_r,   H_r ~ W / 2

and the test allows each 15% above its weights plus 32 MiB (a transposed tensor's staging while
loading, the prompt's activations and the KV cache, heap bookkeeping):

    0.9 W  <=  peak(one) - F1  <=  1.15 W + 32 MiB       (the model really is loaded, once)
    peak(rank r) - F2_r  <=  1.15 H_r + 32 MiB,   H_r <= 0.55 W
    peak(rank r)  <  peak(one) x (1.15 W/2 + 32 MiB + F2_r) / (0.9 W + F1)

the last being the ratio the first two imply (0.81 here: F is 23 MiB at one process, 33 MiB per
rank). The address space is held to the same shape with 64 MiB of slack (thread stacks and heap
arenas are reserved, not touched): VmPeak(rank r) - VmPeak(tiny rank r) <= 1.15 H_r + 64 MiB, and
at one process VmPeak - VmPeak(tiny) <= 1.15 W + 64 MiB.

What fails without the changes (measured on this model, W = 310 MiB): loading through a temporary
of each tensor's size put the 147 MiB embedding beside the weights (one process's VmHWM 516 MiB:
peak - F1 = 1.59 W); mapping the file and building the whole model before the cut gave each tp
rank a VmPeak of 1248 MiB (724 MiB above the tiny run against a bound of 242). Now: 369 MiB at one
process, 189 and 206 MiB per rank, VmPeak 680 and 697 MiB. Greedy ids at tp 2 must equal one
process's.

`tessel eval` on one 1024-token window (a byte-level text of 1025 bytes) holds the weights and
one chunk of logits at a time (CausalLM::eval_loss, at most 32 MiB of f32 per chunk), not the
window's whole [1024, 50257] logits (196 MiB). Its model has GPT-2's vocabulary and context on a
narrow trunk (128 wide, 4 heads, 2 blocks: W_e = 26.6 MiB), so the logits dominate; against the
tiny model's eval (F_e):

    peak(eval) - F_e  <=  1.15 W_e + 32 MiB (a chunk) + A + 32 MiB   (110.5 MiB)

with A = 16 MiB, the forward's widest activations at 1024 tokens (4 heads' [1024, 1024] f32
attention scores, were they held whole; the MLP's [1024, 512] is 2 MiB). Measured: 72.1 MiB above
the tiny run; before the change the whole logits and the loss's temporaries put it at 235 MiB.
No timings.
Usage: inference_memory.py TESSEL MPIEXEC WORKDIR
"""
import json
import math
import os
import re
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from serve_http_common import stored_values, write_hf_model  # noqa: E402

MIB = 1 << 20
EVAL_CHUNK = 32 * MIB  # models::kLossChunkBytes
EVAL_ACTIVATIONS = 16 * MIB
PROMPT = "5,9,12,40,77,3,101,250,7"
LINE = re.compile(r"rank (\d+) peak RSS ([0-9.]+) MiB \(VmHWM\), peak address space ([0-9.]+) MiB")


def fail(message):
    print(f"inference memory test: {message}", file=sys.stderr)
    sys.exit(1)


def run(command, env):
    r = subprocess.run(command, capture_output=True, text=True, env=env, timeout=600)
    if r.returncode != 0:
        fail(f"{' '.join(command[-12:])} exited {r.returncode}: {r.stderr[-2000:]}")
    return r


def one_process(tessel, model, env):
    """(ids, VmHWM bytes, VmPeak bytes) of one-process generate."""
    r = run([tessel, "generate", "-m", model, "--prompt-ids", PROMPT, "-n", "8", "--temp", "0",
             "--ignore-eos", "--format", "json"], env)
    out = json.loads(r.stdout)
    return out["generated_ids"], out["peak_rss_bytes"], out["peak_vm_bytes"]


def eval_peak(tessel, model, text, env):
    """(mean cross-entropy, VmHWM bytes) of one-process `tessel eval` on `text`."""
    out = json.loads(run([tessel, "eval", "-m", model, "--text", text], env).stdout)
    return out["mean_cross_entropy"], out["peak_rss_bytes"]


def eval_text(path):
    """1025 bytes of ASCII: one 1024-token window under the byte-level tokenizer."""
    words = ["memory", "scales", "with", "the", "chunk", "not", "sequence", "logits", "once"]
    text, i = "", 0
    while len(text) < 1025:
        text += f"{words[i % len(words)]} {i} "
        i += 1
    with open(path, "w") as f:
        f.write(text[:1025])
    return path


def tp2(tessel, mpiexec, model, env):
    """(ids, {rank: (VmHWM, VmPeak) bytes}, {rank: values read}) of generate --tp 2."""
    r = run([mpiexec, "--oversubscribe", "--bind-to", "none", "-np", "2", tessel, "generate", "-m",
             model, "--prompt-ids", PROMPT, "-n", "8", "--temp", "0", "--ignore-eos", "--format",
             "json", "--tp", "2"], env)
    peaks = {int(k): (float(h) * MIB, float(v) * MIB) for k, h, v in LINE.findall(r.stderr)}
    read = {int(k): int(n) for k, n in
            re.findall(r"tensor-parallel rank (\d+) read (\d+) weight values", r.stderr)}
    if set(peaks) != {0, 1} or set(read) != {0, 1}:
        fail(f"expected both ranks' memory and read lines: {r.stderr[-2000:]}")
    return json.loads(r.stdout)["generated_ids"], peaks, read


def main():
    tessel, mpiexec, work = sys.argv[1:4]
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    env = dict(os.environ, TESSEL_NUM_THREADS="1", OMP_NUM_THREADS="1")
    shape = {"architectures": ["GPT2LMHeadModel"], "model_type": "gpt2", "n_positions": 64,
             "initializer_range": 0.02, "bos_token_id": 256, "eos_token_id": 256}
    try:
        tiny = write_hf_model(tessel, work, "tiny", dict(shape, vocab_size=257, n_embd=64,
                                                          n_head=4, n_layer=2), 3)
        big = write_hf_model(tessel, work, "big", dict(shape, vocab_size=50257, n_embd=768,
                                                        n_head=12, n_layer=6), 4)
        w = 4 * stored_values(big)  # f32 bytes of the whole model
        _, f1, fv1 = one_process(tessel, tiny, env)
        _, f2, _ = tp2(tessel, mpiexec, tiny, env)
        want, peak1, vm1 = one_process(tessel, big, env)
        got, peaks, read = tp2(tessel, mpiexec, big, env)
        if got != want:
            fail(f"tp 2 ids {got} != one process's {want}")
        print(f"W {w / MIB:.1f} MiB; one process: VmHWM {peak1 / MIB:.1f} MiB (tiny {f1 / MIB:.1f}), "
              f"VmPeak {vm1 / MIB:.1f} MiB (tiny {fv1 / MIB:.1f})")
        if not 0.9 * w <= peak1 - f1 <= 1.15 * w + 32 * MIB:
            fail(f"one process: peak RSS {peak1 / MIB:.1f} MiB - tiny {f1 / MIB:.1f} MiB = "
                 f"{(peak1 - f1) / MIB:.1f} MiB, expected the weights once: within "
                 f"[0.9, 1.15] x {w / MIB:.1f} MiB + 32 MiB")
        if vm1 - fv1 > 1.15 * w + 64 * MIB:
            fail(f"one process: peak address space {vm1 / MIB:.1f} MiB - tiny {fv1 / MIB:.1f} MiB "
                 f"exceeds 1.15 x {w / MIB:.1f} MiB + 64 MiB")
        for r in (0, 1):
            held = 4 * read[r]
            hwm, vm = peaks[r]
            base_hwm, base_vm = f2[r]
            ratio = (1.15 * w / 2 + 32 * MIB + base_hwm) / (0.9 * w + f1)
            print(f"tp 2 rank {r}: holds {held / MIB:.1f} MiB; VmHWM {hwm / MIB:.1f} MiB (tiny "
                  f"{base_hwm / MIB:.1f}), {hwm / peak1:.3f} of one process's (bound {ratio:.3f}); "
                  f"VmPeak {vm / MIB:.1f} MiB (tiny {base_vm / MIB:.1f})")
            if held > 0.55 * w:
                fail(f"rank {r} read {held / MIB:.1f} MiB of the model's {w / MIB:.1f} MiB")
            if hwm - base_hwm > 1.15 * held + 32 * MIB:
                fail(f"rank {r}: peak RSS {hwm / MIB:.1f} MiB - tiny {base_hwm / MIB:.1f} MiB "
                     f"exceeds 1.15 x its {held / MIB:.1f} MiB + 32 MiB")
            if hwm >= peak1 * ratio:
                fail(f"rank {r}: peak RSS {hwm / MIB:.1f} MiB is not below one process's "
                     f"{peak1 / MIB:.1f} MiB x {ratio:.3f}")
            if vm - base_vm > 1.15 * held + 64 * MIB:
                fail(f"rank {r}: peak address space {vm / MIB:.1f} MiB - tiny {base_vm / MIB:.1f} "
                     f"MiB exceeds 1.15 x its {held / MIB:.1f} MiB + 64 MiB: more than its share "
                     "was allocated or mapped")
        # Evaluation: GPT-2's vocabulary and context on a narrow trunk, so the logits dominate.
        wide = write_hf_model(tessel, work, "eval", dict(shape, vocab_size=50257, n_embd=128,
                                                          n_head=4, n_layer=2, n_positions=1024), 5)
        we = 4 * stored_values(wide)
        text = eval_text(os.path.join(work, "eval.txt"))
        _, fe = eval_peak(tessel, tiny, text, env)
        loss, peak_e = eval_peak(tessel, wide, text, env)
        bound = 1.15 * we + EVAL_CHUNK + EVAL_ACTIVATIONS + 32 * MIB
        print(f"eval, one 1024-token window, W {we / MIB:.1f} MiB: VmHWM {peak_e / MIB:.1f} MiB (tiny {fe / MIB:.1f}), "
              f"{(peak_e - fe) / MIB:.1f} MiB above the tiny run against {bound / MIB:.1f} MiB; "
              f"loss {loss:.4f}")
        if not math.isfinite(loss) or peak_e - fe > bound:
            fail(f"eval: peak RSS {peak_e / MIB:.1f} MiB - tiny {fe / MIB:.1f} MiB exceeds 1.15 x "
                 f"{we / MIB:.1f} MiB + one 32 MiB chunk of logits + {EVAL_ACTIVATIONS // MIB} MiB "
                 f"of activations + 32 MiB (loss {loss}): the window's whole logits were held?")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
