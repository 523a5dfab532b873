//! MCP servers as tools, on the official Rust SDK (`rmcp`): stdio children and streamable HTTP.
//!
//! Each server's tools (listed with pagination) become runtime [`Tool`]s. A call runs with the
//! server's per-call timeout, and every way it can fail is one of the kernel's tool error kinds
//! ([`error_kind`], [`render`]), so the model sees it and rule 7 counts it:
//!
//! | what happened | kind |
//! |---|---|
//! | a result with `isError: true` | `failed`, with the server's text |
//! | JSON-RPC method not found (-32601) | `not_found` |
//! | JSON-RPC invalid params (-32602) | `invalid_arguments` |
//! | any other JSON-RPC error | `failed` |
//! | HTTP 401 / 403 (after OAuth, when `auth` is set: [`crate::mcp_auth`]) | `auth_failed`, naming the OAuth step that failed |
//! | no answer within `tool_timeout_ms` | `timeout` |
//! | the server process exited or the connection dropped | `failed` for the calls in flight; the server is started (reconnected) once more, and if it is lost again its tools answer `not_found` (unrecoverable: excluded or stopped by the policy) |
//!
//! MCP tools are not idempotent unless the server's config says so: a call that was in flight
//! at a crash is not run again on resume; the model is told and decides.
//!
//! A server that sends `notifications/tools/list_changed` (on a 2026-07-28 session, on the
//! `subscriptions/listen` stream the session opens for it) is listed again
//! before the run's next model call ([`McpTools::add_to`] adds the tools as a
//! [`ToolSource`]): the model is offered the new list, a call of a tool that is gone is
//! answered `not_found`, and the run reports the change ([`terminus_runtime::ToolsChanged`]).

use crate::content::render;
use crate::mcp_auth::{AuthFailure, AuthStep, Authorizer, MAX_AUTHORIZATIONS, McpAuth};
use async_trait::async_trait;
use rmcp::model::{
    CallToolRequestParams, ClientCapabilities, ClientConfig, ElicitRequestParams, ElicitResult,
    ElicitationAction, ElicitationCapability, FormElicitationCapability, Implementation,
    ProtocolVersion, SubscriptionFilter,
};
use rmcp::model::{JsonRpcMessage, ServerNotification};
use rmcp::service::{
    RequestContext, RunningService, RxJsonRpcMessage, ServiceError, TxJsonRpcMessage,
};
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::transport::{StreamableHttpClientTransport, TokioChildProcess, Transport};
use rmcp::{ClientHandler, ClientLifecycleMode, ClientServiceExt, RoleClient};
use serde_json::Value;
use std::collections::BTreeMap;
use std::process::Stdio;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;
use terminus_kernel::{Hold, ToolErrorKind, ToolOutcome};
use terminus_runtime::asking::{Question, Reply};
use terminus_runtime::{Fault, Tool, ToolSet, ToolSource, ToolSpec};
use tokio::io::AsyncReadExt;

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
    fn waits(&self, outcome: &ToolOutcome) -> bool {
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
    /// call's in flight.
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
    /// [`credentials_file`](crate::McpAuth::credentials_file); [`complete_login`] completes
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

fn stderr_suffix(stderr: &str) -> String {
    if stderr.trim().is_empty() {
        String::new()
    } else {
        format!("\n  its stderr:\n  {}", stderr.trim().replace('\n', "\n  "))
    }
}

type Client = RunningService<RoleClient, Handler>;

/// The client side of the session: its info, and the answers to elicitation requests.
#[derive(Debug, Clone)]
struct Handler {
    info: ClientConfig,
    elicitation: Elicitation,
    /// The call in flight of an [`Elicitation::Person`] server.
    asking: Arc<Mutex<Asking>>,
}

/// What the call in flight of an [`Elicitation::Person`] server and the session's elicitation
/// handler share (its calls run one at a time).
#[derive(Debug, Default)]
struct Asking {
    /// Whether a call is in flight.
    in_call: bool,
    /// The person's reply to the question this call's earlier run asked (its second run).
    reply: Option<(Question, Reply)>,
    /// Whether this is a second run: its unanswered questions are declined.
    rerun: bool,
    /// The question this run asked and cancelled (a first run asks one).
    asked: Option<Question>,
}

impl Asking {
    /// The answer to `request` for the call in flight.
    fn answer(&mut self, request: &ElicitRequestParams) -> ElicitResult {
        let decline = ElicitResult::new(ElicitationAction::Decline);
        let ElicitRequestParams::FormElicitationParams {
            message,
            requested_schema,
            ..
        } = request
        else {
            return decline;
        };
        if !self.in_call {
            return decline;
        }
        let question = Question {
            message: message.clone(),
            schema: serde_json::to_value(requested_schema).unwrap_or(Value::Null),
        };
        if self.rerun {
            return match self.reply.take() {
                Some((asked, reply)) if asked == question => match reply {
                    Reply::Accept(content) => {
                        ElicitResult::new(ElicitationAction::Accept).with_content(content)
                    }
                    Reply::Defaults => elicit(Elicitation::Defaults, request),
                    Reply::Decline => decline,
                },
                _ => decline,
            };
        }
        if self.asked.is_some() {
            return decline;
        }
        self.asked = Some(question);
        ElicitResult::new(ElicitationAction::Cancel)
    }
}

impl ClientHandler for Handler {
    fn get_info(&self) -> ClientConfig {
        self.info.clone()
    }

    async fn create_elicitation(
        &self,
        request: ElicitRequestParams,
        _context: RequestContext<RoleClient>,
    ) -> Result<ElicitResult, rmcp::ErrorData> {
        Ok(match self.elicitation {
            Elicitation::Person => self
                .asking
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .answer(&request),
            policy => elicit(policy, &request),
        })
    }
}

/// A transport that counts the server's `notifications/tools/list_changed` as they are
/// received: before any later message (the result of the call that changed the list) is, so a
/// refresh after that result sees the count. (The SDK's notification callback runs in a task of
/// its own, which may come after.)
struct Counting<T> {
    inner: T,
    list_changes: Arc<AtomicU64>,
}

impl<T> Counting<T> {
    fn new(inner: T, list_changes: &Arc<AtomicU64>) -> Counting<T> {
        Counting {
            inner,
            list_changes: list_changes.clone(),
        }
    }
}

impl<T: Transport<RoleClient>> Transport<RoleClient> for Counting<T> {
    type Error = T::Error;

    fn send(
        &mut self,
        item: TxJsonRpcMessage<RoleClient>,
    ) -> impl Future<Output = Result<(), Self::Error>> + Send + 'static {
        self.inner.send(item)
    }

    fn receive(&mut self) -> impl Future<Output = Option<RxJsonRpcMessage<RoleClient>>> + Send {
        let list_changes = self.list_changes.clone();
        let next = self.inner.receive();
        async move {
            let message = next.await;
            if let Some(JsonRpcMessage::Notification(n)) = &message
                && matches!(
                    n.notification,
                    ServerNotification::ToolListChangedNotification(_)
                )
            {
                list_changes.fetch_add(1, Ordering::SeqCst);
            }
            message
        }
    }

    fn close(&mut self) -> impl Future<Output = Result<(), Self::Error>> + Send {
        self.inner.close()
    }
}

