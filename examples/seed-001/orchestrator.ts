// Seed 001's own system, in TypeScript on the `terminus-kernel` package: an `OrchestratorAgent`
// that asks a `PlanGenerator` (a model, with a static fallback) for a plan over a registry of
// agents, and an `Executor` that runs it with a `ContextManager` keeping the progress (the seed
// kept it on S3; here a file). The agents are the seed's: `errorHandling: 'skip'` agents with
// degraded defaults, `retryable` agents, estimated durations giving each its timeout.
//
// Every decision the seed made by hand (which plan is valid, the order, retries, the breaker,
// skips, degraded results, timeouts, resuming after a Lambda timed out) is the orchestrator's,
// through `generatePlan` and `runPlan` (docs/plans.md, "From Node and Python").
//
// Offline (scripted planner and agents):   bash examples/seed-001/run.sh
// On the project's llama-server:           bash examples/seed-001/run.sh --model http://127.0.0.1:8089
// (run.sh compiles this file with the package's TypeScript and runs it; its header lists the
// options; `bindings/node/test/seed_001.test.js` runs it offline.)

import { existsSync, readFileSync, renameSync, writeFileSync } from 'node:fs';
import {
  generatePlan,
  runPlan,
  type Generation,
  type Json,
  type PlanAgentContext,
  type PlanMessage,
  type PlanProgress,
  type PlanReport,
} from 'terminus-kernel';

/** A model call: the chat messages in, the reply's text out (`cut` when the output limit cut it). */
type Model = (messages: PlanMessage[]) => Promise<{ text: string; cut?: boolean }>;

/** One agent of the seed's registry. */
interface AgentDefinition {
  id: string;
  description: string;
  errorHandling: 'fail' | 'skip';
  retryable: boolean;
  estimatedDurationMs: number;
  degradedResult?: string;
  /** Its default task, when the plan gives none. */
  task: string;
}

const REGISTRY: AgentDefinition[] = [
  { id: 'research', description: 'Collects facts about the company and its market.', errorHandling: 'skip', retryable: false, estimatedDurationMs: 20_000, degradedResult: 'no facts found', task: 'Do the research part of the task.' },
  { id: 'competitors', description: 'Lists the main competitors, using the facts research found.', errorHandling: 'fail', retryable: true, estimatedDurationMs: 30_000, task: 'Do the competitors part of the task.' },
  { id: 'pricing', description: "Compares the company's prices with its competitors' prices.", errorHandling: 'skip', retryable: false, estimatedDurationMs: 20_000, degradedResult: 'no pricing data', task: 'Do the pricing part of the task.' },
  { id: 'reviews', description: 'Optional: reads customer reviews; it may be skipped and then gives no result.', errorHandling: 'skip', retryable: false, estimatedDurationMs: 20_000, task: 'Do the reviews part of the task.' },
  { id: 'risks', description: 'Names the main risks of growing, from the market facts and the competitors.', errorHandling: 'fail', retryable: false, estimatedDurationMs: 20_000, task: 'Do the risks part of the task.' },
  { id: 'summary', description: 'Writes the final report from the results of the other agents.', errorHandling: 'fail', retryable: true, estimatedDurationMs: 30_000, task: 'Do the summary part of the task.' },
];

/** The seed's static plan, run when the model writes no valid one. */
const FALLBACK: Json[] = [
  { id: 'research' },
  { id: 'competitors', depends_on: ['research'], task: 'List the competitors of the company in {research}' },
  { id: 'summary', depends_on: ['competitors'], task: 'Write the report from {competitors}' },
];

/** Keeps a plan's progress between invocations (the seed's S3 context; here a file). */
class ContextManager {
  constructor(private readonly file: string) {}

  load(): PlanProgress | undefined {
    return existsSync(this.file) ? (JSON.parse(readFileSync(this.file, 'utf8')) as PlanProgress) : undefined;
  }

  /** Written whole, then renamed: a process killed mid-write leaves the last progress. */
  save(progress: PlanProgress): void {
    writeFileSync(`${this.file}.tmp`, JSON.stringify(progress));
    renameSync(`${this.file}.tmp`, this.file);
  }
}

/** Asks the model for a plan over the registry; rejected plans go back with their problems. */
class PlanGenerator {
  constructor(
    private readonly registry: AgentDefinition[],
    private readonly model: Model,
  ) {}

  async generate(task: string, execution: string) {
    const file = {
      name: 'seed-001',
      limits: { max_phases: 6, execution_timeout_ms: 600_000, max_concurrency: 2 },
      registry: this.registry.map((a) => {
        const member: { [key: string]: Json } = {
          id: a.id,
          description: a.description,
          task: a.task,
          on_error: a.errorHandling,
          retryable: a.retryable,
          estimated_duration_ms: a.estimatedDurationMs,
        };
        if (a.degradedResult !== undefined) member.degraded_result = a.degradedResult;
        return member;
      }),
      generator: { max_attempts: 3 },
      fallback: FALLBACK,
    };
    return generatePlan(file, task, { model: this.model, execution });
  }
}

/** Runs a plan's agents: each asks the model (or its script) to do its part. */
class Executor {
  constructor(
    private readonly registry: AgentDefinition[],
    private readonly work: (agent: AgentDefinition, task: string, context: PlanAgentContext) => Promise<string>,
    private readonly context: ContextManager,
  ) {}

