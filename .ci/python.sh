#!/usr/bin/env bash
# The Python binding's tests: builds `terminus-kernel` from bindings/python into a cached
# virtualenv and runs its pytest suite.
#
# The virtualenv lives in $TERMINUS_PEERS/python (default <repo>/target/peers/python). Its stamp
# records the interpreter's version and every pin of bindings/python/requirements-*.txt; a venv
# with the same stamp is reused, any change of a pin (or of the interpreter) rebuilds it from
# scratch. The binding itself is reinstalled on every run (`pip install ./bindings/python`, the
# command a user runs; cargo's cache in target/ makes an unchanged build quick).
#
# The build profile is cargo's `dev` by default, so the binding reuses what `cargo test
# --workspace` compiled; TERMINUS_PY_PROFILE=release builds the wheel as a user gets it.
# The equivalence tests compare with the `terminus` binary of target/debug, built here if absent.
# Extra arguments go to pytest (`.ci/python.sh -k equivalence`).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
dir=${TERMINUS_PEERS:-$root/target/peers}/python
profile=${TERMINUS_PY_PROFILE:-dev}
python=${PYTHON:-python3}

version=$("$python" -c 'import sys; print("%d.%d.%d" % sys.version_info[:3])')
want="python $version
$(cat "$root"/bindings/python/requirements-*.txt | grep -Ev '^[[:space:]]*(#|$)' | sort)"
mkdir -p "$(dirname "$dir")"
exec 9>"$dir.lock"
flock 9
if [ ! -f "$dir/.pins" ] || [ "$(cat "$dir/.pins")" != "$want" ]; then
  echo "python: creating $dir (python $version)"
  rm -rf "$dir"
  "$python" -m venv "$dir"
  "$dir/bin/python" -m pip install --quiet --disable-pip-version-check --upgrade pip==25.3
  for requirements in "$root"/bindings/python/requirements-*.txt; do
    "$dir/bin/python" -m pip install --quiet --disable-pip-version-check -r "$requirements"
  done
  printf '%s\n' "$want" > "$dir/.pins"
else
  echo "python: reusing $dir"
fi

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
