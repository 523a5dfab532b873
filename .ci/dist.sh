#!/usr/bin/env bash
# The bindings' release artifacts, and the proof that a user installs them without Rust.
#
# Builds into $TERMINUS_DIST (default <repo>/target/dist):
#   terminus_kernel-VERSION-cp310-abi3-manylinux2014_x86_64.manylinux_2_17_x86_64.whl
#       `maturin build --release --zig --compatibility manylinux2014` with the pinned maturin and
#       zig (the venv of .ci/python-venv.sh): one abi3 wheel for CPython >= 3.10 on x86-64 Linux
#       with glibc >= 2.17 (zig links against glibc 2.17's symbols whatever the build machine's
#       glibc; maturin's audit refuses a wheel whose symbols exceed the policy), then
#       `auditwheel show` must report manylinux_2_17
#   terminus_kernel-VERSION.tar.gz
#       `maturin sdist`: the source distribution (the binding and the crates it builds from), which
#       `pip install` builds where Rust is present; checked so below
#   terminus-kernel-VERSION.tgz
#       `npm run build -- --target x86_64-unknown-linux-gnu.2.17 -x` (the pinned @napi-rs/cli,
#       release, linked by cargo-zigbuild against glibc 2.17) then `npm pack`: the JS wrappers,
#       the types and the prebuilt addon under napi-rs's platform name
#       (terminus-kernel.linux-x64-gnu.node), with no install script (nothing is built at install)
# Each native file's highest GLIBC symbol version is printed and must be at most 2.17
# (.ci/glibc_floor.py).
# Both builds share one cargo target dir, one target triple and one profile, so what the two
# bindings share (the kernel, the runtime, serde, tokio, ...) is compiled once where their
# linkers' settings agree. The profile is cargo's `release` without debug info and with symbols
# stripped (CARGO_PROFILE_RELEASE_DEBUG/STRIP): smaller artifacts, a shorter build, and the same
# settings for both builds.
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

# The cached virtualenv of the pinned tools (maturin, zig, cargo-zigbuild, auditwheel): sets
# `venv`. On the PATH first, so that maturin and cargo-zigbuild find zig (`python3 -m ziglang`)
# and napi-rs finds cargo-zigbuild.
source "$root/.ci/python-venv.sh"
export PATH="$venv/bin:$PATH"
floor=2.17

rm -rf "$dist"
mkdir -p "$dist"

start=$(now)
echo "dist: maturin build --release --zig --compatibility manylinux2014 --target $host"
"$venv/bin/maturin" build --quiet --release --zig --compatibility manylinux2014 --target "$host" \
  --manifest-path "$root/bindings/python/Cargo.toml" --interpreter "$venv/bin/python" --out "$dist"
took "the wheel's release build" "$start"
wheels=("$dist"/*.whl)
[ "${#wheels[@]}" = 1 ] && [ -f "${wheels[0]}" ] || die "maturin made ${#wheels[@]} wheels in $dist, not one"
wheel=${wheels[0]}
case $(basename "$wheel") in
  terminus_kernel-*-cp310-abi3-manylinux2014_x86_64.manylinux_2_17_x86_64.whl) ;;
  *) die "$(basename "$wheel") is not an abi3 manylinux2014 wheel" ;;
esac
audit=$("$venv/bin/auditwheel" show "$wheel") || die "auditwheel show failed on $(basename "$wheel")"
echo "$audit" | sed 's/^/dist: auditwheel: /'
tr -s ' \n' ' ' <<<"$audit" | grep -q 'consistent with the following platform tag: "manylinux_2_17_x86_64"' ||
  die "auditwheel does not find $(basename "$wheel") consistent with manylinux_2_17"
unpacked=$dist/.wheel
rm -rf "$unpacked"
"$venv/bin/python" -m zipfile -e "$wheel" "$unpacked"
"$venv/bin/python" "$root/.ci/glibc_floor.py" "$floor" "$unpacked"/terminus_kernel/*.so | sed 's|^.*/terminus_kernel/|dist: glibc floor: wheel terminus_kernel/|' ||
  die "the wheel's native library needs a glibc above $floor"
rm -rf "$unpacked"
# No dependency: the wheel installs with --no-index.
python3 - "$wheel" <<'PY' || die "$(basename "$wheel") declares dependencies"
import sys, zipfile
wheel = zipfile.ZipFile(sys.argv[1])
[metadata] = [n for n in wheel.namelist() if n.endswith(".dist-info/METADATA")]
requires = [l for l in wheel.read(metadata).decode().splitlines()
            if l.startswith("Requires-Dist:") and "extra ==" not in l]
sys.exit(f"dist: {requires}" if requires else 0)
PY

# The source distribution, built with `pip install` where Rust is present (the pinned maturin of
# the tools' venv, no index), into a folder of its own, and imported from there. What it proves
# is that the sdist holds every file the build needs: it is built in a target dir of its own (in
# the workspace's, cargo would take the workspace's artifacts for the sdist's crates, whose
# unpacked files are older) and in cargo's `dev` profile, the shorter build.
start=$(now)
"$venv/bin/maturin" sdist --manifest-path "$root/bindings/python/Cargo.toml" --out "$dist" 2>&1 |
  grep -v -e 'manifest has no documentation' -e '^ *|$' -e 'package-metadata for more info' -e '^From `cargo package' || true
sdists=("$dist"/terminus_kernel-*.tar.gz)
[ "${#sdists[@]}" = 1 ] && [ -f "${sdists[0]}" ] || die "maturin sdist made ${#sdists[@]} sdists in $dist, not one"
sdist=${sdists[0]}
built=$root/target/sdist-install
rm -rf "$built"
CARGO_TARGET_DIR=$root/target/sdist MATURIN_PEP517_ARGS="--profile dev" "$venv/bin/pip" install --quiet --no-cache-dir --no-index --no-build-isolation \
  --target "$built" "$sdist" || die "$(basename "$sdist") does not build with pip install"
out=$(PYTHONPATH=$built "$venv/bin/python" -c 'from terminus_kernel import run_scenario
r = run_scenario("'"$root"'/spec/scenarios/architect-stops-early.json"); print(r["outcome"], r["reason"])') ||
  die "the package built from $(basename "$sdist") does not run: $out"
[ "$out" = "complete verified" ] || die "the package built from $(basename "$sdist") printed '$out'"
echo "dist: $(basename "$sdist"): pip install builds it (Rust present); run_scenario: $out"
took "the sdist's build and run" "$start"

start=$(now)
cd "$root/bindings/node"
# The pinned @napi-rs/cli (and TypeScript, for the check below): installed by .ci/node.sh's
# `npm ci`, or here.
[ -x node_modules/.bin/napi ] && [ -f node_modules/typescript/bin/tsc ] ||
  npm ci --prefer-offline --no-audit --no-fund --loglevel=error
echo "dist: npm run build -- --target $host.2.17 -x (release, napi-rs, cargo-zigbuild)"
npm run --silent build -- --target "$host.2.17" -x
took "the addon's release build" "$start"
addon=terminus-kernel.linux-x64-gnu.node
[ -f "$addon" ] || die "napi-rs made no $addon"
"$venv/bin/python" "$root/.ci/glibc_floor.py" "$floor" "$addon" | sed 's/^/dist: glibc floor: addon /' ||
  die "the addon needs a glibc above $floor"
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

for artifact in "$wheel" "$sdist" "$tgz"; do
  echo "dist: $(basename "$artifact"): $(du -k "$artifact" | cut -f1) KiB"
done
echo "dist: installed and run without Rust"
