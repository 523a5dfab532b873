// Compiled by test/types.test.js with `tsc --noEmit --strict`: the package's types (index.d.ts,
// ai.d.ts) describe the objects as a TypeScript host uses them. Not run.
import { Machine, Session, runScenario, runPlan, PlanError, telemetry, type TelemetryStarted, type PlanProgress, type PlanReport, type Command, type Event, type OfferedTool, type Policy, type Report, type Step } from 'terminus-kernel';
import { runAgent } from 'terminus-kernel/ai';
import { terminusMiddleware, REPORT_KEY, type TerminusState } from 'terminus-kernel/langchain';
import { createAgent, fakeModel } from 'langchain';
import { MockLanguageModelV3 } from 'ai/test';
import { Agent } from '@openai/agents';
import { run as runUnderKernel } from 'terminus-kernel/openai-agents';

// Seed 004's read budget as two tiers, scaled with the task (docs/design.md, "Tool budget tiers").
const tiered: Policy = {
  tool_budgets: {
    read_file: {
      tiers: [
        { name: 'checkpoint', warn_at: 8, block_at: 10, reset_on: ['post_checkpoint'] },
        { name: 'hard stop', warn_at: 13, block_at: 14, reset_on: ['post_plan'], count: 'run', warning: 'FINAL WARNING.' },
      ],
    },
  },
  budget_scale: { per_unit: { 'tool_budgets.read_file': 1 }, max: { 'tool_budgets.read_file': 30 } },
};
const scaledRun = new Machine(tiered, { scale: 3 });
console.log(scaledRun.nextCommand());
function readsTiers(r: Report): [number | undefined, number | undefined] {
  return [r.scale?.units, r.tool_budget_events?.[0]?.tier];
}
console.log(readsTiers);

// The README's quick start.
const m = new Machine({ completion_requires: ['write_file'], max_steps: 40 });
const replies = [
  { text: 'Done.' },
  { tool_calls: [{ id: 'c1', name: 'write_file', arguments: { path: 'plan.md' } }] },
  { text: 'plan.md is written.', needs_more_work: false },
];
for (let cmd = m.nextCommand(); cmd !== null; cmd = m.nextCommand()) {
  if (cmd.command === 'call_model') {
    m.handle({ model_turn: replies.shift()! });
  } else if (cmd.command === 'run_tools') {
    m.handle({ tool_results: cmd.calls.map((c) => ({ call_id: c.id, name: c.name, ok: 'written' })) });
  } else if (cmd.command === 'nudge' || cmd.command === 'notice') {
    console.log('to the model:', cmd.text.split('\n')[0]);
  } else if (cmd.command === 'stop') {
    const r: Report = cmd.report;
    console.log(r.outcome, r.reason, 'nudges:', r.nudges);
    break;
  }
}

const events: Event[] = [{ tick: 5 }, { cancel: true }, { verdict: { complete: true, missing: [] } }];
const handled: 'step' | 'observed' | 'ignored' = m.handle(events[0]);
const next: Command | null = m.nextCommand();
const copy: Machine = Machine.restore(m.snapshot());
const steps: number = copy.stats.steps + runScenario('spec/scenarios/explicit-done.json').steps;
const text: string = copy.explain() + copy.phase + handled + String(next);

// @ts-expect-error: an event needs one of the contract's keys.
m.handle({ shout: 1 });

// The host core over a framework's messages.
const [session, first] = Session.start({ max_steps: 10 }, [{ type: 'human', content: 'Plan.' }], Date.now(), 2);
const count: OfferedTool = { name: 'count', parameters: { type: 'object', properties: { n: { type: 'integer' } } } };
let step: Step | null = session.reply({ type: 'ai', id: 'r1', content: 'Done.' }, ['write_file', count]);
while (step !== null && step.verify) step = session.verdict({ complete: step.verify.missing.length === 0 });
const gate = Session.gate(session.turn(), 'c1', 'write_file', true);
const refused: string | undefined = 'refuse' in gate ? gate.refuse.content : gate.run.warning;
const ended: boolean = Session.restore(session.snapshot()).ended || session.batchOut || first.jump === 'model';
const retried: number = session.modelError('rate_limited', 1000).delay_ms + (session.results([])?.delay_ms ?? 0);
void [refused, ended, retried, session.report().outcome, session.finish([{ type: 'ai', content: '' }])];

async function agent(): Promise<string> {
  const model = new MockLanguageModelV3({});
  const { text, report } = await runAgent({ model, prompt: 'Review.', policy: { max_steps: 10 } });
  return `${text} ${report.reason} ${steps}`;
}
void agent;
void text;

async function langchainAgent(): Promise<string> {
  const agent = createAgent({
    model: fakeModel(),
    tools: [],
    middleware: [terminusMiddleware({ completion_requires: ['write_file'] }, { verifier: (claim) => [claim.length > 0, 'say more'] })],
  });
  const state = (await agent.invoke({ messages: [{ role: 'user', content: 'Plan.' }] })) as TerminusState;
  const report: Report | null | undefined = state[REPORT_KEY];
  return report?.outcome ?? 'running';
}
void langchainAgent;

async function openaiAgent(): Promise<string> {
  const agent = new Agent({ name: 'architect', instructions: 'Plan.' });
  const result = await runUnderKernel(agent, 'Plan.', { policy: { max_steps: 10 }, verify: ({ claim }) => ({ complete: claim.length > 0 }) });
  const report: Report = result.terminus;
  return `${String(result.finalOutput)} ${report.reason}`;
}
void openaiAgent;

// A plan whose agents are the host's functions, its progress kept (docs/plans.md, "From Node and Python").
async function plan(kept: PlanProgress | undefined): Promise<PlanReport> {
  try {
    return await runPlan(
      { name: 'research', agents: [{ id: 'search', task: 'Search.' }, { id: 'write', depends_on: ['search'], task: 'Write on {search}.' }] },
      {
        execution: 'research-1',
        progress: kept,
        onProgress: async (progress: PlanProgress) => void progress.cells,
        onEvent: (event) => console.log(event.kind, event.line),
        agents: {
          search: async (_task, context) => {
            context.used.model_calls += 1;
            return { found: 3, deadline: context.grant.deadline_ms };
          },
          write: (task, context) => (context.signal.aborted ? 'stopped' : task),
        },
      },
    );
  } catch (e) {
    if (e instanceof PlanError) console.log(e.problems.join('\n'));
    throw e;
  }
}
void plan;

// The process's telemetry: started once, metrics served by the host, flushed before a freeze.
async function traced(): Promise<string> {
  const started: TelemetryStarted = telemetry.start();
  if (started.exportingSpans) await telemetry.flush();
  const text: string | undefined = telemetry.metrics();
  await telemetry.shutdown();
  return text ?? '';
}
void traced;
