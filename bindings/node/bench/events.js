'use strict';
// The cost of one event through Node against the same events in Rust (a benchmark, not a test).
//
// The sequence: a model turn calling `read_file` on file `i`, then its result, repeated (two
// events a cycle, every turn different so the repeat detector never stops the run). Each event
// is `machine.handle(event)` followed by draining `machine.nextCommand()` until `null`, the loop
// a host runs. The event objects are built before the clock starts.
//
// Rust: `runtime/examples/host_events.rs`, the same sequence fed to the kernel's `Machine`
// directly and to `terminus_runtime::host::Host` (what the addon wraps), built and run here with
// `cargo run --release` unless `--no-rust`; `rust_host_json` is that `Host` reading each event
// from JSON text and writing each command as JSON text, the work the addon did in Rust before its
// fast path (it still does for the events the fast path does not take).
//
// Run from the repository root, with the addon built in release (`npm run build` in
// bindings/node):
//
//     node bindings/node/bench/events.js [--events 20000] [--samples 9] [--no-rust]
//
// Prints the median nanoseconds per event of each, from one run (wall clock; for Node also the
// process's CPU time, which other processes of a busy machine do not inflate).

const { execFileSync } = require('node:child_process');
const { join } = require('node:path');
const { Machine } = require('..');

const REPO = join(__dirname, '..', '..', '..');
const POLICY = { max_steps: 1_000_000_000, max_model_calls: 1_000_000_000 };

function events(n) {
  const out = [];
  for (let i = 0; i < n / 2; i++) {
    const id = `c${i}`;
    out.push({ model_turn: { tool_calls: [{ id, name: 'read_file', arguments: { path: `f${i}` } }] } });
    out.push({ tool_results: [{ call_id: id, name: 'read_file', ok: `content ${i}` }] });
  }
  return out;
}

/** Nanoseconds per event: wall clock, and the process's CPU time. */
function nodeSample(n) {
  const sequence = events(n);
  const machine = new Machine(POLICY);
  while (machine.nextCommand() !== null);
  const cpu = process.cpuUsage();
  const wall = process.hrtime.bigint();
  for (const event of sequence) {
    machine.handle(event);
    while (machine.nextCommand() !== null);
  }
  const wallNs = Number(process.hrtime.bigint() - wall);
  const used = process.cpuUsage(cpu);
  if (machine.stats.steps !== n) throw new Error(`${machine.stats.steps} steps for ${n} events`);
  return [wallNs / n, ((used.user + used.system) * 1000) / n];
}

function median(xs) {
  const sorted = [...xs].sort((a, b) => a - b);
  return sorted[Math.floor(sorted.length / 2)];
}

function main() {
  const args = process.argv.slice(2);
  const value = (flag, fallback) => {
    const i = args.indexOf(flag);
    return i >= 0 ? Number(args[i + 1]) : fallback;
  };
  const n = value('--events', 20_000);
  const samples = value('--samples', 9);
  nodeSample(Math.min(n, 2000)); // warm-up: V8 compiles the hot loop
  const runs = Array.from({ length: samples }, () => nodeSample(n));
  const result = {
    events: n,
    samples,
    node_ns_per_event: median(runs.map(([w]) => w)),
    node_cpu_ns_per_event: median(runs.map(([, c]) => c)),
  };
  if (!args.includes('--no-rust')) {
    const out = execFileSync(
      'cargo',
      ['run', '--quiet', '--release', '-p', 'terminus-runtime', '--example', 'host_events', '--', String(n), String(samples)],
      { cwd: REPO, encoding: 'utf8' },
    );
    const lines = out.trim().split('\n');
    const rust = JSON.parse(lines[lines.length - 1]);
    result.rust_kernel_ns_per_event = rust.kernel_ns_per_event;
    result.rust_host_ns_per_event = rust.host_ns_per_event;
    // The same Host with JSON text in and out, as the addon's JSON way reads and writes it.
    result.rust_host_json_ns_per_event = rust.host_json_ns_per_event;
  }
  console.log(JSON.stringify(result));
  for (const [key, v] of Object.entries(result)) {
    if (key.endsWith('_ns_per_event')) {
      console.log(`  ${key.slice(0, -13).padEnd(12)} ${(v / 1000).toFixed(3).padStart(8)} us per event (median of ${samples})`);
    }
  }
}

main();
