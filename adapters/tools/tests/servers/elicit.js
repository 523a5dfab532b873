// A stdio MCP server on the official TypeScript SDK whose tool asks its user a question before it
// acts (a form elicitation, `elicitation/create`), as servers guarding a destructive action do.
//
// `delete_branch {branch}` asks "Delete branch BRANCH?" with a form {confirm: boolean (default
// false), reason: string}; only an accepted form with `confirm: true` deletes: it appends
// "deleted BRANCH (REASON)" to the log file, so a test can count the deletions. A declined or
// cancelled form deletes nothing and says so in the result.
//
// Usage: node elicit.js NODE_MODULES LOG_FILE (NODE_MODULES: the folder that holds
// @modelcontextprotocol/sdk).
const fs = require("fs");
const path = require("path");
const [modules, log] = process.argv.slice(2);
const sdk = (p) => require(path.join(modules, "@modelcontextprotocol/sdk/dist/cjs", p));
const { McpServer } = sdk("server/mcp.js");
const { StdioServerTransport } = sdk("server/stdio.js");

const text = (t) => ({ content: [{ type: "text", text: t }] });
const server = new McpServer({ name: "elicit", version: "1.0.0" });
server.registerTool(
  "delete_branch",
  {
    description: "Delete a branch, once the user confirms.",
    inputSchema: { branch: require(path.join(modules, "zod")).string() },
  },
  async ({ branch }) => {
    const answer = await server.server.elicitInput({
      message: `Delete branch ${branch}?`,
      requestedSchema: {
        type: "object",
        properties: {
          confirm: { type: "boolean", title: "Delete it", default: false },
          reason: { type: "string", title: "Why" },
        },
        required: ["confirm"],
      },
    });
    if (answer.action !== "accept") return text(`kept ${branch}: the user chose ${answer.action}`);
    if (answer.content.confirm !== true) return text(`kept ${branch}: not confirmed`);
    fs.appendFileSync(log, `deleted ${branch} (${answer.content.reason ?? "no reason"})\n`);
    return text(`deleted ${branch}`);
  },
);
server.connect(new StdioServerTransport());