/// The answer to an elicitation request under `policy`.
fn elicit(policy: Elicitation, request: &ElicitRequestParams) -> ElicitResult {
    match (policy, request) {
        (
            Elicitation::Defaults,
            ElicitRequestParams::FormElicitationParams {
                requested_schema, ..
            },
        ) => {
            let schema = serde_json::to_value(requested_schema).unwrap_or(Value::Null);
            let mut content = serde_json::Map::new();
            if let Some(properties) = schema.get("properties").and_then(Value::as_object) {
                for (name, property) in properties {
                    if let Some(default) = property.get("default") {
                        content.insert(name.clone(), default.clone());
                    }
                }
            }
            ElicitResult::new(ElicitationAction::Accept).with_content(Value::Object(content))
        }
        _ => ElicitResult::new(ElicitationAction::Decline),
    }
}

/// The last bytes a child wrote on stderr.
#[derive(Debug, Clone, Default)]
struct StderrTail(Arc<Mutex<Vec<u8>>>);

impl StderrTail {
    const KEEP: usize = 8 * 1024;

    fn text(&self) -> String {
        let bytes = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        String::from_utf8_lossy(&bytes).into_owned()
    }

    fn follow(&self, mut stderr: tokio::process::ChildStderr) {
        let buf = self.0.clone();
        tokio::spawn(async move {
            let mut chunk = [0u8; 4096];
            while let Ok(n) = stderr.read(&mut chunk).await {
                if n == 0 {
                    break;
                }
                let mut b = buf.lock().unwrap_or_else(PoisonError::into_inner);
                b.extend_from_slice(&chunk[..n]);
                let excess = b.len().saturating_sub(Self::KEEP);
                b.drain(..excess);
            }
        });
    }
}

/// One connected MCP server.
pub struct McpServer {
    config: McpConfig,
    /// OAuth state of an HTTP server with `auth` (it outlives reconnections).
    auth: Option<Arc<Authorizer>>,
    state: tokio::sync::Mutex<State>,
    stderr: StderrTail,
    /// Bumped by each `notifications/tools/list_changed` (and each restart): a list taken at
    /// an older count may be out of date.
    list_changes: Arc<AtomicU64>,
    /// The call in flight, for the elicitation handler ([`Elicitation::Person`]).
    asking: Arc<Mutex<Asking>>,
    /// Held by the call in flight of an [`Elicitation::Person`] server: one at a time.
    one_call: tokio::sync::Mutex<()>,
    /// The `tasks/cancel` of task waits that were dropped, to finish before the connection
    /// closes.
    cancels: crate::mcp_task::Cancels,
}

