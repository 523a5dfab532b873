'use strict';
// The cost of `terminusMiddleware` (terminus-kernel/langchain) per agent step: the same LangChain
// JS `createAgent` run with and without it (a benchmark, not a test; the counterpart of
// bindings/python/bench/middleware.py).
//
// The run: a scripted chat model that answers at once (the harshest comparison there is: a real
// model call takes hundreds of milliseconds, and the middleware's cost per step is the same
// whatever the model) on a chain of `--turns` tool turns, each calling `read_file` on a different
// path of an in-memory repository, then a final text answer; so every variant takes the same path:
// the same model calls, the same tool executions, the same messages (checked before timing).
// Four variants run, alternating, in one process after a warm-up:
//
// - `without`: no middleware;
// - `no-op hooks`: a `createMiddleware` with the hooks of `terminusMiddleware` (`beforeAgent`,
//   `wrapModelCall`, `afterModel` with `canJumpTo: ['model']`, `wrapToolCall`, `afterAgent`)
//   doing nothing: what LangGraph charges for hooks as such (each `before*`/`after*` hook is a
//   graph node of its own: the `*Agent` ones run once, `afterModel` once a model step);
// - `built-ins`: LangChain JS's own `modelCallLimitMiddleware` + `toolCallLimitMiddleware`
//   (run limits the run never reaches), the bar to meet;
// - `terminus`: the middleware, the kernel (the native addon) and its snapshot in the state.
//
// Medians of wall time and of the process's CPU time (`process.cpuUsage()`: user + system, every
// thread, V8's GC helpers and libuv's pool included) are reported; the overhead per agent step
// (one model turn or one tool turn, as the kernel counts steps: 2 * turns + 1 a run) is the
// difference of the medians over the run's steps. With `node --expose-gc`, a full collection runs
// before each timed run (outside the clock), so that no run pays for its predecessor's garbage.
//
// Needs the pinned npm packages of bindings/node (`npm ci` there, as .ci/node.sh does: `langchain`,
// `@langchain/core`, `zod` from its node_modules, where the tests find them too) and the native
// addon bindings/node/terminus-kernel.<platform>.node built in release for numbers that mean
// anything: `npm run build` in bindings/node (`napi build --platform --release --no-js --dts
// native.d.ts`: cargo's release profile, about 12 minutes on 2 cores from cold, 2 when
// target/release is warm), or `TERMINUS_NODE_PROFILE=release bash .ci/node.sh`, which also runs
// the tests. It replaces the debug addon of `npm run build:debug` / plain .ci/node.sh (and that
// replaces it back). No `terminus` binary is needed. From the repository root:
//
//     (cd bindings/node && npm ci && npm run build)
//     node --expose-gc bindings/node/bench/middleware.js [--turns 20] [--runs 21]
//
// Timings on a shared machine are noisy: look at the load (`uptime`) first. `--only VARIANT`
// runs that one variant `--runs` times and nothing else, for a profile of it alone:
//
//     node --cpu-prof --cpu-prof-dir=/tmp/prof bindings/node/bench/middleware.js \
//         --only terminus --turns 80 --runs 21

const { performance } = require('node:perf_hooks');
const { createAgent, createMiddleware, modelCallLimitMiddleware, toolCallLimitMiddleware } = require('langchain');
const { BaseChatModel } = require('@langchain/core/language_models/chat_models');
const { AIMessage } = require('@langchain/core/messages');
const { tool } = require('@langchain/core/tools');
const { z } = require('zod');
const { terminusMiddleware, REPORT_KEY } = require('../langchain.js');

const USAGE = 'usage: node [--expose-gc] bindings/node/bench/middleware.js [--turns N] [--runs R] [--only VARIANT]';
const TASK = 'Read every part of the repository, then write the plan.';
const WARMUP = 3; // runs of each variant before the clock starts

/**
 * A chat model replying from the script at once: the reply to a conversation is tool turn `n`,
 * `n` the number of assistant messages already in it (so one model serves run after run), the
 * final answer after `turns` of them. `calls` counts the calls made.
 */
class ScriptedChatModel extends BaseChatModel {
  constructor(turns) {
    super({});
    this.turns = turns;
    this.calls = 0;
  }

  _llmType() {
    return 'scripted';
  }

  bindTools() {
    return this; // the script decides which tools are called
  }

