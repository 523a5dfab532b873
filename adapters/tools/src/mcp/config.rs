//! An `[[mcp]]` entry: how to reach a server, how the client waits on its status tools, the
//! protocol revision, how elicitation is answered, and the errors that stop its start.

use crate::mcp_auth::{AuthStep, McpAuth};
use serde_json::Value;
use std::collections::BTreeMap;
use std::time::Duration;
use terminus_kernel::{Hold, ToolOutcome};

/// How to reach one MCP server: an `[[mcp]]` entry of the agent config.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct McpConfig {
    /// The server's name (it namespaces its tools when two servers offer the same name).
    pub name: String,
    /// How to reach it.
    pub transport: McpTransport,
    /// Longest time one call may take. Default 60 s.
    pub tool_timeout: Duration,
    /// Whether its tools may be called again after a crash left a call in doubt. Default false.
    pub idempotent: bool,
    /// The folder a stdio child starts in (default: this process's): relative paths in its
    /// arguments are taken from there, so a worker elsewhere starts it as the submitter did.
    pub working_dir: Option<std::path::PathBuf>,
    /// Tools (as the server names them, or `*` for all) whose calls wait for a person's
    /// approval (`docs/approvals.md`).
    pub approval: Vec<String>,
    /// Tools (as the server names them, or `*`) answered from outside instead of run.
    pub deferred: Vec<String>,
    /// The only tools of the server the model is offered (as the server names them); empty:
    /// all. A small model reads a short tool list faster and better.
    pub tools: Vec<String>,
    /// OAuth for an HTTP server that asks for it (`[[mcp]] auth = { ... }`); `None`: a 401 or
    /// 403 is an `auth_failed` error.
    pub auth: Option<McpAuth>,
    /// How the server's elicitation requests (`elicitation/create`) are answered.
    pub elicitation: Elicitation,
    /// Which revision of the protocol the session speaks.
    pub protocol: McpProtocol,
    /// Tools (as the server names them) called as MCP tasks (`docs/live-agents.md`, "Tools that
    /// run as tasks"): the client waits for the task, polling at the server's interval, within
    /// the tool's timeout. rmcp does not read a tool's `execution.taskSupport`, so the config
    /// says which.
    pub tasks: Vec<String>,
    /// Tools (as the server names them) the client calls again while their result says the job
    /// they report on is not ready ([`Poll`]): the model makes one call and gets one result.
    pub poll: BTreeMap<String, Poll>,
}

/// How the client waits on a tool that reports a job's status (`[[mcp]] poll`): it calls the
/// tool again, with the same arguments, every `every` while a successful result contains
/// `not_ready` (compared without case), for at most `max_wait`; the model sees the first result
/// that is ready (or a failure), as the call's one result. A job still not ready after
/// `max_wait` is a `timeout` naming the calls made and the last result.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Poll {
    /// The text of a result that means "not ready yet".
    pub not_ready: String,
    /// The pause between two calls.
    pub every: Duration,
    /// The longest the client waits in all.
    pub max_wait: Duration,
}

impl Poll {
    /// Whether `outcome` says the job is not ready: a success whose text holds `not_ready`.
    pub(super) fn waits(&self, outcome: &ToolOutcome) -> bool {
        let ToolOutcome::Ok(value) = outcome else {
            return false;
        };
        let text = match value.value() {
            Value::String(s) => s.to_lowercase(),
            other => other.to_string().to_lowercase(),
        };
        text.contains(&self.not_ready.to_lowercase())
    }
}

/// The protocol revision a session speaks: rmcp 3.11 has both.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum McpProtocol {
    /// 2025-11-25 and its `initialize` handshake, which every current server accepts (the
    /// default).
    #[default]
    Initialize,
    /// 2026-07-28: `server/discover` instead of the handshake, and every request carries its
    /// own `_meta` (protocol version, client info and capabilities) and the
    /// `MCP-Protocol-Version`, `Mcp-Method` and `Mcp-Name` headers. A server that does not
    /// speak it fails the connection.
    Stateless,
}