struct State {
    /// Shared by the calls in flight: a call goes through the running service (not only its
    /// peer), which answers a 2026-07-28 server's `input_required` rounds (SEP-2322).
    client: Option<Arc<Client>>,
    /// The child's process id (stdio servers).
    pid: Option<u32>,
    /// Bumped on every (re)connection, so that two calls that see the same loss restart once.
    generation: u64,
    restarts: u32,
    /// Why the server is gone for good.
    gone: Option<String>,
}

impl std::fmt::Debug for McpServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("McpServer")
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

/// How many times a lost server is started again before its tools answer `not_found`.
pub const MAX_RESTARTS: u32 = 1;

impl McpServer {
    /// Starts (or connects to) the server and completes the MCP handshake.
    pub async fn connect(config: McpConfig) -> Result<Arc<McpServer>, McpError> {
        let stderr = StderrTail::default();
        let auth = match (&config.auth, &config.transport) {
            (Some(auth), McpTransport::Http { url }) => Some(Arc::new(
                Authorizer::new(url, auth.clone())
                    .await
                    .map_err(|e| auth_error(&config.name, e))?,
            )),
            _ => None,
        };
        let list_changes = Arc::new(AtomicU64::new(0));
        let asking = Arc::new(Mutex::new(Asking::default()));
        let (client, pid) = open(&config, &stderr, auth.as_deref(), &list_changes, &asking).await?;
        Ok(Arc::new(McpServer {
            list_changes,
            asking,
            one_call: tokio::sync::Mutex::new(()),
            cancels: crate::mcp_task::Cancels::default(),
            config,
            auth,
            state: tokio::sync::Mutex::new(State {
                client: Some(Arc::new(client)),
                pid,
                generation: 0,
                restarts: 0,
                gone: None,
            }),
            stderr,
        }))
    }

    /// The config.
    pub fn config(&self) -> &McpConfig {
        &self.config
    }

    /// How many times the server said its tool list changed (and was restarted): a list taken
    /// when this was lower may be out of date.
    pub fn list_changes(&self) -> u64 {
        self.list_changes.load(Ordering::SeqCst)
    }

    /// The process id of a stdio server's child (the current one, after a restart).
    pub async fn pid(&self) -> Option<u32> {
        self.state.lock().await.pid
    }

    /// Every tool the server offers (all pages), with its description and JSON Schema.
    pub async fn list(&self) -> Result<Vec<terminus_runtime::ToolSpec>, McpError> {
        let (client, _) = self.peer().await.map_err(|reason| McpError::List {
            server: self.config.name.clone(),
            reason,
        })?;
        let mut authorizations = 0;
        let tools = loop {
            match client.peer().list_all_tools().await {
                Ok(tools) => break tools,
                Err(e) => match self.reauthorize(&e, &mut authorizations).await {
                    Some(Ok(())) => continue,
                    Some(Err(failure)) => return Err(auth_error(&self.config.name, failure)),
                    None => {
                        return Err(McpError::List {
                            server: self.config.name.clone(),
                            reason: e.to_string(),
                        });
                    }
                },
            }
        };
        let kept = |name: &str| {
            self.config.tools.is_empty() || self.config.tools.iter().any(|t| t == name)
        };
        Ok(tools
            .into_iter()
            .filter(|t| kept(&t.name))
            .map(|t| terminus_runtime::ToolSpec {
                name: t.name.to_string(),
                description: t.description.map(|d| d.to_string()).unwrap_or_default(),
                parameters: Value::Object((*t.input_schema).clone()),
            })
            .collect())
    }

    async fn peer(&self) -> Result<(Arc<Client>, u64), String> {
        let state = self.state.lock().await;
        if let Some(why) = &state.gone {
            return Err(why.clone());
        }
        match &state.client {
            Some(client) => Ok((client.clone(), state.generation)),
            None => Err(format!("server `{}` is not connected", self.config.name)),
        }
    }

    /// Calls tool `name` of this server. Never a [`Fault`]: every failure is an outcome. On an
    /// [`Elicitation::Person`] server, a question the call asks that nobody can answer now is
    /// reported to the run ([`terminus_runtime::asking::ask`]), which drops this outcome.
    pub async fn call(&self, name: &str, arguments: Value) -> ToolOutcome {
        if self.config.elicitation != Elicitation::Person {
            return self.call_once(name, arguments).await;
        }
        let _one = self.one_call.lock().await;
        {
            let mut asking = self.asking.lock().unwrap_or_else(PoisonError::into_inner);
            asking.reply = terminus_runtime::asking::reply();
            asking.rerun = asking.reply.is_some();
            asking.asked = None;
            asking.in_call = true;
        }
        let outcome = self.call_once(name, arguments).await;
        let asked = {
            let mut asking = self.asking.lock().unwrap_or_else(PoisonError::into_inner);
            asking.in_call = false;
            asking.reply = None;
            asking.asked.take()
        };
        if let Some(question) = asked {
            // Outside a run nobody will reply: the server's answer to the cancel stands.
            terminus_runtime::asking::ask(question);
        }
        outcome
    }