  async _generate(messages) {
    const n = messages.filter((m) => AIMessage.isInstance(m)).length;
    this.calls += 1;
    const usage = { input_tokens: 120, output_tokens: 20, total_tokens: 140 };
    const message =
      n < this.turns
        ? new AIMessage({
            content: '',
            tool_calls: [{ id: `call_${n}`, name: 'read_file', args: { file_path: `/src/part${n}.rs` }, type: 'tool_call' }],
            usage_metadata: usage,
            response_metadata: { finish_reason: 'tool_calls' },
          })
        : new AIMessage({ content: 'All parts read; the plan is ready.', usage_metadata: usage, response_metadata: { finish_reason: 'stop' } });
    return { generations: [{ text: message.content, message }] };
  }
}

/** `read_file` on an in-memory repository with a file for each tool turn; `reads` counts calls. */
function repository(turns) {
  const files = {};
  for (let i = 0; i < turns; i++) files[`/src/part${i}.rs`] = `// part ${i}\npub fn part_${i}() {}\n`;
  const counter = { reads: 0 };
  const readFile = tool(
    async ({ file_path }) => {
      counter.reads += 1;
      if (!(file_path in files)) throw new Error(`no such file: ${file_path}`);
      return files[file_path];
    },
    { name: 'read_file', description: 'Read a file.', schema: z.object({ file_path: z.string() }) },
  );
  return { tools: [readFile], counter };
}

/** The hooks of `terminusMiddleware`, doing nothing. */
const noOpHooks = () =>
  createMiddleware({
    name: 'NoOpHooks',
    beforeAgent: () => undefined,
    wrapModelCall: (request, handler) => handler(request),
    afterModel: { canJumpTo: ['model'], hook: () => undefined },
    wrapToolCall: (request, handler) => handler(request),
    afterAgent: () => undefined,
  });

/** Each variant's middleware, by name (made anew for each agent). */
function middleware(turns) {
  const calls = 2 * turns + 10;
  return {
    without: () => [],
    'no-op hooks': () => [noOpHooks()],
    'built-ins': () => [modelCallLimitMiddleware({ runLimit: calls }), toolCallLimitMiddleware({ runLimit: calls })],
    terminus: () => [terminusMiddleware({ max_steps: 2 * calls, max_model_calls: calls })],
  };
}

/** The agent of a variant, built once (as an application builds its agent once). */
function agent(turns, middlewares) {
  const model = new ScriptedChatModel(turns);
  const { tools, counter } = repository(turns);
  const graph = createAgent({ model, tools, middleware: middlewares, systemPrompt: 'You are a careful software architect.' });
  return { graph, model, counter };
}

/** One run: wall milliseconds, CPU milliseconds of the process (every thread), the final state. */
async function once({ graph }, turns) {
  if (global.gc) global.gc();
  // LangGraph's recursionLimit counts graph nodes (model, hooks, tools), its default 25 ends a
  // run of a few turns: raised far past the run, whose end is the model's answer.
  const config = { recursionLimit: 10 * turns + 100 };
  const input = { messages: [{ role: 'user', content: TASK }] };
  const cpu = process.cpuUsage();
  const start = performance.now();
  const state = await graph.invoke(input, config);
  const wall = performance.now() - start;
  const used = process.cpuUsage(cpu);
  return [wall, (used.user + used.system) / 1000, state];
}

function fail(message) {
  console.error(`middleware.js: ${message}`);
  process.exit(1);
}

/** A positive integer, or exit 2 with the flag's name. */
function positive(flag, text) {
  if (text === undefined || !/^[1-9][0-9]*$/.test(text) || !Number.isSafeInteger(Number(text))) {
    console.error(`middleware.js: ${flag} takes a positive integer, not ${JSON.stringify(text ?? '')}\n${USAGE}`);
    process.exit(2);
  }
  return Number(text);
}

