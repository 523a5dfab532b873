#!/usr/bin/env bash
# The Python binding's tests: builds `terminus-kernel` from bindings/python into a cached
# virtualenv and runs its pytest suite.
#
# The virtualenv lives in $TERMINUS_PEERS/python (default <repo>/target/peers/python; made by
# .ci/python-venv.sh, which says when it is reused). The binding itself is reinstalled on every
# run (`pip install ./bindings/python`, the command a user runs; cargo's cache in target/ makes
# an unchanged build quick).
#
# The build profile is cargo's `dev` by default, so the binding reuses what `cargo test
# --workspace` compiled; TERMINUS_PY_PROFILE=release builds the wheel as a user gets it.
# The equivalence tests compare with the `terminus` binary of target/debug, built here if absent.
# Extra arguments go to pytest (`.ci/python.sh -k equivalence`).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
profile=${TERMINUS_PY_PROFILE:-dev}
# The cached virtualenv of the pinned tools: sets `venv`.
source "$root/.ci/python-venv.sh"
dir=$venv

# The build backend runs the venv's `maturin`.
export PATH="$dir/bin:$PATH" VIRTUAL_ENV="$dir"
echo "python: pip install ./bindings/python (cargo profile $profile)"
# No build isolation: the pinned maturin of the venv builds it, with no download.
MATURIN_PEP517_ARGS="--profile $profile" \
  "$dir/bin/python" -m pip install --quiet --disable-pip-version-check --no-build-isolation \
  --force-reinstall --no-deps "$root/bindings/python"

if [ -z "${TERMINUS_BIN:-}" ]; then
  cargo build --quiet -p terminus-cli
  export TERMINUS_BIN="$root/target/debug/terminus"
fi

cd "$root/bindings/python"
# -rs prints the reason of every skipped test.
"$dir/bin/python" -m pytest -q -rs -p no:cacheprovider "$@"
