#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""`tessel tokenize` on the SentencePiece fixture's model directories: a directory with a
tokenizer.model, one with a Llama 2 tokenizer.json, one with a Unigram tokenizer.json, and a
.model file given directly, must print the reference library's ids for recorded strings, and
--decode must print its text.

Usage: sentencepiece_cli_check.py TESSEL_BINARY FIXTURE_DIR
"""
import json
import os
import subprocess
import sys


def run(binary, args):
    done = subprocess.run([binary] + args, capture_output=True, text=True, timeout=60)
    if done.returncode != 0:
        print(f"FAILED: tessel {' '.join(args)}: exit {done.returncode}\n{done.stderr}")
        sys.exit(1)
    return done.stdout


def main():
    binary, fixture = sys.argv[1], sys.argv[2]
    expected = json.load(open(os.path.join(fixture, "expected.json"), encoding="utf-8"))
    targets = [
        (os.path.join(fixture, "sp_dir"), "bpe"),
        (os.path.join(fixture, "llama2_bpe"), "bpe"),
        (os.path.join(fixture, "unigram.model"), "unigram"),
        (os.path.join(fixture, "unigram_json"), "unigram_bf"),
    ]
    checked = failed = 0
    for model, name in targets:
        cases = [c for c in expected["models"][name]["cases"]
                 if c["kind"] == "held_out" and "\x00" not in c["text"]][:20]
        cases += [c for c in expected["models"][name]["cases"]
                  if c["kind"] == "hard" and c["text"] in ("Hello world", " a", "caf\u00e9 na\u00efve r\u00e9sum\u00e9")]
        for c in cases:
            ids = json.loads(run(binary, ["tokenize", "-m", model, "--text", c["text"]]))
            checked += 1
            if name == "unigram_bf":
                # Hugging Face's Unigram may break exact ties differently from the library
                # (sentencepiece_reference_test.cpp checks that): here, the text round-trips.
                want_ids, want_text, decode_ids = ids, c["text"], ids
            else:
                want_ids, want_text, decode_ids = c["ids"], c["decoded"], c["ids"]
            text = run(binary, ["tokenize", "-m", model, "--decode",
                                ",".join(map(str, decode_ids))])[:-1] if decode_ids else ""
            if ids != want_ids or text != want_text:
                failed += 1
                print(f"{model}: {c['text']!r}\n  ids  {ids}\n  want {want_ids}\n"
                      f"  text {text!r}\n  want {want_text!r}")
    print(f"{checked - failed} passed, {failed} failed")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