  async execute(plan: { [key: string]: unknown }, generation: Generation, execution: string): Promise<PlanReport> {
    const agents = Object.fromEntries(
      this.registry.map((a) => [a.id, (task: string, context: PlanAgentContext) => this.work(a, task, context)]),
    );
    const used = new Set(((plan.agents as { id: string }[]) ?? []).map((a) => a.id));
    return runPlan(plan as Parameters<typeof runPlan>[0], {
      agents: Object.fromEntries(Object.entries(agents).filter(([id]) => used.has(id))),
      execution,
      generation,
      progress: this.context.load(),
      onProgress: (progress) => this.context.save(progress),
      onEvent: (event) => console.error(`terminus: ${event.line}`),
    });
  }
}

/** The seed's entry point: a task in, the plan's report out. */
class OrchestratorAgent {
  constructor(
    private readonly generator: PlanGenerator,
    private readonly executor: Executor,
    private readonly plans: ContextManager,
  ) {}

  async handle(task: string, execution: string): Promise<PlanReport> {
    // A plan already written for this execution (an invocation that timed out) is run again
    // as it was: the model is not asked twice.
    const kept = this.plans.load() as unknown as { plan: { [key: string]: unknown }; generation: Generation } | undefined;
    let plan = kept?.plan;
    let generation = kept?.generation;
    if (plan === undefined || generation === undefined) {
      const generated = await this.generator.generate(task, execution);
      console.error(`terminus: plan ${generated.generation.source} after ${generated.generation.attempts} model call(s)`);
      if (generated.plan === null) return generated.report as PlanReport;
      plan = generated.plan;
      generation = generated.generation;
      this.plans.save({ plan, generation } as unknown as PlanProgress);
    }
    return this.executor.execute(plan, generation, execution);
  }
}

/** The model on an OpenAI-compatible server (llama-server's `/v1/chat/completions`). */
function served(baseUrl: string, maxTokens: number): Model {
  return async (messages) => {
    const response = await fetch(`${baseUrl}/v1/chat/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ messages, max_tokens: maxTokens, temperature: 0.8 }),
    });
    if (!response.ok) throw new Error(`the model server answered ${response.status}: ${await response.text()}`);
    const body = (await response.json()) as { choices: { message: { content: string | null }; finish_reason: string }[] };
    const choice = body.choices[0];
    return { text: choice?.message.content ?? '', cut: choice?.finish_reason === 'length' };
  };
}

/** Replies in turn, the last one again (the offline planner). */
function scripted(replies: string[]): Model {
  let next = 0;
  return async () => ({ text: replies[Math.min(next++, replies.length - 1)] ?? '' });
}

/** What each agent says offline; `reviews` has no data (it is skipped: an optional agent). */
const SCRIPTS: { [id: string]: string } = {
  research: 'facts: a small bakery chain, 12 shops, growing demand for vegan bread',
  competitors: 'competitors: BreadCo (48 shops), Loaf & Co (9 shops)',
  pricing: 'pricing: 8 % above BreadCo, level with Loaf & Co',
  risks: 'risks: BreadCo opening vegan lines; flour prices',
};

function option(args: string[], name: string): string | undefined {
  const at = args.indexOf(name);
  return at >= 0 ? args[at + 1] : undefined;
}

async function main(): Promise<void> {
  const args = process.argv.slice(2);
  const task = option(args, '--task') ?? 'Write a market report for a bakery chain that wants to grow.';
  const execution = option(args, '--execution') ?? `seed-001-${Date.now()}`;
  const folder = option(args, '--context') ?? '.';
  const url = option(args, '--model');
  // The offline planner first writes a plan with a cycle, then the plan it meant.
  const planner: Model = url
    ? served(url, 800)
    : scripted([
        JSON.stringify({ agents: [
          { id: 'research', depends_on: ['summary'], task: 'Find the facts.' },
          { id: 'summary', depends_on: ['research'], task: 'Write the report from {research}' },
        ] }),
        JSON.stringify({ agents: [
          { id: 'research', depends_on: [], task: 'Find the facts about the bakery chain.' },
          { id: 'competitors', depends_on: ['research'], task: 'List the competitors of the company in {research}' },
          { id: 'reviews', depends_on: [], task: 'Read the customer reviews.' },
          { id: 'risks', depends_on: ['research', 'competitors'], task: 'Name the risks from {research} and {competitors}' },
          { id: 'summary', depends_on: ['competitors', 'risks'], task: 'Write the report from {competitors} and {risks}' },
        ] }),
      ]);
  const writer = url ? served(url, 200) : undefined;
  const work = async (agent: AgentDefinition, task: string, context: PlanAgentContext): Promise<string> => {
    if (writer !== undefined) {
      context.used.model_calls += 1;
      const { text } = await writer([
        { role: 'system', content: `You are the ${agent.id} agent: ${agent.description} Answer in at most three sentences.` },
        { role: 'user', content: task },
      ]);
      // runPlan holds a text result to the kernel's rule of what an answer is: an empty reply,
      // or one that hands the task back ("as a language model, I don't have access..."), fails
      // the attempt (retried, skipped or degraded as the registry says), never a result its
      // dependents build on.
      return text.trim();
    }
    if (agent.id === 'summary') return `report: ${task}`;
    const script = SCRIPTS[agent.id];
    if (script === undefined) throw new Error(`${agent.id}: no data`);
    return script;
  };
  const orchestrator = new OrchestratorAgent(
    new PlanGenerator(REGISTRY, planner),
    new Executor(REGISTRY, work, new ContextManager(`${folder}/${execution}.progress.json`)),
    new ContextManager(`${folder}/${execution}.plan.json`),
  );
  const report = await orchestrator.handle(task, execution);
  console.log(JSON.stringify(report));
  process.exitCode = report.outcome === 'complete' ? 0 : 1;
}

main().catch((e: unknown) => {
  console.error(`terminus: ${e instanceof Error ? e.message : String(e)}`);
  process.exitCode = 2;
});
