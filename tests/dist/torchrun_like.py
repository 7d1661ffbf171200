#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Starts N copies of a program the way torchrun does, without MPI, on this machine only.

Usage: torchrun_like.py [--nproc N] [--port P] [--timeout S] [--grace S] [--reverse-start S]
                        [--skip-rank R] [--occupy-port] [--agent-store] -- PROGRAM [ARGS...]

Each copy gets RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR=127.0.0.1 and
MASTER_PORT (a free port unless --port is given). When a copy fails, the others get --grace
seconds to end on their own (so their error messages can be checked), then they are killed, as
are all copies still running after --timeout seconds. Prints one line per copy that did not exit
with 0 and exits with the first failure's status (128 + signal for a signal), 0 if all succeeded.

For the rendezvous's fault tests: --reverse-start S starts the ranks from the highest down, S
seconds apart (rank 0, which serves the store, comes last); --skip-rank R never starts rank R;
--occupy-port keeps MASTER_PORT bound by this script, so rank 0 cannot serve there;
--agent-store does so too but, as torchrun's agent does when it serves its own store there, sets
TORCHELASTIC_USE_AGENT_STORE=True (and picks a port whose successor is free).
"""
import argparse
import os
import signal
import socket
import subprocess
import sys
import time


def free_port(next_free=False):
    for _ in range(100):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
            if not next_free:
                return port
            try:
                with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as t:
                    t.bind(("127.0.0.1", port + 1))
                    return port
            except OSError:
                continue
    raise RuntimeError("no free pair of ports")


def status_text(code):
    return f"exited on signal {-code}" if code < 0 else f"exited with status {code}"


def stop_all(procs, killed):
    for rank, p in enumerate(procs):
        if p.poll() is None:
            killed.add(rank)
            p.send_signal(signal.SIGTERM)
    end = time.monotonic() + 5
    for p in procs:
        try:
            p.wait(timeout=max(0.1, end - time.monotonic()))
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--nproc", type=int, default=2)
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--timeout", type=float, default=120)
    ap.add_argument("--grace", type=float, default=5)
    ap.add_argument("--reverse-start", type=float, default=None)
    ap.add_argument("--skip-rank", type=int, default=None)
    ap.add_argument("--occupy-port", action="store_true")
    ap.add_argument("--agent-store", action="store_true")
    ap.add_argument("command", nargs=argparse.REMAINDER)
    a = ap.parse_args()
    cmd = a.command[1:] if a.command and a.command[0] == "--" else a.command
    if not cmd or a.nproc < 1:
        ap.error("need --nproc >= 1 and a program after --")
    port = a.port or free_port(next_free=a.agent_store)
    occupied = None
    extra = {"TORCHELASTIC_USE_AGENT_STORE": "True"} if a.agent_store else {}
    if a.occupy_port or a.agent_store:
        occupied = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        occupied.bind(("127.0.0.1", port))
    order = list(range(a.nproc))
    if a.reverse_start is not None:
        order.reverse()
    procs = [None] * a.nproc
    for i, rank in enumerate(order):
        env = dict(os.environ, RANK=str(rank), WORLD_SIZE=str(a.nproc), LOCAL_RANK=str(rank),
                   LOCAL_WORLD_SIZE=str(a.nproc), MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), **extra)
        if rank == a.skip_rank:
            procs[rank] = subprocess.Popen(["true"])  # stands in for the rank never started
            continue
        if i > 0 and a.reverse_start:
            time.sleep(a.reverse_start)
        procs[rank] = subprocess.Popen(cmd, env=env)
    deadline = time.monotonic() + a.timeout
    first_failure = None
    killed = set()
    try:
        while any(p.poll() is None for p in procs):
            now = time.monotonic()
            if first_failure is None:
                for rank, p in enumerate(procs):
                    if p.returncode not in (None, 0):
                        first_failure = rank
                        deadline = min(deadline, now + a.grace)
                        break
            if now >= deadline:
                if first_failure is None:
                    print(f"torchrun_like: the job did not end within {a.timeout} s",
                          flush=True)
                stop_all(procs, killed)
                break
            time.sleep(0.02)
    finally:
        stop_all(procs, killed)
        if occupied:
            occupied.close()
    sys.stdout.flush()
    for rank, p in enumerate(procs):
        if p.returncode != 0:
            how = "killed by the launcher" if rank in killed else status_text(p.returncode)
            print(f"torchrun_like: rank {rank} {how}", flush=True)
    if first_failure is None:
        for rank, p in enumerate(procs):
            if p.returncode != 0:
                first_failure = rank
                break
    if first_failure is None:
        return 0
    code = procs[first_failure].returncode
    return 128 - code if code < 0 else code


if __name__ == "__main__":
    sys.exit(main())
