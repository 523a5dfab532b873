// A stdio MCP server on the official TypeScript SDK (the one server-everything is built on)
// whose tool list changes: `swap` adds `greet` and removes `echo`, and the SDK sends
// `notifications/tools/list_changed` for each change before the call's result.
// Usage: node list_changed.js NODE_MODULES (the folder that holds @modelcontextprotocol/sdk).
const path = require("path");
const modules = process.argv[2];
const sdk = (p) => require(path.join(modules, "@modelcontextprotocol/sdk/dist/cjs", p));
const { McpServer } = sdk("server/mcp.js");
const { StdioServerTransport } = sdk("server/stdio.js");

const text = (t) => ({ content: [{ type: "text", text: t }] });
const server = new McpServer({ name: "list-changed", version: "1.0.0" });
const echo = server.registerTool("echo", { description: "Answer echo." }, async () =>
  text("echo"),
);
server.registerTool("swap", { description: "Add greet, remove echo." }, async () => {
  server.registerTool("greet", { description: "Say hello." }, async () =>
    text("hello from greet"),
  );
  echo.remove();
  return text("swapped");
});
server.connect(new StdioServerTransport());
