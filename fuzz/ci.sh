#!/usr/bin/env bash
# A short bounded fuzz campaign for CI: each target runs for FUZZ_SECONDS (default 25) on stable
# Rust without a sanitizer, starting from a copy of the committed seeds (the repository is not
# modified). Any crash fails the script; libFuzzer leaves the input in fuzz/artifacts/<target>/.
set -euo pipefail
cd "$(dirname "$0")"

seconds="${FUZZ_SECONDS:-25}"
if ! cargo fuzz --version >/dev/null 2>&1; then
  echo "installing cargo-fuzz (about 45 s)"
  cargo install cargo-fuzz --locked
fi

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
for target in transitions restore; do
  mkdir -p "$work/$target"
  cp seeds/"$target"/* "$work/$target/"
  echo "--- fuzzing $target for ${seconds}s"
  status=0
  cargo fuzz run --sanitizer none "$target" "$work/$target" -- \
    -max_total_time="$seconds" -print_final_stats=1 >"$work/$target.log" 2>&1 || status=$?
  grep -E 'Done|stat::number_of_executed_units|stat::average_exec_per_sec' "$work/$target.log" || true
  if [ "$status" -ne 0 ]; then
    tail -40 "$work/$target.log" >&2
    echo "fuzz target $target failed (exit $status); see fuzz/artifacts/$target/" >&2
    exit 1
  fi
done
