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
// The server counts every request by method, as it received it: `GET /counts` answers
// {"tools/call": N, "tasks/get": N, "tasks/result": N, "tasks/cancel": N, "builds_finished": N}.
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
  for (const message of Array.isArray(parsed) ? parsed : [parsed]) {
    if (message && message.method in counts) counts[message.method] += 1;
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
