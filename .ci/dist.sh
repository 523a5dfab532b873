#!/usr/bin/env bash
# The bindings' release artifacts, and the proof that a user installs them without Rust.
#
# Builds into $TERMINUS_DIST (default <repo>/target/dist):
#   terminus_kernel-VERSION-cp310-abi3-manylinux_X_Y_x86_64.whl
#       `maturin build --release` with the pinned maturin (the venv of .ci/python-venv.sh): one
#       abi3 wheel for CPython >= 3.10, tagged with the lowest manylinux policy its symbols allow
#       (maturin's audit, which also refuses a wheel that needs a library it does not carry)
#   terminus-kernel-VERSION.tgz
#       `npm run build` (the pinned @napi-rs/cli, release) then `npm pack`: the JS wrappers, the
#       types and the prebuilt addon, with no install script (nothing is built at install)
# Both builds share one cargo target dir, one target triple (napi-rs always passes --target, so
# maturin is given the same) and one profile, so what the two bindings share (the kernel, the
# runtime, serde, tokio, ...) is compiled once. The profile is cargo's `release` without debug
# info and with symbols stripped (CARGO_PROFILE_RELEASE_DEBUG/STRIP): smaller artifacts, a
# shorter build, and the same settings for both builds.
#
# Then, in an environment without Rust (`env -i`; a PATH of links to python3, node, npm and sh
# only, where `cargo` and `rustc` are checked absent; HOME, CARGO_HOME and RUSTUP_HOME empty
# folders, npm's cache empty), it installs each artifact the way docs/install.md says (its
# commands, run as they are written: `pip install
# --no-index` into a new venv, `npm install --offline` into a new folder) and runs the README's
# examples against them (README.md's Python and TypeScript host loops, bindings/*/README.md's
# quick starts), extracted from the Markdown by .ci/snippet.py, checking what they print.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
dist=${TERMINUS_DIST:-$root/target/dist}
check=$root/target/dist-check

die() { echo "dist: $*" >&2; exit 1; }
now() { date +%s; }
took() { echo "dist: $1 took $(( $(now) - $2 )) s"; }

export CARGO_PROFILE_RELEASE_DEBUG=0 CARGO_PROFILE_RELEASE_STRIP=symbols
host=$(rustc -vV | sed -n 's/^host: //p')
[ -n "$host" ] || die "rustc -vV names no host triple"

# The crates both bindings build must have the same features in both, or the second build
# compiles them again (bindings/python/Cargo.toml says how they are kept in step).
# One line a crate: `name version|[features][features]...` (a crate built for the host and for
# the target may have two sets).
features() {
  cargo tree --quiet -p "$1" -e normal,build --target "$host" --prefix none -f '{p}|{f}' |
    sed -E 's/ \((proc-macro|\*|\/[^)]*)\)//g' | sort -u |
    awk -F'|' '{ sets[$1] = sets[$1] "[" $2 "]" } END { for (c in sets) print c "|" sets[c] }' | sort
}
differ=$(join -t '|' <(features terminus-python) <(features terminus-node) | awk -F'|' '$2 != $3')
[ -z "$differ" ] || die "crates of both bindings with other features in each (name|python|node):
$differ"

# The cached virtualenv of the pinned tools (maturin): sets `venv`.
source "$root/.ci/python-venv.sh"

rm -rf "$dist"
mkdir -p "$dist"

start=$(now)
echo "dist: maturin build --release --target $host"
"$venv/bin/maturin" build --quiet --release --target "$host" \
  --manifest-path "$root/bindings/python/Cargo.toml" --interpreter "$venv/bin/python" --out "$dist"
