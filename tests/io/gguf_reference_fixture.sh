#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# CTest fixture for the GGUF reference test: installs Hugging Face's JavaScript GGUF parser (npm
# @huggingface/gguf, written by others) into the build tree, once. The test then has it read the
# files tessel writes (tests/io/gguf_reference.mjs).
# Fails loudly when node or npm is missing: the test it feeds must never pass by being skipped.
# Usage: gguf_reference_fixture.sh NPM_DIR
set -euo pipefail

npm_dir=$1
package=@huggingface/gguf version=0.4.6
package_dir=$npm_dir/node_modules/$package

fail() {
  echo "GGUF reference fixture: $*" >&2
  exit 1
}

command -v node >/dev/null 2>&1 ||
  fail "node is not installed; the GGUF reference test needs Node.js and npm (scripts/setup installs them)"
installed=$(node -p "require('$package_dir/package.json').version" 2>/dev/null || true)
if [[ $installed == "$version" ]]; then
  echo "$package@$version is installed in $npm_dir"
  exit 0
fi
command -v npm >/dev/null 2>&1 ||
  fail "npm is not installed; it is needed once to fetch $package@$version (scripts/setup installs it)"
mkdir -p "$npm_dir"
echo "installing $package@$version into $npm_dir"
npm install --prefix "$npm_dir" --no-audit --no-fund --no-save "$package@$version" >&2 ||
  fail "npm install $package@$version failed (is the npm registry reachable?)"