    async fn call_once(&self, name: &str, arguments: Value) -> ToolOutcome {
        match self.config.poll.get(name) {
            Some(poll) => self.call_until_ready(name, arguments, poll).await,
            None => self.call_plain(name, arguments).await,
        }
    }

    /// Calls tool `name` again while its result says not ready ([`Poll`]).
    async fn call_until_ready(&self, name: &str, arguments: Value, poll: &Poll) -> ToolOutcome {
        let started = tokio::time::Instant::now();
        let mut calls = 0u32;
        loop {
            let outcome = self.call_plain(name, arguments.clone()).await;
            calls += 1;
            if !poll.waits(&outcome) {
                return outcome;
            }
            if started.elapsed() + poll.every > poll.max_wait {
                let last = terminus_runtime::render_outcome(&outcome);
                return error(
                    ToolErrorKind::Timeout,
                    format!(
                        "still not ready after {calls} calls of `{name}` over {} ms (the client \
                         waited at most {} ms); its last result: {last}",
                        started.elapsed().as_millis(),
                        poll.max_wait.as_millis()
                    ),
                );
            }
            tokio::time::sleep(poll.every).await;
        }
    }

    async fn call_plain(&self, name: &str, arguments: Value) -> ToolOutcome {
        let (client, generation) = match self.peer().await {
            Ok(p) => p,
            Err(why) => return error(ToolErrorKind::NotFound, why),
        };
        let limit = self.config.tool_timeout;
        if self.config.tasks.iter().any(|t| t == name) {
            let (peer, server) = (client.peer(), &self.config.name);
            return crate::mcp_task::call(peer, server, &self.cancels, name, arguments, limit)
                .await;
        }
        let mut params = CallToolRequestParams::new(name.to_owned());
        if let Value::Object(map) = arguments {
            params = params.with_arguments(map);
        }
        let mut authorizations = 0;
        let outcome = loop {
            let outcome = tokio::time::timeout(limit, client.call_tool(params.clone())).await;
            if let Ok(Err(e)) = &outcome {
                match self.reauthorize(e, &mut authorizations).await {
                    Some(Ok(())) => continue,
                    Some(Err(failure)) => {
                        return error(ToolErrorKind::AuthFailed, failure.to_string());
                    }
                    None => {}
                }
            }
            break outcome;
        };
        match outcome {
            Err(_) => error(
                ToolErrorKind::Timeout,
                format!("no result within {} ms", limit.as_millis()),
            ),
            Ok(Ok(result)) => render(&result),
            Ok(Err(e)) => {
                let (kind, message) = error_kind(&e);
                if lost(&e) {
                    let note = self.restart(generation).await;
                    return error(ToolErrorKind::Failed, format!("{message}; {note}"));
                }
                error(kind, message)
            }
        }
    }

    /// After a request failed with `e`: when it is an auth challenge and this server has
    /// `auth`, authorize (at most [`MAX_AUTHORIZATIONS`] times per request, counted in
    /// `authorizations`) and say whether the request may be sent again. `None`: not an auth
    /// matter, or no `auth`.
    async fn reauthorize(
        &self,
        e: &ServiceError,
        authorizations: &mut u32,
    ) -> Option<Result<(), AuthFailure>> {
        let auth = self.auth.as_ref()?;
        let challenge = e.auth_challenge()?;
        Some(authorize(auth, challenge, authorizations).await)
    }

    /// After the connection of `generation` was lost: start the server once more, or give up.
    async fn restart(&self, generation: u64) -> String {
        let mut state = self.state.lock().await;
        if state.generation != generation {
            return "the server was started again".into();
        }
        let tail = self.stderr.text();
        if let Some(old) = state.client.take() {
            drop(old);
        }
        if state.restarts >= MAX_RESTARTS {
            let why = format!(
                "server `{}` was lost {} times; its tools are unavailable{}",
                self.config.name,
                state.restarts + 1,
                stderr_suffix(&tail)
            );
            state.gone = Some(why.clone());
            return why;
        }
        state.restarts += 1;
        state.generation += 1;
        match open(
            &self.config,
            &self.stderr,
            self.auth.as_deref(),
            &self.list_changes,
            &self.asking,
        )
        .await
        {
            Ok((client, pid)) => {
                state.client = Some(Arc::new(client));
                state.pid = pid;
                // The new process may offer other tools.
                self.list_changes.fetch_add(1, Ordering::SeqCst);
                "the server was started again; call the tool again if it is still needed".into()
            }
            Err(e) => {
                let why = format!("it could not be started again: {e}");
                state.gone = Some(why.clone());
                why
            }
        }
    }

    /// Ends the session and stops a child server.
    pub async fn shutdown(&self) {
        // A task whose wait was dropped is cancelled on the server before the connection goes.
        self.cancels.finish().await;
        let client = self.state.lock().await.client.take();
        match client.map(Arc::try_unwrap) {
            Some(Ok(client)) => {
                let _ = client.cancel().await;
            }
            // A call still holds it: it ends when that call does.
            Some(Err(client)) => client.cancellation_token().cancel(),
            None => {}
        }
    }
}