/** `--turns`, `--runs`, `--only` (as `--flag value` or `--flag=value`); anything else exits 2. */
function parse(argv, variants) {
  const out = { turns: 20, runs: 21, only: null };
  for (let i = 0; i < argv.length; i++) {
    const [flag, inline] = argv[i].startsWith('--') && argv[i].includes('=') ? [argv[i].slice(0, argv[i].indexOf('=')), argv[i].slice(argv[i].indexOf('=') + 1)] : [argv[i], undefined];
    const value = () => (inline !== undefined ? inline : argv[++i]);
    if (flag === '--help' || flag === '-h') {
      console.log(USAGE);
      process.exit(0);
    } else if (flag === '--turns') out.turns = positive('--turns', value());
    else if (flag === '--runs') out.runs = positive('--runs', value());
    else if (flag === '--only') {
      out.only = value();
      if (!variants.includes(out.only)) {
        console.error(`middleware.js: --only takes one of ${variants.map((v) => JSON.stringify(v)).join(', ')}, not ${JSON.stringify(out.only ?? '')}`);
        process.exit(2);
      }
    } else {
      console.error(`middleware.js: unknown argument ${JSON.stringify(argv[i])}\n${USAGE}`);
      process.exit(2);
    }
  }
  return out;
}

function median(xs) {
  const sorted = [...xs].sort((a, b) => a - b);
  const mid = sorted.length >> 1;
  return sorted.length % 2 ? sorted[mid] : (sorted[mid - 1] + sorted[mid]) / 2;
}

async function main() {
  const makers = middleware(1);
  const args = parse(process.argv.slice(2), Object.keys(makers));
  const { turns, runs } = args;
  if (args.only !== null) {
    const subject = agent(turns, middleware(turns)[args.only]());
    for (let i = 0; i < runs; i++) await once(subject, turns);
    return;
  }

  const variants = Object.fromEntries(Object.entries(middleware(turns)).map(([name, make]) => [name, agent(turns, make())]));
  // The run under the middleware completes, and every variant takes its path: the same model
  // calls, tool executions and messages.
  const [, , state] = await once(variants.terminus, turns);
  const report = state[REPORT_KEY];
  const steps = 2 * turns + 1;
  if (!report || report.outcome !== 'complete' || report.steps !== steps || report.model_calls !== turns + 1 || report.tool_calls !== turns) {
    fail(`the run under the middleware did not complete as scripted (${steps} steps, ${turns + 1} model calls, ${turns} tool calls): ${JSON.stringify(report, null, 2)}`);
  }
  for (const [name, subject] of Object.entries(variants)) {
    subject.model.calls = subject.counter.reads = 0;
    const [, , other] = await once(subject, turns);
    const path = `${subject.model.calls} model calls, ${subject.counter.reads} tool calls, ${other.messages.length} messages`;
    const want = `${turns + 1} model calls, ${turns} tool calls, ${state.messages.length} messages`;
    if (path !== want) fail(`${name} took another path (${path}, not ${want}): the comparison would be unfair`);
  }
  for (let i = 0; i < WARMUP; i++) for (const subject of Object.values(variants)) await once(subject, turns);

  const wall = Object.fromEntries(Object.keys(variants).map((name) => [name, []]));
  const cpu = Object.fromEntries(Object.keys(variants).map((name) => [name, []]));
  for (let i = 0; i < runs; i++) {
    for (const [name, subject] of Object.entries(variants)) {
      const [ms, cpuMs] = await once(subject, turns);
      wall[name].push(ms);
      cpu[name].push(cpuMs);
    }
  }

  console.log(
    `run: ${turns} tool turns + 1 answer = ${report.model_calls} model calls, ${report.tool_calls} tool calls, ` +
      `${steps} kernel steps; ${runs} runs of each variant, alternating, after ${WARMUP} of warm-up; ` +
      `node ${process.version}, gc between runs: ${global.gc ? 'yes' : 'no (run with node --expose-gc)'}`,
  );
  for (const [label, times] of [['wall', wall], ['cpu', cpu]]) {
    const base = median(times.without);
    console.log(`${label} (median)      per run    per step   overhead/step   overhead`);
    for (const name of Object.keys(variants)) {
      const med = median(times[name]);
      const pct = ((med / base - 1) * 100).toFixed(1);
      console.log(
        `  ${name.padEnd(12)} ${med.toFixed(2).padStart(9)} ms ${((med / steps) * 1e3).toFixed(0).padStart(8)} us ` +
          `${(((med - base) / steps) * 1e3).toFixed(0).padStart(10)} us ${(pct.startsWith('-') ? pct : `+${pct}`).padStart(9)} %`,
      );
    }
  }
}

main().catch((error) => {
  console.error(error);
  process.exit(1);
});
