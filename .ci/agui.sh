#!/usr/bin/env bash
# Installs what the AG-UI tests of `terminus serve` (adapters/cli/tests/serve.rs) drive it with,
# pinned, where they find it:
#   tests/agui/node_modules   the official client `@ag-ui/client` and `@ag-ui/core` (its event
#                             schemas), and `playwright-core` (which downloads no browser), from
#                             tests/agui/package-lock.json with `npm ci`
#   $TERMINUS_PEERS/agui-python  a virtualenv with the AG-UI Python SDK, `ag-ui-protocol`
#                             (pins in tests/agui/requirements.txt)
#   /usr/bin/chromium         Debian's chromium for the page's browser test, if absent
# Idempotent: each part is skipped when its pins are installed already.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
dir=${TERMINUS_PEERS:-$root/target/peers}
mkdir -p "$dir"
exec 9>"$dir/agui.lock"
flock 9

cd "$root/tests/agui"
if [ -f node_modules/.package-lock.json ] && cmp -s package-lock.json node_modules/.pins; then
  echo "agui: npm packages already installed in tests/agui/node_modules"
else
  echo "agui: npm ci (tests/agui/package-lock.json)"
  npm ci --prefer-offline --no-audit --no-fund --loglevel=error
  cp package-lock.json node_modules/.pins
fi

venv="$dir/agui-python"
python_version=$(python3 -c 'import sys; print("%d.%d" % sys.version_info[:2])')
want="python $python_version: $(grep -Ev '^[[:space:]]*(#|$)' requirements.txt | tr -s '[:space:]' ' ')"
if [ -x "$venv/bin/python" ] && [ "$(cat "$venv/.pins" 2>/dev/null)" = "$want" ]; then
  echo "agui: ag-ui-protocol already installed in $venv"
else
  echo "agui: creating $venv"
  rm -rf "$venv"
  python3 -m venv "$venv"
  "$venv/bin/python" -m pip install --quiet --disable-pip-version-check --no-input -r requirements.txt
  "$venv/bin/python" -c 'import ag_ui.core'
  printf '%s\n' "$want" > "$venv/.pins"
fi

if [ -x /usr/bin/chromium ]; then
  echo "agui: $(/usr/bin/chromium --version 2>/dev/null || echo chromium) is installed"
else
  echo "agui: apt-get install chromium"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null
fi