fn error(kind: ToolErrorKind, message: impl Into<String>) -> ToolOutcome {
    ToolOutcome::Error {
        kind,
        message: message.into(),
    }
}

/// Whether the error means the connection (or the child) is gone.
fn lost(e: &ServiceError) -> bool {
    matches!(
        e,
        ServiceError::TransportClosed | ServiceError::TransportSend(_)
    ) && !auth_status(e)
}

/// Whether an HTTP transport error is a 401 or 403 (with or without `WWW-Authenticate`).
fn auth_status(e: &ServiceError) -> bool {
    if matches!(e, ServiceError::McpError(_)) {
        return false;
    }
    let text = e.to_string();
    e.auth_challenge().is_some()
        || [
            "HTTP 401",
            "HTTP 403",
            "Auth required",
            "Insufficient scope",
        ]
        .iter()
        .any(|s| text.contains(s))
}

/// The table: an SDK error to a tool error kind and a message for the model.
pub fn error_kind(e: &ServiceError) -> (ToolErrorKind, String) {
    match e {
        ServiceError::McpError(data) => {
            let kind = match data.code {
                rmcp::model::ErrorCode::METHOD_NOT_FOUND => ToolErrorKind::NotFound,
                rmcp::model::ErrorCode::INVALID_PARAMS => ToolErrorKind::InvalidArguments,
                _ => ToolErrorKind::Failed,
            };
            (kind, format!("MCP error {}: {}", data.code.0, data.message))
        }
        ServiceError::Timeout { timeout } => (
            ToolErrorKind::Timeout,
            format!("no result within {} ms", timeout.as_millis()),
        ),
        _ if auth_status(e) => (
            ToolErrorKind::AuthFailed,
            format!("the server refused the credentials: {e}"),
        ),
        ServiceError::TransportClosed => (
            ToolErrorKind::Failed,
            "the server exited or the connection dropped during the call".into(),
        ),
        other => (ToolErrorKind::Failed, other.to_string()),
    }
}

/// One more authorization for a request that met `challenge`, unless it had its share.
async fn authorize(
    auth: &Authorizer,
    challenge: &str,
    authorizations: &mut u32,
) -> Result<(), AuthFailure> {
    if *authorizations >= MAX_AUTHORIZATIONS {
        return Err(crate::mcp_auth::fail(
            AuthStep::RetryLimit,
            format!(
                "the server still refused after {MAX_AUTHORIZATIONS} authorizations: {}",
                challenge_error(challenge)
            ),
        ));
    }
    *authorizations += 1;
    auth.authorize(challenge).await
}

/// The `error` a challenge names (`insufficient_scope`, `invalid_token`), for messages.
fn challenge_error(challenge: &str) -> String {
    challenge
        .split(',')
        .find_map(|p| {
            p.trim()
                .trim_start_matches("Bearer ")
                .strip_prefix("error=")
        })
        .map(|v| v.trim_matches('"').to_owned())
        .unwrap_or_else(|| "unauthorized".into())
}

fn auth_error(server: &str, failure: AuthFailure) -> McpError {
    match failure.login_url {
        Some(url) => McpError::Login {
            server: server.to_owned(),
            url,
        },
        None => McpError::Auth {
            server: server.to_owned(),
            step: failure.step,
            reason: failure.reason,
        },
    }
}

/// Completes the login a person made for server `config` (its [`McpError::Login`]):
/// `redirect` is the address the authorization server redirected their browser to, with the
/// code and `state`. The token is kept in the auth config's
/// [`credentials_file`](crate::McpAuth::credentials_file), which a later
/// [`McpServer::connect`] uses. A server with no such auth, a redirect that brings an `error`
/// or no code, a `state` no pending login has, a refused code: [`McpError::Auth`] naming the
/// step.
pub async fn complete_login(config: &McpConfig, redirect: &str) -> Result<(), McpError> {
    let (Some(auth), McpTransport::Http { url }) = (&config.auth, &config.transport) else {
        return Err(McpError::Auth {
            server: config.name.clone(),
            step: AuthStep::Authorization,
            reason: "the server has no OAuth config".into(),
        });
    };
    let authorizer = Authorizer::new(url, auth.clone())
        .await
        .map_err(|e| auth_error(&config.name, e))?;
    authorizer
        .complete(redirect)
        .await
        .map_err(|e| auth_error(&config.name, e))
}