/// How elicitation requests are answered: no person sits behind an agent's MCP client while it
/// runs, but one can reply while the run is suspended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Elicitation {
    /// Every request is declined, and the capability is not announced (the default).
    #[default]
    Decline,
    /// A form request is accepted with the defaults its schema gives (fields without one are
    /// left out); a URL request is declined.
    Defaults,
    /// A form request waits for a person: it is cancelled, which ends the call's run without
    /// its effect, and the call is held ([`terminus_runtime::asking`]); the run is suspended
    /// until the person replies (`terminus answer`, `deny` or `approve`), then the call runs
    /// again and the same question gets the reply. Any other question (a URL request, a second
    /// question of one run) is declined; outside a run (`terminus tools call`) nobody will
    /// reply, and the cancel stands. The server's calls run one at a time, so a question is the
    /// call's in flight. A task's question (an MCP task `input_required`) is not cancelled but
    /// left open: the task waits on the server, and the call's second run waits for that same
    /// task (its journaled job) and gives the question the person's reply (outside a run, the
    /// task's question is cancelled too).
    Person,
}

impl McpConfig {
    /// Whether, and why, calls of this server's tool `tool` are held for a decision.
    pub fn hold(&self, tool: &str) -> Option<Hold> {
        let named = |list: &[String]| list.iter().any(|t| t == "*" || t == tool);
        if named(&self.approval) {
            Some(Hold::Approval)
        } else if named(&self.deferred) {
            Some(Hold::Deferred)
        } else {
            None
        }
    }
}

/// A server's transport.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum McpTransport {
    /// A child process speaking MCP on its stdin and stdout: the program and its arguments.
    Stdio {
        /// `[program, args...]`.
        command: Vec<String>,
    },
    /// Streamable HTTP at this URL (`http://127.0.0.1:3001/mcp`).
    Http {
        /// The endpoint.
        url: String,
    },
}

impl McpConfig {
    /// A config with the defaults.
    pub fn new(name: impl Into<String>, transport: McpTransport) -> McpConfig {
        McpConfig {
            name: name.into(),
            transport,
            tool_timeout: Duration::from_secs(60),
            idempotent: false,
            working_dir: None,
            approval: Vec::new(),
            deferred: Vec::new(),
            tools: Vec::new(),
            auth: None,
            elicitation: Elicitation::Decline,
            protocol: McpProtocol::Initialize,
            tasks: Vec::new(),
            poll: BTreeMap::new(),
        }
    }
}

/// A server that cannot be used at all.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum McpError {
    /// The command is empty.
    #[error("[[mcp]] `{server}`: the command is empty")]
    EmptyCommand {
        /// The server.
        server: String,
    },
    /// The command could not be started.
    #[error("[[mcp]] `{server}`: cannot start `{program}`: {source}")]
    Spawn {
        /// The server.
        server: String,
        /// The program.
        program: String,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// `approval`, `deferred`, `tools`, `tasks` or `poll` names a tool the server does not
    /// offer.
    #[error(
        "[[mcp]] `{server}`: approval/deferred/tools/tasks/poll names `{tool}`, which the server does not offer (it offers: {})",
        offered.join(", ")
    )]
    UnknownHeld {
        /// The server.
        server: String,
        /// The tool named.
        tool: String,
        /// What the server offers.
        offered: Vec<String>,
    },
    /// The server did not complete the MCP handshake.
    #[error("[[mcp]] `{server}`: the server did not start: {reason}{}", stderr_suffix(.stderr))]
    Initialize {
        /// The server.
        server: String,
        /// Why.
        reason: String,
        /// What the child wrote on stderr, if anything.
        stderr: String,
    },
    /// An HTTP server asked for OAuth authorization and it failed at `step`.
    #[error("[[mcp]] `{server}`: OAuth {} failed: {reason}", step.as_str())]
    Auth {
        /// The server.
        server: String,
        /// The step that failed.
        step: AuthStep,
        /// Why (never a token or a secret).
        reason: String,
    },
    /// The server's authorization server wants a person to log in ([`AuthStep::Login`]): the
    /// authorization waits for them, kept in the auth config's
    /// [`credentials_file`](crate::McpAuth::credentials_file); [`complete_login`](super::complete_login) completes
    /// it with the address their browser is redirected to.
    #[error("[[mcp]] `{server}`: authorization waits for a person to log in at {url}")]
    Login {
        /// The server.
        server: String,
        /// The authorization URL to open (no secret in it: PKCE sends the verifier's hash).
        url: String,
    },
    /// Listing the server's tools failed.
    #[error("[[mcp]] `{server}`: cannot list its tools: {reason}")]
    List {
        /// The server.
        server: String,
        /// Why.
        reason: String,
    },
}

pub(super) fn stderr_suffix(stderr: &str) -> String {
    if stderr.trim().is_empty() {
        String::new()
    } else {
        format!("\n  its stderr:\n  {}", stderr.trim().replace('\n', "\n  "))
    }
}
