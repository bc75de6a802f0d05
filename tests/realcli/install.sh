#!/usr/bin/env bash
# Install the pinned coding CLIs used by the real-CLI recordings and tests.
#
# Usage: tests/realcli/install.sh [PREFIX]   (default: .npm-cli, relative to the cwd)
#
# Idempotent: a package already present at its pinned version is not reinstalled,
# so a CI run that finds the prefix from an earlier run costs only a few `node` calls.
# The pins live here and in versions.json beside this script; keep them in step.
set -euo pipefail

prefix="${1:-.npm-cli}"
mkdir -p "$prefix"

# package@version, one per line. Claude Code must be pinned: on Node 20 npm would
# otherwise resolve an older release whose screens differ from the recordings.
pins=(
  "opencode-ai@1.18.33"
  "@anthropic-ai/claude-code@2.1.332"
  "@openai/codex@0.171.0"
  "@google/gemini-cli@0.61.0"
  "@qwen-code/qwen-code@0.24.4"
  # ACP adapters (tests/realcli/test_acp_real.py): Claude Code and Codex over ACP.
  "@zed-industries/claude-code-acp@0.16.2"
  "@zed-industries/codex-acp@0.16.0"
)

installed_version() {
  # Prints the installed version of package $1 under the prefix, or nothing.
  local pj="$prefix/node_modules/$1/package.json"
  [ -f "$pj" ] || return 0
  node -e 'process.stdout.write(require(process.argv[1]).version)' "$(cd "$(dirname "$pj")" && pwd)/package.json"
}

missing=()
for pin in "${pins[@]}"; do
  pkg="${pin%@*}"
  ver="${pin##*@}"
  if [ "$(installed_version "$pkg")" != "$ver" ]; then
    missing+=("$pin")
  fi
done

if [ "${#missing[@]}" -eq 0 ]; then
  echo "realcli: all pinned CLIs present in $prefix"
  exit 0
fi

echo "realcli: installing ${missing[*]} into $prefix"
# One npm call for all missing pins; --save-exact keeps the prefix's package.json pinned
# so a later install of a single package does not float the others.
npm install --prefix "$prefix" --no-audit --no-fund --save-exact "${missing[@]}"

for pin in "${pins[@]}"; do
  pkg="${pin%@*}"
  ver="${pin##*@}"
  got="$(installed_version "$pkg")"
  if [ "$got" != "$ver" ]; then
    echo "realcli: $pkg is '$got', expected $ver" >&2
    exit 1
  fi
done
echo "realcli: done"