async fn open(
    config: &McpConfig,
    stderr: &StderrTail,
    auth: Option<&Authorizer>,
    list_changes: &Arc<AtomicU64>,
    asking: &Arc<Mutex<Asking>>,
) -> Result<(Client, Option<u32>), McpError> {
    let mut capabilities = ClientCapabilities::default();
    if config.elicitation != Elicitation::Decline {
        let mut elicitation = ElicitationCapability::new();
        elicitation.form = Some(FormElicitationCapability::new());
        capabilities.elicitation = Some(elicitation);
    }
    let info = Handler {
        info: ClientConfig::new(
            capabilities,
            Implementation::new("terminus", env!("CARGO_PKG_VERSION")),
        )
        // The newest version whose handshake every current server and the conformance suite
        // accept.
        .with_protocol_version(match config.protocol {
            McpProtocol::Initialize => ProtocolVersion::LATEST_WITH_INITIALIZE,
            McpProtocol::Stateless => ProtocolVersion::V_2026_07_28,
        }),
        elicitation: config.elicitation,
        asking: asking.clone(),
    };
    let lifecycle = match config.protocol {
        McpProtocol::Initialize => ClientLifecycleMode::Initialize,
        McpProtocol::Stateless => ClientLifecycleMode::Discover {
            preferred_versions: vec![ProtocolVersion::V_2026_07_28],
        },
    };
    let server = config.name.clone();
    let initialize = |reason: String, stderr: String| McpError::Initialize {
        server: server.clone(),
        reason,
        stderr,
    };
    let mut pid = None;
    let client = match &config.transport {
        McpTransport::Stdio { command } => {
            let Some((program, args)) = command.split_first() else {
                return Err(McpError::EmptyCommand { server });
            };
            let mut cmd = tokio::process::Command::new(program);
            cmd.args(args);
            if let Some(dir) = &config.working_dir {
                cmd.current_dir(dir);
            }
            let (transport, child_stderr) = TokioChildProcess::builder(cmd)
                .stderr(Stdio::piped())
                .spawn()
                .map_err(|source| McpError::Spawn {
                    server: server.clone(),
                    program: program.clone(),
                    source,
                })?;
            if let Some(child_stderr) = child_stderr {
                stderr.follow(child_stderr);
            }
            pid = transport.id();
            match info
                .serve_with_lifecycle(Counting::new(transport, list_changes), lifecycle)
                .await
            {
                Ok(client) => client,
                Err(e) => {
                    // Let the child's last words arrive.
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    return Err(initialize(e.to_string(), stderr.text()));
                }
            }
        }
        McpTransport::Http { url } => {
            let transport_config = StreamableHttpClientTransportConfig::with_uri(url.clone());
            match auth {
                None => {
                    let http = reqwest::Client::builder()
                        .build()
                        .map_err(|e| initialize(e.to_string(), String::new()))?;
                    let transport =
                        StreamableHttpClientTransport::with_client(http, transport_config);
                    info.serve_with_lifecycle(Counting::new(transport, list_changes), lifecycle)
                        .await
                        .map_err(|e| initialize(e.to_string(), String::new()))?
                }
                Some(auth) => {
                    let mut authorizations = 0;
                    loop {
                        let transport = StreamableHttpClientTransport::with_client(
                            auth.http(),
                            transport_config.clone(),
                        );
                        match info
                            .clone()
                            .serve_with_lifecycle(
                                Counting::new(transport, list_changes),
                                lifecycle.clone(),
                            )
                            .await
                        {
                            Ok(client) => break client,
                            Err(e) => {
                                let Some(challenge) = e.auth_challenge() else {
                                    return Err(initialize(e.to_string(), String::new()));
                                };
                                authorize(auth, challenge, &mut authorizations)
                                    .await
                                    .map_err(|f| auth_error(&server, f))?;
                            }
                        }
                    }
                }
            }
        }
    };
    if config.protocol == McpProtocol::Stateless {
        listen_for_changes(&client, config.tool_timeout.min(Duration::from_secs(10))).await;
    }
    Ok((client, pid))
}

/// A 2026-07-28 session hears of tool-list changes only on a subscription
/// (`subscriptions/listen`): opened here when the server offers them, and drained until the
/// session ends ([`Counting`] counts each change as the transport receives it). A server that
/// refuses the subscription, or does not acknowledge it within `wait`, is used without: its
/// list is the one taken at start.
async fn listen_for_changes(client: &Client, wait: Duration) {
    let offers = client
        .peer()
        .peer_info()
        .and_then(|info| info.capabilities.tools.as_ref()?.list_changed)
        == Some(true);
    if !offers {
        return;
    }
    let filter = SubscriptionFilter::builder().tools_list_changed().build();
    let Ok(Ok(mut subscription)) = tokio::time::timeout(wait, client.peer().listen(filter)).await
    else {
        return;
    };
    tokio::spawn(async move { while let Ok(Some(_)) = subscription.next().await {} });
}

/// One tool of one server, as the runtime calls it.
#[derive(Debug)]
pub struct McpTool {
    server: Arc<McpServer>,
    name: String,
    description: String,
    parameters: Value,
}

#[async_trait]
impl Tool for McpTool {
    fn description(&self) -> &str {
        &self.description
    }

    fn parameters(&self) -> Value {
        self.parameters.clone()
    }

    fn idempotent(&self) -> bool {
        self.server.config.idempotent
    }

    async fn call(&self, arguments: Value) -> Result<ToolOutcome, Fault> {
        Ok(self.server.call(&self.name, arguments).await)
    }
}

