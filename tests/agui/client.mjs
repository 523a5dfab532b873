// The official AG-UI client (`@ag-ui/client`'s HttpAgent) on `terminus serve`: runs an agent on
// a new thread; while a run finishes with interrupts, answers each through `resume` with the
// payload ANSWERS gives for its kind (`metadata.terminus.kind`: approval, deferred or
// elicitation; default `{"approval": {"approved": true}}`) and runs again. Every event the
// client delivers is checked against `@ag-ui/core`'s schema. Prints one JSON line: what a test
// asserts on (adapters/cli/tests/serve.rs).
//
//   node client.mjs URL KEY THREAD TASK [ANSWERS]
//
// With --runs, runs each of RUNS (a JSON list of {url, thread, task}) once on a new thread and
// prints, for each, the event types and how it ended (the conformance scenarios, served):
//
//   node client.mjs --runs KEY RUNS
import { HttpAgent } from "@ag-ui/client";
import { EventSchema } from "@ag-ui/core/schemas";

const end = (e) => ({ type: e.type, code: e.code, reason: e.result?.report?.reason });
if (process.argv[2] === "--runs") {
  const [key, runsText] = process.argv.slice(3);
  const out = [];
  for (const { url, thread, task } of JSON.parse(runsText)) {
    const agent = new HttpAgent({
      url,
      headers: { Authorization: `Bearer ${key}` },
      threadId: thread,
      initialMessages: [{ id: "u1", role: "user", content: task }],
    });
    const types = [];
    let last = null;
    await agent.runAgent(
      { runId: `js-${thread}` },
      {
        onEvent({ event }) {
          EventSchema.parse(event);
          types.push(event.type);
          last = event;
        },
      },
    );
    out.push({ thread, types, last: end(last) });
  }
  console.log(JSON.stringify(out));
} else {
  await single();
}

async function single() {
  const [url, key, thread, task, answersText] = process.argv.slice(2);
  const answers = JSON.parse(answersText ?? '{"approval": {"approved": true}}');
  const agent = new HttpAgent({
    url,
    headers: { Authorization: `Bearer ${key}` },
    threadId: thread,
    initialMessages: [{ id: "u1", role: "user", content: task }],
  });

  function subscriber(events, contents) {
    return {
      onEvent({ event }) {
        // Throws (and so fails the run) on any event the schema refuses.
        EventSchema.parse(event);
        events.push(event.type);
        if (event.type === "TEXT_MESSAGE_CONTENT") {
          contents[event.messageId] = (contents[event.messageId] ?? 0) + 1;
        }
      },
    };
  }

  const runs = [];
  let resume;
  let result;
  for (let n = 1; n <= 5; n++) {
    const types = [];
    const contents = {};
    const params = resume ? { runId: `js-${n}`, resume } : { runId: `js-${n}` };
    ({ result } = await agent.runAgent(params, subscriber(types, contents)));
    const interrupts = agent.pendingInterrupts.map((i) => ({
      ...i,
      kind: i.metadata?.terminus?.kind ?? null,
    }));
    runs.push({ types, interrupts, contents, pending: interrupts.length });
    if (interrupts.length === 0) break;
    resume = interrupts.map((i) => {
      if (!(i.kind in answers)) throw new Error(`no answer for an interrupt of kind ${i.kind}`);
      return { interruptId: i.id, status: "resolved", payload: answers[i.kind] };
    });
  }

  console.log(
    JSON.stringify({
      runs,
      result,
      state: agent.state,
      messages: agent.messages.map((m) => ({
        id: m.id,
        role: m.role,
        content: typeof m.content === "string" ? m.content : null,
        toolCallId: m.toolCallId ?? null,
      })),
    }),
  );
}
