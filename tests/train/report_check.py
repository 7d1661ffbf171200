#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""`tessel report` on a real pipelined run, loaded in a headless browser: a tiny GPT-2 trains
with pp = 2 under mpirun (1F1B, 3 micro-batches, evaluations every 4 steps, TensorBoard on), then
`tessel report RUN_DIR` writes RUN_DIR/report.html and Debian's chromium loads it from the file
(--headless --dump-dom, no network). The DOM the browser built must hold every plot as an SVG
element (svg.plot[data-metric]) with a polyline of at least 2 points for each series — loss,
validation loss, learning rate, gradient norm, tokens/s, MFU, memory in use and peak — and the
pipeline timeline (svg.timeline, 2 rank rows, a forward and a backward box per stage and
micro-batch). Only the leader wrote an event file. `--out` writes elsewhere, and a missing run
directory or JSONL log is one `tessel: error: report: ...` line with exit status 1.

Chromium comes from scripts/setup; without it the test fails and says so.

Usage: report_check.py TESSEL MPIRUN WORKDIR
"""
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from html.parser import HTMLParser

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "common"))
from tessel_runs import (fail, gpt2_config, mpi_prefix, prepare_workdir, run,  # noqa: E402
                         single_thread_env, train_sets, write_json)

SERIES = {"loss": {"loss", "val_loss"}, "lr": {"lr"}, "grad_norm": {"grad_norm"},
          "tokens_per_s": {"tokens_per_s"}, "mfu": {"mfu"},
          "memory": {"mem_bytes", "mem_peak_bytes"}}
STAGES, MICROBATCHES = 2, 3


class Dom(HTMLParser):
    """The plots (metric -> series -> points) and timeline boxes of a dumped DOM."""

    def __init__(self):
        super().__init__()
        self.plots, self.svg, self.timeline, self.boxes, self.rows = {}, None, None, [], 0

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        classes = (a.get("class") or "").split()
        if tag == "svg" and "plot" in classes:
            self.svg = self.plots.setdefault(a.get("data-metric"), {})
        elif tag == "svg" and "timeline" in classes:
            self.timeline = a
        elif tag == "polyline" and self.svg is not None:
            self.svg[a.get("data-series")] = len((a.get("points") or "").split())
        elif tag == "rect" and self.timeline is not None and ({"fwd", "bwd"} & set(classes)):
            self.boxes.append((classes[0], int(a["data-stage"]), int(a["data-microbatch"])))
        elif tag == "g" and self.timeline is not None and "rank" in classes:
            self.rows += 1

    def handle_endtag(self, tag):
        if tag == "svg":
            self.svg = None


def dump_dom(chromium, page):
    """The DOM chromium builds from `page`, in a throwaway profile (its crash reports and caches
    too, which otherwise go to ~/.config and ~/.cache); no process outlives it."""
    with tempfile.TemporaryDirectory(prefix="tessel_chromium_") as profile:
        cmd = [chromium, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
               "--user-data-dir=" + os.path.join(profile, "profile"), "--dump-dom",
               "file://" + os.path.abspath(page)]
        env = dict(os.environ, XDG_CONFIG_HOME=profile, XDG_CACHE_HOME=profile)
        p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                             start_new_session=True, env=env)
        try:
            out, err = p.communicate(timeout=120)
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)
            p.communicate()
            fail(f"chromium did not finish loading {page} within 120 s")
        finally:
            try:  # helpers of the browser's own session, should any be left
                os.killpg(p.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
    if p.returncode != 0 or "<svg" not in out:
        fail(f"{' '.join(cmd)} exited {p.returncode}\n{err[-3000:]}")
    return out


def expect_error(cmd, env, text):
    p = subprocess.run(cmd, capture_output=True, text=True, env=env)
    lines = p.stderr.strip().splitlines()
    if p.returncode != 1 or len(lines) != 1 or not lines[0].startswith("tessel: error: report: ") \
            or text not in lines[0]:
        fail(f"{' '.join(cmd)}: exit {p.returncode}, stderr {p.stderr!r}; expected one "
             f"'tessel: error: report: ...{text}...' line and exit 1")


def main():
    tessel, mpirun, work = sys.argv[1], sys.argv[2], sys.argv[3]
    chromium = shutil.which("chromium")
    if chromium is None:
        fail("chromium is not installed: run scripts/setup (it installs Debian's chromium)")
    vocab = prepare_workdir(tessel, work)
    config = write_json(os.path.join(work, "config.json"),
                        gpt2_config(vocab, n_positions=32, n_embd=24, n_layer=2, n_head=2))
    d = os.path.join(work, "pp2")
    env = single_thread_env()
    run(mpi_prefix(mpirun) + ["-np", "2", tessel] + ["train"] + train_sets(
        config, os.path.join(work, "data"), 11, seq_len=16,
        extra=["machine.peak_gflops=100", "eval.interval=4", "log.tensorboard=true",
               "train.micro_batch=2", "checkpoint.dir=" + d]) +
        ["--pp", "2", "--schedule", "1f1b", "--microbatches", str(MICROBATCHES)], env=env)
    events = os.listdir(os.path.join(d, "tensorboard"))
    if len(events) != 1:
        fail(f"{d}/tensorboard holds {events}: only the leader rank should write one event file")

    out = run([tessel, "report", d], env=env).stdout
    page = os.path.join(d, "report.html")
    if out.strip() != "report: wrote " + page:
        fail(f"tessel report printed {out!r}")
    dom = Dom()
    dom.feed(dump_dom(chromium, page))
    for metric, series in SERIES.items():
        got = dom.plots.get(metric)
        if got is None:
            fail(f"no svg.plot[data-metric={metric}] in the DOM; plots: {sorted(dom.plots)}")
        for s in series:
            if got.get(s, 0) < 2:
                fail(f"plot {metric}: series {s} has {got.get(s, 0)} points, expected >= 2: {got}")
    if dom.timeline is None or dom.timeline.get("data-ranks") != "2" or dom.rows != 2:
        fail(f"no pipeline timeline with 2 rank rows in the DOM: {dom.timeline}, rows {dom.rows}")
    want = sorted((k, s, m) for k in ("bwd", "fwd") for s in range(STAGES)
                  for m in range(MICROBATCHES))
    if sorted(dom.boxes) != want:
        fail(f"timeline boxes {sorted(dom.boxes)}, expected {want}")

    other = os.path.join(work, "elsewhere.html")
    run([tessel, "report", d, "--out", other], env=env)
    if not os.path.getsize(other):
        fail(f"--out {other} is empty")
    expect_error([tessel, "report", os.path.join(work, "missing")], env, "is not a run directory")
    empty = os.path.join(work, "empty_run")
    os.makedirs(empty)
    expect_error([tessel, "report", empty], env, "train.jsonl not found")
    print(f"report: {len(dom.plots)} plots and a {len(dom.boxes)}-box pipeline timeline in the DOM "
          f"chromium built from {page}")


if __name__ == "__main__":
    main()
