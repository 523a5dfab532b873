# Sourced by .ci/python.sh and .ci/dist.sh: makes (or reuses) the cached virtualenv of the Python
# binding's pinned tools, $TERMINUS_PEERS/python (default <repo>/target/peers/python), and sets
# `venv` to its path. Its stamp records the interpreter's version and every pin of
# bindings/python/requirements-*.txt; a venv with the same stamp is reused, any change of a pin
# (or of the interpreter) rebuilds it from scratch. Needs `root` (the repository) set.
venv=${TERMINUS_PEERS:-$root/target/peers}/python
python=${PYTHON:-python3}

version=$("$python" -c 'import sys; print("%d.%d.%d" % sys.version_info[:3])')
want="python $version
$(cat "$root"/bindings/python/requirements-*.txt | grep -Ev '^[[:space:]]*(#|$)' | sort)"
mkdir -p "$(dirname "$venv")"
exec 9>"$venv.lock"
flock 9
if [ ! -f "$venv/.pins" ] || [ "$(cat "$venv/.pins")" != "$want" ]; then
  echo "python: creating $venv (python $version)"
  rm -rf "$venv"
  "$python" -m venv "$venv"
  "$venv/bin/python" -m pip install --quiet --disable-pip-version-check --upgrade pip==25.3
  for requirements in "$root"/bindings/python/requirements-*.txt; do
    "$venv/bin/python" -m pip install --quiet --disable-pip-version-check -r "$requirements"
  done
  printf '%s\n' "$want" > "$venv/.pins"
else
  echo "python: reusing $venv"
fi
