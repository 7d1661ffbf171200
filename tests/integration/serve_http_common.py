# SPDX-License-Identifier: Apache-2.0
"""What the loopback `tessel serve` tests share: a random Hugging Face-layout model with GPT-2's
byte-level tokenizer written by `tessel init`, greedy references from `tessel generate`, a server
started on a free port (its URL read from the "ready at" line), and greedy completions sent to it
concurrently; the processes of an mpirun job by rank, and its stop by SIGTERM to rank 0."""
import json
import os
import re
import signal
import struct
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


def concurrently(ask, count):
    """ask(i) for every i < count, all in flight at once (one thread each); the results in order,
    an exception's repr in the place of its result (the caller reports it)."""
    out = [None] * count

    def one(i):
        try:
            out[i] = ask(i)
        except Exception as e:  # noqa: BLE001 - reported by the caller
            out[i] = repr(e)

    threads = [threading.Thread(target=one, args=(i,)) for i in range(count)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return out


def concurrent_completions(url, prompts, tokens):
    """Greedy completions of every prompt, all in flight at once, in the prompts' order."""
    return concurrently(lambda i: completion(url, prompts[i], tokens), len(prompts))


def stored_values(model):
    # Elements of every tensor in the directory's safetensors file(s), from their JSON headers.
    total = 0
    for name in os.listdir(model):
        if not name.endswith(".safetensors"):
            continue
        with open(os.path.join(model, name), "rb") as f:
            (size,) = struct.unpack("<Q", f.read(8))
            header = json.loads(f.read(size))
        for key, entry in header.items():
            if key != "__metadata__":
                n = 1
                for d in entry["shape"]:
                    n *= d
                total += n
    return total


def children(pid):
    out = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            if int(fields[1]) == pid:
                out.append(int(entry))
        except OSError:
            continue
    return out


def rank_of(pid):
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            for item in f.read().split(b"\0"):
                if item.startswith(b"OMPI_COMM_WORLD_RANK="):
                    return int(item.split(b"=", 1)[1])
    except OSError:
        pass
    return None


def mpi_ranks(server, count, fail, name="serve"):
    """The job's processes under mpirun by their world rank; exactly ranks 0..count-1."""
    ranks = {rank_of(c): c for c in children(server.pid)}
    if set(ranks) != set(range(count)):
        fail(f"{name}: expected ranks 0..{count - 1} under mpirun, found {ranks}")
    return ranks


def stop_mpi_job(server, ranks, fail, name="serve"):
    """SIGTERM to rank 0 alone: the job must drain and end with exit 0 within 90 s, leaving no
    process of it behind. Returns the job's stderr."""
    os.kill(ranks[0], signal.SIGTERM)
    try:
        code = server.wait(timeout=90)
    except subprocess.TimeoutExpired:
        fail(f"{name}: the job did not end within 90 s of SIGTERM to rank 0")
    err = server.stderr.read()
    if code != 0:
        fail(f"{name}: the job exited {code} after SIGTERM to rank 0: {err[-3000:]}")
    left = [p for p in ranks.values() if os.path.exists(f"/proc/{p}")]
    if left:
        fail(f"{name}: processes {left} still exist after the job ended")
    return err


def ranks_read(err, pattern, ranks, whole, fail, name="serve"):
    """{rank: weight values read} from the lines `pattern` matches (its first group the rank, its
    last the count): every one of `ranks` ranks said it, each read less than the file's `whole`
    values, and together at least all of them."""
    read = {int(m[0]): int(m[-1]) for m in re.findall(pattern, err)}
    if set(read) != set(range(ranks)):
        fail(f"{name}: expected ranks 0..{ranks - 1} to say what they read, got {read}: "
             f"{err[-2000:]}")
    if any(n >= whole for n in read.values()) or sum(read.values()) < whole:
        fail(f"{name}: ranks read {read} weight values of the file's {whole}: each should read "
             "only its part, and together all of it")
    return read
