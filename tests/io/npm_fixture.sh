# SPDX-License-Identifier: Apache-2.0
# Sourced by the CTest fixtures that install a reference implementation from npm into the build
# tree (tokenizer_fixture.sh, tokenizer_json_fixture.sh, gguf_reference_fixture.sh). They fail
# loudly when node or npm is missing: the tests they feed must never pass by being skipped.

# fail MESSAGE: the fixture's name (fixture_name) and the message on stderr, exit 1.
fail() {
  echo "$fixture_name: $*" >&2
  exit 1
}

# npm_fixture_install NPM_DIR PACKAGE VERSION: PACKAGE@VERSION in NPM_DIR/node_modules, installed
# once (a second call finds it and does nothing).
npm_fixture_install() {
  local npm_dir=$1 package=$2 version=$3 installed
  command -v node >/dev/null 2>&1 ||
    fail "node is not installed; these tests need Node.js and npm (scripts/setup installs them)"
  installed=$(node -p "require('$npm_dir/node_modules/$package/package.json').version" \
    2>/dev/null || true)
  [[ $installed == "$version" ]] && return 0
  command -v npm >/dev/null 2>&1 ||
    fail "npm is not installed; it is needed once to fetch $package@$version (scripts/setup installs it)"
  mkdir -p "$npm_dir"
  echo "installing $package@$version into $npm_dir"
  npm install --prefix "$npm_dir" --no-audit --no-fund --no-save "$package@$version" >&2 ||
    fail "npm install $package@$version failed (is the npm registry reachable?)"
}