/// The tools of several servers, named for the model: a tool keeps its own name unless two
/// servers offer it, then each is `{server}__{tool}` (providers allow only `[A-Za-z0-9_-]` in
/// tool names, so no dot).
#[derive(Debug, Default)]
pub struct McpTools {
    servers: Vec<Arc<McpServer>>,
    /// Each server's tools as listed at connection, with its list count then.
    listed: Vec<Listing>,
    tools: BTreeMap<String, Arc<McpTool>>,
}

/// One server's tools as listed, and its [`McpServer::list_changes`] when they were.
#[derive(Debug, Clone, Default)]
struct Listing {
    changes: u64,
    specs: Vec<ToolSpec>,
}

impl McpTools {
    /// Connects every server in `configs` and lists its tools. A server that cannot start stops
    /// everything (the others are shut down): its error names its `[[mcp]]` entry.
    pub async fn connect(configs: &[McpConfig]) -> Result<McpTools, McpError> {
        let mut listed = Vec::new();
        let mut servers = Vec::new();
        for config in configs {
            let outcome = match McpServer::connect(config.clone()).await {
                Ok(server) => {
                    let changes = server.list_changes();
                    server
                        .list()
                        .await
                        .map(|specs| (server, Listing { changes, specs }))
                }
                Err(e) => Err(e),
            };
            match outcome {
                Ok((server, listing)) => {
                    servers.push(server);
                    listed.push(listing);
                }
                Err(e) => {
                    for s in &servers {
                        s.shutdown().await;
                    }
                    return Err(e);
                }
            }
        }
        for (server, listing) in servers.iter().zip(&listed) {
            let specs = &listing.specs;
            // A held tool the server does not offer is a typo that would run a call unasked.
            let config = &server.config;
            let unknown = config
                .approval
                .iter()
                .chain(&config.deferred)
                .chain(&config.tools)
                .chain(&config.tasks)
                .chain(config.poll.keys())
                .find(|t| *t != "*" && !specs.iter().any(|s| s.name == **t));
            if let Some(tool) = unknown {
                let server_name = config.name.clone();
                let tool = tool.clone();
                for s in &servers {
                    s.shutdown().await;
                }
                return Err(McpError::UnknownHeld {
                    server: server_name,
                    tool,
                    offered: specs.iter().map(|s| s.name.clone()).collect(),
                });
            }
        }
        let tools = expose(&servers, &listed);
        Ok(McpTools {
            servers,
            listed,
            tools,
        })
    }

    /// The tools by the names the model sees, sorted (as listed at connection).
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.tools.keys().map(String::as_str)
    }

    /// The tool the model calls `name` (as listed at connection).
    pub fn get(&self, name: &str) -> Option<&Arc<McpTool>> {
        self.tools.get(name)
    }

    /// Adds every tool to `set`, with the holds of its server's `approval` and `deferred`, as a
    /// [`ToolSource`]: a server that says its list changed is listed again at the set's next
    /// [`ToolSet::refresh`] (before the run's next model call), and its tools replaced.
    pub fn add_to(&self, set: &mut ToolSet) {
        let now = tool_set(&self.tools);
        for name in now.names() {
            if let Some(tool) = now.get(name) {
                set.insert(name, tool.clone());
            }
        }
        for (name, hold) in now.holds() {
            set.hold(name, hold);
        }
        let source = Arc::new(Source {
            servers: self.servers.clone(),
            listed: tokio::sync::Mutex::new(self.listed.clone()),
        });
        set.watch(source, self.tools.keys().cloned());
    }

    /// Ends every session and stops the child servers.
    pub async fn shutdown(&self) {
        for server in &self.servers {
            server.shutdown().await;
        }
    }
}

/// The tools of `servers` (listed as `listed`, in the same order) by the names the model sees.
fn expose(servers: &[Arc<McpServer>], listed: &[Listing]) -> BTreeMap<String, Arc<McpTool>> {
    let mut offered: BTreeMap<&str, usize> = BTreeMap::new();
    for listing in listed {
        for spec in &listing.specs {
            *offered.entry(spec.name.as_str()).or_default() += 1;
        }
    }
    let mut tools = BTreeMap::new();
    for (server, listing) in servers.iter().zip(listed) {
        for spec in &listing.specs {
            let exposed = if offered.get(spec.name.as_str()).copied().unwrap_or(0) > 1 {
                format!("{}__{}", server.config.name, spec.name)
            } else {
                spec.name.clone()
            };
            tools.insert(
                exposed,
                Arc::new(McpTool {
                    server: server.clone(),
                    name: spec.name.clone(),
                    description: spec.description.clone(),
                    parameters: spec.parameters.clone(),
                }),
            );
        }
    }
    tools
}

/// `tools` as a set (without `write_todos`), with their servers' holds.
fn tool_set(tools: &BTreeMap<String, Arc<McpTool>>) -> ToolSet {
    let mut set = ToolSet::empty();
    for (name, tool) in tools {
        set.insert(name.clone(), tool.clone());
        if let Some(hold) = tool.server.config.hold(&tool.name) {
            set.hold(name.clone(), hold);
        }
    }
    set
}

