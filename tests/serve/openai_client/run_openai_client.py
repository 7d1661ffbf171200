#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""OpenAI's Node.js client against `tessel serve`, end to end on loopback.

Creates a small random GPT-2 with GPT-2's real tokenizer (`tessel init`), starts `tessel serve` on a
free port, runs client_checks.cjs (the official `openai` npm package) against it, checks that
greedy output through the server equals `tessel generate` for the same prompt, then stops the
server with SIGTERM and requires a clean exit (drain). The server is always stopped by its pid.
"""
import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import time

CONFIG = {
    "architectures": ["GPT2LMHeadModel"], "model_type": "gpt2", "vocab_size": 50257,
    "n_positions": 256, "n_embd": 32, "n_head": 2, "n_layer": 2, "initializer_range": 0.2,
    "bos_token_id": 50256, "eos_token_id": 50256,
}


def fail(message):
    print(f"openai client test: {message}", file=sys.stderr)
    sys.exit(1)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--tessel", required=True)
    p.add_argument("--node", required=True)
    p.add_argument("--package", required=True, help="node_modules/openai")
    p.add_argument("--gpt2-dir", required=True, help="encoder.json and vocab.bpe")
    p.add_argument("--work", required=True)
    a = p.parse_args()
    a.package = os.path.abspath(a.package)
    if not os.path.isdir(a.package):
        fail(f"{a.package} is missing (the openai fixture installs it)")

    shutil.rmtree(a.work, ignore_errors=True)
    src = os.path.join(a.work, "src")
    os.makedirs(src)
    with open(os.path.join(src, "config.json"), "w") as f:
        json.dump(CONFIG, f)
    for name in ("encoder.json", "vocab.bpe"):
        shutil.copy(os.path.join(a.gpt2_dir, name), src)
    model = os.path.join(a.work, "model")
    subprocess.run([a.tessel, "init", "--config", os.path.join(src, "config.json"), "--out", model,
                    "-s", "5"], check=True)

    env = dict(os.environ, TESSEL_NUM_THREADS="1", OMP_NUM_THREADS="1")
    server = subprocess.Popen(
        [a.tessel, "serve", "-m", model, "--port", "0", "--served-model-name", "tiny",
         "--max-n", "8", "--drain-timeout", "20"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        url = None
        deadline = time.time() + 120
        while time.time() < deadline:
            line = server.stdout.readline()
            if not line:
                break
            if "ready at " in line:
                url = line.split("ready at ", 1)[1].split()[0]
                break
        if url is None:
            server.kill()
            fail(f"the server never said it was ready; stderr: {server.stderr.read()[-2000:]}")

        checks = subprocess.run([a.node, os.path.join(os.path.dirname(__file__), "client_checks.cjs"),
                                 url, a.package, "tiny"], capture_output=True, text=True, timeout=300)
        print(checks.stdout)
        print(checks.stderr, file=sys.stderr)
        try:
            results = json.loads(checks.stdout.strip().splitlines()[-1])
        except (ValueError, IndexError):
            fail(f"the client printed no results (exit {checks.returncode})")
        if checks.returncode != 0 or results.get("failures"):
            fail("client checks failed: " + "; ".join(results.get("failures", [])))

        gen = subprocess.run([a.tessel, "generate", "-m", model, "-p", "The quick brown fox", "-n",
                              "12", "--temp", "0", "--format", "json"],
                             capture_output=True, text=True, env=env, check=True)
        expected = json.loads(gen.stdout)["text"]
        if results["greedy_text"] != expected:
            fail(f"server greedy text {results['greedy_text']!r} != generate's {expected!r}")
    finally:
        if server.poll() is None:
            server.send_signal(signal.SIGTERM)
            try:
                code = server.wait(timeout=60)
            except subprocess.TimeoutExpired:
                server.kill()
                server.wait()
                fail("the server did not stop within 60 s of SIGTERM")
            if code != 0:
                fail(f"the server exited {code} after SIGTERM; stderr: {server.stderr.read()[-2000:]}")
    print("openai client test: all checks passed")


if __name__ == "__main__":
    main()
