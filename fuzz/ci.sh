#!/usr/bin/env bash
# A bounded fuzz campaign for CI: each target runs for FUZZ_SECONDS (default 25) on stable Rust
# without a sanitizer, starting from a copy of the committed seeds, so the repository is not
# modified. Any crash, panic or hang (an input slower than 10 s) fails the script; libFuzzer
# leaves the input in fuzz/artifacts/<target>/ (ignored by git; upload it from CI).
# Works from any directory and on a fresh clone: the first build takes about a minute.
set -euo pipefail
fuzz_dir="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
seconds="${FUZZ_SECONDS:-25}"

if ! cargo fuzz --version >/dev/null 2>&1; then
  echo "--- installing cargo-fuzz"
  cargo install cargo-fuzz --locked
fi

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

echo "--- building the fuzz targets"
cargo fuzz build --fuzz-dir "$fuzz_dir" --sanitizer none

for target in transitions restore textcall host_session; do
  mkdir -p "$work/corpus/$target"
  cp "$fuzz_dir/seeds/$target/"* "$work/corpus/$target/"
  echo "--- fuzzing $target for ${seconds}s from $(ls "$work/corpus/$target" | wc -l) seeds"
  status=0
  # Run from the fuzz directory so that crash artifacts land in fuzz/artifacts/<target>/.
  (cd "$fuzz_dir" && cargo fuzz run --fuzz-dir "$fuzz_dir" --sanitizer none "$target" \
    "$work/corpus/$target" -- -max_total_time="$seconds" -timeout=10 -print_final_stats=1) \
    >"$work/$target.log" 2>&1 || status=$?
  grep -E 'stat::number_of_executed_units|stat::average_exec_per_sec' "$work/$target.log" || true
  if [ "$status" -ne 0 ]; then
    grep -E -A3 "panicked at|ERROR: libFuzzer" "$work/$target.log" >&2 || true
    tail -30 "$work/$target.log" >&2
    echo "fuzz target $target failed (exit $status): see $fuzz_dir/artifacts/$target/" >&2
    exit 1
  fi
done
echo "--- no crash"
