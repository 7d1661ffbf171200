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

fixture_name="GGUF reference fixture"
source "$(dirname "${BASH_SOURCE[0]}")/npm_fixture.sh"
npm_fixture_install "$npm_dir" "$package" "$version"
echo "$package@$version is installed in $npm_dir"
