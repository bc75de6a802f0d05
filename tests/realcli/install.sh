#!/usr/bin/env bash
# Install the pinned coding CLIs used by the real-CLI recordings and tests.
#
# Usage: tests/realcli/install.sh [PREFIX]   (default: .npm-cli, relative to the cwd)
#
# npm packages go to PREFIX/node_modules; Aider (PyPI `aider-chat`) to its own venv,
# PREFIX/aider-venv, never into the project's environment (its pinned dependencies would
# fight ours). Set REALCLI_SKIP_AIDER=1 to leave Aider out.
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
  # 7.8.1 does not install: its platform package @kilocode/cli-linux-x64@7.8.1 is missing.
  "@kilocode/cli@7.7.7"
  "@mariozechner/pi-coding-agent@0.73.1"
)
aider_pin="0.86.2"

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

aider_version() {
  # Prints the version of aider-chat in the prefix's Aider venv, or nothing.
  local py="$prefix/aider-venv/bin/python"
  [ -x "$py" ] || return 0
  "$py" -c 'import importlib.metadata as m; print(m.version("aider-chat"), end="")' 2>/dev/null || true
}

if [ "${REALCLI_SKIP_AIDER:-0}" != "1" ] && [ "$(aider_version)" != "$aider_pin" ]; then
  # Python 3.10-3.12 (aider-chat's range); the venv is made once and reused.
  py="${REALCLI_AIDER_PYTHON:-python3}"
  echo "realcli: installing aider-chat==$aider_pin into $prefix/aider-venv"
  [ -x "$prefix/aider-venv/bin/python" ] || "$py" -m venv "$prefix/aider-venv"
  "$prefix/aider-venv/bin/python" -m pip install --quiet --disable-pip-version-check \
    "aider-chat==$aider_pin"
  if [ "$(aider_version)" != "$aider_pin" ]; then
    echo "realcli: aider-chat is '$(aider_version)', expected $aider_pin" >&2
    exit 1
  fi
fi

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
