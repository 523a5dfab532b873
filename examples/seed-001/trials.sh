#!/usr/bin/env bash
# Seed 001's plan written by the real model, N times: each trial is `terminus orchestrate
# --generate` on generate.json (the planner is planner.toml's model, the agents are scripted),
# kept as trials/trial-N.json (the plan's outcome and its whole `generation`: every reply,
# every rejection). `cargo test -p terminus-orchestrator --test generate recorded` replays
# them and checks the table in docs/plans.md.
# usage: examples/seed-001/trials.sh [N] (llama-server on 127.0.0.1:8089; docs/plans.md)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
n=${1:-5}
bin=${TERMINUS:-$here/../../target/debug/terminus}
task="Write a market report for a bakery chain that wants to grow."
mkdir -p "$here/trials"
for i in $(seq 1 "$n"); do
  start=$(date +%s)
  out=$("$bin" orchestrate --generate "$here/generate.json" --task "$task" --json 2>"$here/trials/trial-$i.err" | tail -n 1) || true
  took=$(( $(date +%s) - start ))
  TASK="$task" OUT="$out" TOOK="$took" TRIAL="$i" python3 - >"$here/trials/trial-$i.json" <<'PY'
import json, os
report = json.loads(os.environ["OUT"])
print(json.dumps({
    "trial": int(os.environ["TRIAL"]),
    "task": os.environ["TASK"],
    "seconds": int(os.environ["TOOK"]),
    "outcome": report["outcome"],
    "reason": report["reason"],
    "agents": {a["id"]: a["status"] for a in report["agents"]},
    "generation": report["generation"],
}, indent=2))
PY
  rm -f "$here/trials/trial-$i.err"
  echo "trial $i: $(python3 -c 'import json,sys; g=json.load(open(sys.argv[1])); print(g["generation"]["source"], g["generation"]["attempts"], g["reason"])' "$here/trials/trial-$i.json") (${took} s)"
done
