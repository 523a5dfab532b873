// An MCP server on the official TypeScript SDK whose jobs outlive the client's session, as a
// build or deploy service's do: streamable HTTP without sessions, one task store for every
// connection, so a client that crashed and came back asks `tasks/get` about the job it started
// before and finds it.
//
// `build {target, seconds}` requires task execution (MCP tasks, 2025-11-25): `tools/call` with a
// `task` answers at once with a task (`pollInterval` 200 ms), which works for `seconds` (default
// 3; its status message says the second), then completes with "built TARGET (job N)". A task
// cancelled (`tasks/cancel`) stops and never completes.
//
// `deploy {target}` is a task that needs input: after half a second it asks which environment
// (an `elicitation/create` form, `environment` one of "staging" or "production") and is
// `input_required` until the client answers; then it works a second and completes with
// "deployed TARGET to ENVIRONMENT (job N)" (or, declined, "deploy of TARGET not done: ACTION").
// Its question outlives the session it was sent on, as the job does: each `tasks/result` of the
// task carries it again while it is open, and an answer is taken from whichever connection
// sends it.
//
// The server counts every request by method, as it received it: `GET /counts` answers
// {"tools/call": N, "tasks/get": N, "tasks/result": N, "tasks/cancel": N, "builds_finished": N,
// "questions_asked": N, "questions_answered": N, "deploys_finished": N}.
// It prints {"port": N} on stdout once it listens on 127.0.0.1.
//
// Usage: node tasks.js NODE_MODULES [PORT] (NODE_MODULES: the folder that holds
// @modelcontextprotocol/sdk; PORT 0 or absent: any free port).
const http = require("http");
const path = require("path");
const [modules, port] = process.argv.slice(2);
const sdk = (p) => require(path.join(modules, "@modelcontextprotocol/sdk/dist/cjs", p));
const { McpServer } = sdk("server/mcp.js");
const { StreamableHTTPServerTransport } = sdk("server/streamableHttp.js");
const { InMemoryTaskStore, InMemoryTaskMessageQueue } = sdk(
  "experimental/tasks/stores/in-memory.js",
);
const z = require(path.join(modules, "zod"));

const counts = {
  "tools/call": 0,
  "tasks/get": 0,
  "tasks/result": 0,
  "tasks/cancel": 0,
  builds_finished: 0,
  questions_asked: 0,
  questions_answered: 0,
  deploys_finished: 0,
};
// One store for every connection: a task is the server's, not a session's.
const taskStore = new InMemoryTaskStore();
const taskMessageQueue = new InMemoryTaskMessageQueue();
let jobs = 0;

async function work(taskId, target, seconds, job) {
  for (let s = 1; s <= seconds; s++) {
    const task = await taskStore.getTask(taskId);
    if (!task || task.status !== "working") return; // cancelled
    await taskStore.updateTaskStatus(taskId, "working", `building ${target}: second ${s} of ${seconds}`);
    await new Promise((resolve) => setTimeout(resolve, 1000));
  }
  const task = await taskStore.getTask(taskId);
  if (!task || task.status !== "working") return;
  counts.builds_finished += 1;
  await taskStore.storeTaskResult(taskId, "completed", {
    content: [{ type: "text", text: `built ${target} (job ${job})` }],
  });
}

// The questions deploy tasks asked and nobody answered yet, by the id of their JSON-RPC request.
const questions = new Map();
let asked = 0;

async function deploy(taskId, target, job) {
  await new Promise((resolve) => setTimeout(resolve, 500));
  const message = `Deploy ${target} to which environment?`;
  const id = 900000 + ++asked;
  const answer = await new Promise((resolve) => {
    const request = {
      jsonrpc: "2.0",
      id,
      method: "elicitation/create",
      params: {
        mode: "form",
        message,
        requestedSchema: {
          type: "object",
          properties: { environment: { type: "string", enum: ["staging", "production"] } },
          required: ["environment"],
        },
        _meta: { "io.modelcontextprotocol/related-task": { taskId } },
      },
    };
    questions.set(id, { taskId, request, resolve });
    counts.questions_asked += 1;
    taskStore.updateTaskStatus(taskId, "input_required", message);
  });
  const result = answer.result || {};
  if (result.action !== "accept" || !result.content || !result.content.environment) {
    const why = answer.error ? answer.error.message : result.action;
    await taskStore.storeTaskResult(taskId, "completed", {
      content: [{ type: "text", text: `deploy of ${target} not done: ${why}` }],
    });
    return;
  }
  const environment = result.content.environment;
  await taskStore.updateTaskStatus(taskId, "working", `deploying ${target} to ${environment}`);
  await new Promise((resolve) => setTimeout(resolve, 1000));
  counts.deploys_finished += 1;
  await taskStore.storeTaskResult(taskId, "completed", {
    content: [{ type: "text", text: `deployed ${target} to ${environment} (job ${job})` }],
  });
}

