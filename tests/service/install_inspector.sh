#!/usr/bin/env bash
# Install the pinned MCP Inspector CLI used by tests/service/test_inspector.py.
#
# Usage: tests/service/install_inspector.sh [PREFIX]
#   PREFIX defaults to $PANEWARDEN_INSPECTOR_PREFIX, else .npm-cli/inspector (relative
#   to the cwd; .npm-cli/ is gitignored). A prefix of its own keeps this install from
#   touching the pinned coding CLIs that tests/realcli/install.sh puts in .npm-cli.
#
# Idempotent: a prefix that already holds the pinned version is left alone, so a CI
# run on a machine that ran it before costs one `node` call.
# The inspector declares node >=22 but its CLI mode works on Node 20; npm only warns.
set -euo pipefail

pin_pkg="@modelcontextprotocol/inspector"
pin_ver="2.12.0"
prefix="${1:-${PANEWARDEN_INSPECTOR_PREFIX:-.npm-cli/inspector}}"
mkdir -p "$prefix"
prefix="$(cd "$prefix" && pwd)"

installed_version() {
  local pj="$prefix/node_modules/$pin_pkg/package.json"
  [ -f "$pj" ] || return 0
  node -e 'process.stdout.write(require(process.argv[1]).version)' "$pj"
}

if [ "$(installed_version)" = "$pin_ver" ]; then
  echo "inspector: $pin_pkg@$pin_ver present in $prefix"
  exit 0
fi

echo "inspector: installing $pin_pkg@$pin_ver into $prefix"
start=$(date +%s)
npm install --prefix "$prefix" --no-audit --no-fund --save-exact "$pin_pkg@$pin_ver"
got="$(installed_version)"
if [ "$got" != "$pin_ver" ]; then
  echo "inspector: $pin_pkg is '$got', expected $pin_ver" >&2
  exit 1
fi
echo "inspector: done in $(( $(date +%s) - start )) s"
