# SPDX-License-Identifier: Apache-2.0
"""What the loopback `tessel serve` tests share: a random Hugging Face-layout model with GPT-2's
byte-level tokenizer written by `tessel init`, greedy references from `tessel generate`, a server
started on a free port (its URL read from the "ready at" line), and greedy completions sent to it
concurrently."""
import json
import os
import re
import signal
import subprocess
import threading
import time
import urllib.request


def byte_vocab():
    # GPT-2's byte-to-unicode table: every byte is one token, no merges.
    keep = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    chars, n = [], 0
    for b in range(256):
        if b in keep:
            chars.append(chr(b))
        else:
            chars.append(chr(256 + n))
            n += 1
    return {c: i for i, c in enumerate(chars)}


def write_hf_model(tessel, work, name, config, seed):
    """`tessel init` of `config` (a config.json dict) with the byte-level tokenizer into work/name."""
    src = os.path.join(work, name + "-src")
    os.makedirs(src)
    with open(os.path.join(src, "config.json"), "w") as f:
        json.dump(config, f)
    with open(os.path.join(src, "vocab.json"), "w") as f:
        json.dump(byte_vocab(), f)
    with open(os.path.join(src, "merges.txt"), "w") as f:
        f.write("#version: 0.2\n")
    out = os.path.join(work, name)
    subprocess.run([tessel, "init", "--config", os.path.join(src, "config.json"), "--out", out,
                    "-s", str(seed)], check=True, stdout=subprocess.DEVNULL)
    return out


def generate_greedy(tessel, model, prompts, tokens, env):
    """Each prompt's greedy continuation from one-process `tessel generate`."""
    texts = []
    for p in prompts:
        g = subprocess.run([tessel, "generate", "-m", model, "-p", p, "-n", str(tokens), "--temp",
                            "0", "--ignore-eos", "--format", "json"],
                           capture_output=True, text=True, env=env, check=True)
        texts.append(json.loads(g.stdout)["text"])
    return texts


def start_server(command, env, fail):
    """Starts `command` (a `tessel serve --port 0`, possibly under mpirun) in its own session and
    returns (process, url) once it says it is ready; the caller ends the process."""
    server = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                              env=env, start_new_session=True)
    url, deadline = None, time.time() + 120
    while url is None and time.time() < deadline:
        line = server.stdout.readline()
        if not line:
            break
        m = re.search(r"ready at (http://\S+)", line)
        if m:
            url = m.group(1)
    if url is None:
        os.killpg(server.pid, signal.SIGKILL)
        server.wait()
        fail(f"the server never said it was ready: {server.stderr.read()[-2000:]}")
    return server, url


def completion(url, prompt, tokens):
    body = json.dumps({"prompt": prompt, "max_tokens": tokens, "temperature": 0,
                       "ignore_eos": True}).encode()
    req = urllib.request.Request(url + "/v1/completions", body,
                                 {"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=120) as r:
        return json.load(r)["choices"][0]["text"]


def concurrent_completions(url, prompts, tokens):
    """Greedy completions of every prompt, all in flight at once, in the prompts' order."""
    texts = [None] * len(prompts)

    def ask(i):
        texts[i] = completion(url, prompts[i], tokens)

    threads = [threading.Thread(target=ask, args=(i,)) for i in range(len(prompts))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return texts
