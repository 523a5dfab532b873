// The official AG-UI client (`@ag-ui/client`'s HttpAgent) on `terminus serve`: runs the
// architect on a new thread to its interrupt, approves the held call through `resume`, and runs
// it to its end. Every event the client delivers is checked against `@ag-ui/core`'s schema.
// Prints one JSON line: what a test asserts on (adapters/cli/tests/serve.rs).
//
//   node client.mjs URL KEY THREAD TASK
import { HttpAgent } from "@ag-ui/client";
import { EventSchema } from "@ag-ui/core/schemas";

const [url, key, thread, task] = process.argv.slice(2);
const agent = new HttpAgent({
  url,
  headers: { Authorization: `Bearer ${key}` },
  threadId: thread,
  initialMessages: [{ id: "u1", role: "user", content: task }],
});

const runs = [];
function subscriber(events) {
  return {
    onEvent({ event }) {
      // Throws (and so fails the run) on any event the schema refuses.
      EventSchema.parse(event);
      events.push(event.type);
    },
  };
}

const first = [];
await agent.runAgent({ runId: "js-1" }, subscriber(first));
const interrupts = agent.pendingInterrupts.map((i) => ({ ...i }));
runs.push({ types: first, interrupts });

const second = [];
const { result } = await agent.runAgent(
  {
    runId: "js-2",
    resume: interrupts.map((i) => ({
      interruptId: i.id,
      status: "resolved",
      payload: { approved: true },
    })),
  },
  subscriber(second),
);
runs.push({ types: second, pending: agent.pendingInterrupts.length });

console.log(
  JSON.stringify({
    runs,
    result,
    state: agent.state,
    messages: agent.messages.map((m) => ({ role: m.role, toolCallId: m.toolCallId ?? null })),
  }),
);
