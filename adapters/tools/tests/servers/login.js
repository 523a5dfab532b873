// A streamable-HTTP MCP server on the official TypeScript SDK behind an OAuth 2.1 authorization
// server that wants a person to log in, as hosted servers do: its authorization endpoint answers
// a login page, not a redirect, until the person submits it.
//
// - /.well-known/oauth-protected-resource[/mcp]: the resource's metadata, naming this origin as
//   its authorization server; /.well-known/oauth-authorization-server: that server's metadata
//   (dynamic registration, PKCE S256, public clients);
// - POST /register: dynamic client registration;
// - GET /authorize: the login page (200, HTML). The person's submission is the same URL with
//   `login=NAME` added: a redirect to the client's redirect URI with a code and the state; with
//   `deny=1` instead, a redirect with `error=access_denied`;
// - POST /token: the code (once, with the PKCE verifier whose S256 hash the authorization request
//   named, from the client it was issued to) or a refresh token for an access token;
// - POST /revoke: every access and refresh token is forgotten (a test's revocation);
// - /mcp: the MCP endpoint (stateless); without a valid bearer token, 401 with the
//   `WWW-Authenticate` challenge naming the resource metadata. Its tool `whoami` answers
//   "hello NAME", NAME the person who logged in.
//
// Each step is appended to LOG_FILE as a line (`register`, `login page`, `login NAME`, `token
// code`, `token refresh`, `revoke`, `unauthorized METHOD with|without` (a bearer token or
// none), `call whoami NAME`), so a test can count them. The
// server listens on 127.0.0.1 at a free port and prints `listening PORT` on stdout.
//
// Usage: node login.js NODE_MODULES LOG_FILE (NODE_MODULES: the folder that holds
// @modelcontextprotocol/sdk).
const crypto = require("crypto");
const fs = require("fs");
const http = require("http");
const path = require("path");
const [modules, log] = process.argv.slice(2);
const sdk = (p) => require(path.join(modules, "@modelcontextprotocol/sdk/dist/cjs", p));
const { McpServer } = sdk("server/mcp.js");
const { StreamableHTTPServerTransport } = sdk("server/streamableHttp.js");

const note = (line) => fs.appendFileSync(log, line + "\n");
const clients = new Map(); // client_id -> redirect_uris
const codes = new Map(); // code -> { client_id, redirect_uri, challenge, user }
const tokens = new Map(); // access token -> user
const refreshes = new Map(); // refresh token -> user
const random = () => crypto.randomBytes(16).toString("hex");

function send(res, status, body, headers = {}) {
  const text = typeof body === "string" ? body : JSON.stringify(body);
  const type = typeof body === "string" ? "text/html" : "application/json";
  res.writeHead(status, { "content-type": type, ...headers });
  res.end(text);
}

function read(req) {
  return new Promise((resolve) => {
    let data = "";
    req.on("data", (chunk) => (data += chunk));
    req.on("end", () => resolve(data));
  });
}

function issue(res, user) {
  const access = `at-${random()}`;
  const refresh = `rt-${random()}`;
  tokens.set(access, user);
  refreshes.set(refresh, user);
  send(res, 200, {
    access_token: access,
    token_type: "Bearer",
    expires_in: 3600,
    refresh_token: refresh,
    scope: "files:read",
  });
}

async function mcp(req, res, user) {
  const server = new McpServer({ name: "login", version: "1.0.0" });
  server.registerTool("whoami", { description: "Say who logged in." }, async () => {
    note(`call whoami ${user}`);
    return { content: [{ type: "text", text: `hello ${user}` }] };
  });
  const transport = new StreamableHTTPServerTransport({ sessionIdGenerator: undefined });
  res.on("close", () => {
    transport.close();
    server.close();
  });
  await server.connect(transport);
  await transport.handleRequest(req, res);
}

