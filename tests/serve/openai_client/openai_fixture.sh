#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# CTest fixture for the OpenAI client test: installs OpenAI's official Node.js client (npm
# `openai`, written by others) into the build tree, once. The test then points it at `tessel serve`.
# Fails loudly when node or npm is missing: the test it feeds must never pass by being skipped.
# Usage: openai_fixture.sh NPM_DIR
set -euo pipefail

npm_dir=$1
package=openai version=4.95.0

fixture_name="OpenAI client fixture"
source "$(dirname "${BASH_SOURCE[0]}")/../../io/npm_fixture.sh"
npm_fixture_install "$npm_dir" "$package" "$version"
echo "$package@$version is installed in $npm_dir"