took "the wheel's release build" "$start"
wheels=("$dist"/*.whl)
[ "${#wheels[@]}" = 1 ] && [ -f "${wheels[0]}" ] || die "maturin made ${#wheels[@]} wheels in $dist, not one"
wheel=${wheels[0]}
case $(basename "$wheel") in
  terminus_kernel-*-cp310-abi3-manylinux_*.whl) ;;
  *) die "$(basename "$wheel") is not an abi3 manylinux wheel" ;;
esac
# No dependency: the wheel installs with --no-index.
python3 - "$wheel" <<'PY' || die "$(basename "$wheel") declares dependencies"
import sys, zipfile
wheel = zipfile.ZipFile(sys.argv[1])
[metadata] = [n for n in wheel.namelist() if n.endswith(".dist-info/METADATA")]
requires = [l for l in wheel.read(metadata).decode().splitlines()
            if l.startswith("Requires-Dist:") and "extra ==" not in l]
sys.exit(f"dist: {requires}" if requires else 0)
PY

start=$(now)
cd "$root/bindings/node"
# The pinned @napi-rs/cli (and TypeScript, for the check below): installed by .ci/node.sh's
# `npm ci`, or here.
[ -x node_modules/.bin/napi ] && [ -f node_modules/typescript/bin/tsc ] ||
  npm ci --prefer-offline --no-audit --no-fund --loglevel=error
echo "dist: npm run build (release, napi-rs)"
npm run --silent build
took "the addon's release build" "$start"
tgz=$dist/$(npm pack --silent --pack-destination "$dist")
[ -f "$tgz" ] || die "npm pack made no $tgz"
listing=$(tar -tzf "$tgz")
for file in package/package.json package/index.js package/index.mjs package/index.d.ts \
  package/ai.js package/langchain.js package/README.md; do
  grep -qx "$file" <<<"$listing" || die "$(basename "$tgz") lacks $file"
done
grep -qE '^package/terminus-kernel\.[a-z0-9]+-[a-z0-9]+(-[a-z]+)?\.node$' <<<"$listing" ||
  die "$(basename "$tgz") has no prebuilt addon (terminus-kernel.PLATFORM.node)"
! grep -qx package/binding.gyp <<<"$listing" || die "$(basename "$tgz") has a binding.gyp: npm would build it"
tar -xzOf "$tgz" package/package.json | node -e '
  const pkg = JSON.parse(require("fs").readFileSync(0, "utf8"));
  const hooks = ["preinstall", "install", "postinstall"].filter((s) => pkg.scripts && pkg.scripts[s]);
  if (hooks.length) { console.error(`dist: the package runs ${hooks} at install`); process.exit(1); }
  if (Object.keys(pkg.dependencies || {}).length) { console.error("dist: the package has dependencies"); process.exit(1); }'
cd "$root"

# The environment without Rust.
rm -rf "$check"
mkdir -p "$check"/{bin,home,cargo,rustup,npm-cache,tmp,python,node}
for tool in python3 node npm sh; do
  path=$(command -v "$tool") || die "$tool is not installed"
  # Not a shim that finds the interpreter through other tools (pyenv's): the interpreter itself.
  [ "$tool" = python3 ] && path=$(python3 -c 'import os, sys; print(os.path.realpath(sys.executable))')
  ln -s "$path" "$check/bin/$tool"
done
clean() {
  env -i PATH="$check/bin" HOME="$check/home" CARGO_HOME="$check/cargo" RUSTUP_HOME="$check/rustup" \
    TMPDIR="$check/tmp" LANG=C.UTF-8 PIP_CONFIG_FILE=/dev/null PIP_DISABLE_PIP_VERSION_CHECK=1 \
    npm_config_cache="$check/npm-cache" npm_config_userconfig="$check/home/.npmrc" \
    npm_config_update_notifier=false npm_config_audit=false npm_config_fund=false "$@"
}
clean sh -c '! command -v cargo && ! command -v rustc' >/dev/null || die "cargo or rustc is on the clean PATH"

# Runs FILE's ```LANG block containing TEXT in DIR with COMMAND (FILE's name for the block
# appended) and checks that its last line of output is WANT.
run_snippet() {
  local file=$1 lang=$2 text=$3 dir=$4 name=$5 want=$6
  shift 6
  python3 "$root/.ci/snippet.py" "$root/$file" "$lang" "$text" > "$dir/$name"
  local out
  out=$(cd "$dir" && clean "$@" "$name") || die "$file's $lang example ($name) failed: $out"
  [ "$(tail -n 1 <<<"$out")" = "$want" ] ||
    die "$file's $lang example ($name) printed '$(tail -n 1 <<<"$out")', not '$want'"
  echo "dist: $file, $name: $want"
}

# The READMEs name the artifacts this build made.
for pair in "README.md:$(basename "$wheel")" "README.md:$(basename "$tgz")" \
  "docs/install.md:target/dist/$(basename "$wheel")" "docs/install.md:target/dist/$(basename "$tgz")" \
  "docs/install.md:.venv/bin/pip install --no-index $(basename "$wheel")" \
  "docs/install.md:npm install --offline ./$(basename "$tgz")" \
  "bindings/python/README.md:pip install --no-index $(basename "$wheel")" \
  "bindings/node/README.md:npm install --offline ./$(basename "$tgz")"; do
  grep -qF -- "${pair#*:}" "$root/${pair%%:*}" || die "${pair%%:*} does not say \`${pair#*:}\`"
done

scenario=$root/spec/scenarios/architect-stops-early.json
cp "$wheel" "$scenario" "$check/python/"
cp "$tgz" "$scenario" "$check/node/"
start=$(now)
run_snippet docs/install.md sh "pip install" "$check/python" install.sh "complete verified" sh -e
took "the wheel's install and run (no Rust)" "$start"
run_snippet README.md python "from terminus_kernel import Machine" "$check/python" host_loop.py \
  "complete explicit nudges: 1" .venv/bin/python
run_snippet bindings/python/README.md python "from terminus_kernel import Machine" "$check/python" \
  quick_start.py "complete answered" .venv/bin/python

start=$(now)
run_snippet docs/install.md sh "npm install" "$check/node" install.sh "complete verified" sh -e
took "the package's install and run (no Rust)" "$start"
# The TypeScript example, type-checked against the installed package's types (`tsc --strict`,
# as test/types.test.js does) and run as the JavaScript tsc makes of it. The compiler is the
# pinned one of bindings/node and runs outside the clean environment: it is the user's tool, not
# the package's.
python3 "$root/.ci/snippet.py" README.md ts "import { Machine } from 'terminus-kernel'" > "$check/node/host_loop.ts"
tsc="$root/bindings/node/node_modules/typescript/bin/tsc"
(cd "$check/node" && node "$tsc" --strict --module nodenext --moduleResolution nodenext --target es2022 \
  --skipLibCheck host_loop.ts) || die "README.md's TypeScript example does not type-check against the package"
out=$(cd "$check/node" && clean node host_loop.js) || die "README.md's TypeScript example failed: $out"
[ "$(tail -n 1 <<<"$out")" = "complete explicit nudges: 1" ] ||
  die "README.md's TypeScript example printed '$(tail -n 1 <<<"$out")'"
echo "dist: README.md, host_loop.ts: complete explicit nudges: 1"
run_snippet bindings/node/README.md js "new Machine({ max_steps: 50 })" "$check/node" quick_start.cjs \
  "complete answered" node

for artifact in "$wheel" "$tgz"; do
  echo "dist: $(basename "$artifact"): $(du -k "$artifact" | cut -f1) KiB"
done
echo "dist: installed and run without Rust"