/// The MCP tools of one run: a server whose list count moved since its tools were listed is
/// listed again (within its `tool_timeout`); one that cannot be keeps its last list.
struct Source {
    servers: Vec<Arc<McpServer>>,
    listed: tokio::sync::Mutex<Vec<Listing>>,
}

#[async_trait]
impl ToolSource for Source {
    async fn refresh(&self) -> Option<ToolSet> {
        let mut listed = self.listed.lock().await;
        let mut changed = false;
        for (server, listing) in self.servers.iter().zip(listed.iter_mut()) {
            let changes = server.list_changes();
            if changes == listing.changes {
                continue;
            }
            // Counted before listing: a change announced during the listing lists again.
            listing.changes = changes;
            if let Ok(Ok(specs)) =
                tokio::time::timeout(server.config.tool_timeout, server.list()).await
                && specs != listing.specs
            {
                listing.specs = specs;
                changed = true;
            }
        }
        changed.then(|| tool_set(&expose(&self.servers, &listed)))
    }
}

#[cfg(test)]
mod tests {
    //! One test per row of the table that the reference servers do not produce on demand.
    use super::*;
    use rmcp::model::{ErrorCode, ErrorData};

    fn rpc(code: ErrorCode) -> ServiceError {
        ServiceError::McpError(ErrorData::new(code, "from the server", None))
    }

    #[test]
    fn json_rpc_errors_map_by_code() {
        assert_eq!(
            error_kind(&rpc(ErrorCode::METHOD_NOT_FOUND)).0,
            ToolErrorKind::NotFound
        );
        assert_eq!(
            error_kind(&rpc(ErrorCode::INVALID_PARAMS)).0,
            ToolErrorKind::InvalidArguments
        );
        assert_eq!(
            error_kind(&rpc(ErrorCode::INTERNAL_ERROR)).0,
            ToolErrorKind::Failed
        );
        let (_, message) = error_kind(&rpc(ErrorCode::INVALID_PARAMS));
        assert_eq!(message, "MCP error -32602: from the server");
    }

    #[test]
    fn elicitation_is_declined_or_answered_with_the_defaults() {
        let request: ElicitRequestParams = serde_json::from_value(serde_json::json!({
            "mode": "form",
            "message": "fill in",
            "requestedSchema": {
                "type": "object",
                "properties": {
                    "name": { "type": "string", "default": "John Doe" },
                    "age": { "type": "integer", "default": 30 },
                    "status": { "type": "string", "enum": ["a", "b"], "default": "b" },
                    "verified": { "type": "boolean", "default": true },
                    "note": { "type": "string" }
                }
            }
        }))
        .expect("a form request");
        let accepted = elicit(Elicitation::Defaults, &request);
        assert_eq!(accepted.action, ElicitationAction::Accept);
        assert_eq!(
            accepted.content,
            Some(serde_json::json!({
                "name": "John Doe", "age": 30, "status": "b", "verified": true
            }))
        );
        let declined = elicit(Elicitation::Decline, &request);
        assert_eq!(declined.action, ElicitationAction::Decline);
        assert_eq!(declined.content, None);
    }

    #[tokio::test]
    async fn the_retry_limit_is_a_named_auth_error() {
        let auth = Authorizer::new("http://127.0.0.1:1/mcp", McpAuth::default())
            .await
            .expect("no network needed");
        let mut authorizations = MAX_AUTHORIZATIONS;
        let failure = authorize(
            &auth,
            r#"Bearer error="insufficient_scope", scope="mcp:admin""#,
            &mut authorizations,
        )
        .await
        .expect_err("over the limit");
        assert_eq!(failure.step, AuthStep::RetryLimit);
        assert_eq!(
            failure.to_string(),
            "OAuth retry_limit failed: the server still refused after 3 authorizations: \
             insufficient_scope"
        );
        let e = auth_error("remote", failure);
        assert!(
            e.to_string()
                .starts_with("[[mcp]] `remote`: OAuth retry_limit failed:"),
            "{e}"
        );
    }

    #[tokio::test]
    async fn an_unreachable_authorization_server_fails_discovery() {
        let auth = Authorizer::new("http://127.0.0.1:1/mcp", McpAuth::default())
            .await
            .expect("no network needed");
        let mut authorizations = 0;
        let failure = authorize(&auth, "Bearer", &mut authorizations)
            .await
            .expect_err("nothing listens on port 1");
        assert_eq!(failure.step, AuthStep::Discovery, "{failure}");
    }

    #[test]
    fn a_timeout_and_a_closed_transport() {
        let timeout = ServiceError::Timeout {
            timeout: Duration::from_millis(250),
        };
        assert_eq!(
            error_kind(&timeout),
            (ToolErrorKind::Timeout, "no result within 250 ms".into())
        );
        assert_eq!(
            error_kind(&ServiceError::TransportClosed).0,
            ToolErrorKind::Failed
        );
        assert!(lost(&ServiceError::TransportClosed));
        assert!(!lost(&rpc(ErrorCode::INTERNAL_ERROR)));
    }
}