const server = http.createServer(async (req, res) => {
  const base = `http://127.0.0.1:${server.address().port}`;
  const url = new URL(req.url, base);
  const resource = {
    resource: `${base}/mcp`,
    authorization_servers: [base],
    scopes_supported: ["files:read"],
  };
  try {
    if (url.pathname.startsWith("/.well-known/oauth-protected-resource")) {
      return send(res, 200, resource);
    }
    if (url.pathname === "/.well-known/oauth-authorization-server") {
      return send(res, 200, {
        issuer: base,
        authorization_endpoint: `${base}/authorize`,
        token_endpoint: `${base}/token`,
        registration_endpoint: `${base}/register`,
        response_types_supported: ["code"],
        grant_types_supported: ["authorization_code", "refresh_token"],
        code_challenge_methods_supported: ["S256"],
        token_endpoint_auth_methods_supported: ["none"],
        scopes_supported: ["files:read"],
      });
    }
    if (url.pathname === "/register" && req.method === "POST") {
      const body = JSON.parse(await read(req));
      const id = `client-${clients.size + 1}`;
      clients.set(id, body.redirect_uris || []);
      note("register");
      return send(res, 201, {
        ...body,
        client_id: id,
        token_endpoint_auth_method: "none",
      });
    }
    if (url.pathname === "/authorize") {
      const q = url.searchParams;
      const redirect = q.get("redirect_uri");
      if (!(clients.get(q.get("client_id")) || []).includes(redirect)) {
        return send(res, 400, { error: "invalid_request" });
      }
      const back = new URL(redirect);
      back.searchParams.set("state", q.get("state") || "");
      if (q.get("deny")) {
        back.searchParams.set("error", "access_denied");
        return send(res, 302, "", { location: back.toString() });
      }
      const user = q.get("login");
      if (!user) {
        note("login page");
        return send(res, 200, "<html><form>Log in to continue: <input name=login></form></html>");
      }
      const code = `code-${random()}`;
      codes.set(code, {
        client_id: q.get("client_id"),
        redirect_uri: redirect,
        challenge: q.get("code_challenge"),
        user,
      });
      note(`login ${user}`);
      back.searchParams.set("code", code);
      return send(res, 302, "", { location: back.toString() });
    }
    if (url.pathname === "/token" && req.method === "POST") {
      const form = new URLSearchParams(await read(req));
      if (form.get("grant_type") === "refresh_token") {
        const user = refreshes.get(form.get("refresh_token"));
        if (!user) return send(res, 400, { error: "invalid_grant" });
        note("token refresh");
        return issue(res, user);
      }
      const grant = codes.get(form.get("code"));
      codes.delete(form.get("code"));
      const verifier = form.get("code_verifier") || "";
      const hash = crypto.createHash("sha256").update(verifier).digest("base64url");
      if (
        form.get("grant_type") !== "authorization_code" ||
        !grant ||
        grant.client_id !== form.get("client_id") ||
        grant.redirect_uri !== form.get("redirect_uri") ||
        grant.challenge !== hash
      ) {
        return send(res, 400, { error: "invalid_grant" });
      }
      note("token code");
      return issue(res, grant.user);
    }
    if (url.pathname === "/revoke" && req.method === "POST") {
      // The authorization server forgets every token (a revocation, a reset password).
      tokens.clear();
      refreshes.clear();
      note("revoke");
      return send(res, 200, { revoked: true });
    }
    if (url.pathname === "/mcp") {
      const auth = req.headers.authorization || "";
      const user = auth.startsWith("Bearer ") ? tokens.get(auth.slice(7)) : undefined;
      if (!user) {
        note(`unauthorized ${req.method} ${auth ? "with" : "without"}`);
        return send(res, 401, { error: "invalid_token" }, {
          "www-authenticate": `Bearer resource_metadata="${base}/.well-known/oauth-protected-resource/mcp"`,
        });
      }
      return await mcp(req, res, user);
    }
    send(res, 404, { error: "not_found" });
  } catch (e) {
    if (!res.headersSent) send(res, 500, { error: String(e) });
  }
});
server.listen(0, "127.0.0.1", () => console.log(`listening ${server.address().port}`));