function server() {
  const mcp = new McpServer(
    { name: "builds", version: "1.0.0" },
    {
      capabilities: {
        tools: {},
        tasks: { list: {}, cancel: {}, requests: { tools: { call: {} } } },
      },
      taskStore,
      taskMessageQueue,
    },
  );
  mcp.experimental.tasks.registerToolTask(
    "build",
    {
      description: "Build a target; takes a few seconds.",
      inputSchema: { target: z.string(), seconds: z.number().int().min(1).max(60).optional() },
      execution: { taskSupport: "required" },
    },
    {
      createTask: async ({ target, seconds }, extra) => {
        const task = await extra.taskStore.createTask({ ttl: 600000, pollInterval: 200 });
        jobs += 1;
        work(task.taskId, target, seconds ?? 3, jobs).catch((e) =>
          taskStore.updateTaskStatus(task.taskId, "failed", String(e)),
        );
        return { task };
      },
      getTask: async (_args, extra) => extra.taskStore.getTask(extra.taskId),
      getTaskResult: async (_args, extra) => extra.taskStore.getTaskResult(extra.taskId),
    },
  );
  mcp.experimental.tasks.registerToolTask(
    "deploy",
    {
      description: "Deploy a target; asks where to.",
      inputSchema: { target: z.string() },
      execution: { taskSupport: "required" },
    },
    {
      createTask: async ({ target }, extra) => {
        const task = await extra.taskStore.createTask({ ttl: 600000, pollInterval: 200 });
        jobs += 1;
        deploy(task.taskId, target, jobs).catch((e) =>
          taskStore.updateTaskStatus(task.taskId, "failed", String(e)),
        );
        return { task };
      },
      getTask: async (_args, extra) => extra.taskStore.getTask(extra.taskId),
      getTaskResult: async (_args, extra) => extra.taskStore.getTaskResult(extra.taskId),
    },
  );
  return mcp;
}

function body(req) {
  return new Promise((resolve, reject) => {
    const chunks = [];
    req.on("data", (c) => chunks.push(c));
    req.on("end", () => resolve(Buffer.concat(chunks).toString("utf8")));
    req.on("error", reject);
  });
}

const listener = http.createServer(async (req, res) => {
  if (req.method === "GET" && req.url === "/counts") {
    res.writeHead(200, { "content-type": "application/json" });
    res.end(JSON.stringify(counts));
    return;
  }
  if (req.method !== "POST") {
    // No sessions, so no stream of the server's own messages to open.
    res.writeHead(405, { allow: "POST" }).end();
    return;
  }
  let parsed;
  try {
    parsed = JSON.parse(await body(req));
  } catch (e) {
    res.writeHead(400).end(`not JSON: ${e}`);
    return;
  }
  const messages = Array.isArray(parsed) ? parsed : [parsed];
  for (const message of messages) {
    if (message && message.method in counts) counts[message.method] += 1;
  }
  // The client's answers to open questions go to the jobs that asked, whatever the session.
  const answers = messages.filter((m) => m && m.method === undefined && questions.has(m.id));
  if (answers.length && answers.length === messages.length) {
    for (const answer of answers) {
      const question = questions.get(answer.id);
      questions.delete(answer.id);
      counts.questions_answered += 1;
      question.resolve(answer);
    }
    res.writeHead(202).end();
    return;
  }
  // A task's open question goes on the stream of each of its `tasks/result`, once.
  for (const message of messages) {
    if (!message || message.method !== "tasks/result") continue;
    const taskId = message.params && message.params.taskId;
    for (const question of questions.values()) {
      if (question.taskId !== taskId) continue;
      await taskMessageQueue.dequeueAll(taskId);
      await taskMessageQueue.enqueue(taskId, {
        type: "request",
        message: question.request,
        timestamp: Date.now(),
      });
    }
  }
  const mcp = server();
  const transport = new StreamableHTTPServerTransport({ sessionIdGenerator: undefined });
  res.on("close", () => {
    transport.close();
    mcp.close();
  });
  await mcp.connect(transport);
  await transport.handleRequest(req, res, parsed);
});
listener.listen(Number(port || 0), "127.0.0.1", () => {
  process.stdout.write(JSON.stringify({ port: listener.address().port }) + "\n");
});
