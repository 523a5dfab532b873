//! One session with a server: the client's side (its info, elicitation's answers), the
//! transport that counts tool-list changes, the child's stderr, and the opening itself.

use super::config::{Elicitation, McpConfig, McpError, McpProtocol, McpTransport};
use super::login::{auth_error, authorize};
use crate::mcp_auth::Authorizer;
use rmcp::model::{
    ClientCapabilities, ClientConfig, ElicitRequestParams, ElicitResult, ElicitationAction,
    ElicitationCapability, FormElicitationCapability, Implementation, ProtocolVersion,
    SubscriptionFilter, TASKS_EXTENSION_ID,
};
use rmcp::model::{JsonRpcMessage, ServerNotification};
use rmcp::service::{RequestContext, RunningService, RxJsonRpcMessage, TxJsonRpcMessage};
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::transport::{StreamableHttpClientTransport, TokioChildProcess, Transport};
use rmcp::{ClientHandler, ClientLifecycleMode, ClientServiceExt, RoleClient};
use serde_json::Value;
use std::process::Stdio;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;
use terminus_runtime::asking::{Question, Reply};
use tokio::io::AsyncReadExt;

pub(super) type Client = RunningService<RoleClient, Handler>;

/// The client side of the session: its info, and the answers to elicitation requests.
#[derive(Debug, Clone)]
pub(super) struct Handler {
    pub(super) info: ClientConfig,
    pub(super) elicitation: Elicitation,
    /// The call in flight of an [`Elicitation::Person`] server.
    pub(super) asking: Arc<Mutex<Asking>>,
}

/// What the call in flight of an [`Elicitation::Person`] server and the session's elicitation
/// handler share (its calls run one at a time).
#[derive(Debug, Default)]
pub(super) struct Asking {
    /// Whether a call is in flight.
    pub(super) in_call: bool,
    /// The person's reply to the question this call's earlier run asked (its second run).
    pub(super) reply: Option<(Question, Reply)>,
    /// Whether this is a second run: its unanswered questions are declined.
    pub(super) rerun: bool,
    /// The question this run asked and cancelled (a first run asks one).
    pub(super) asked: Option<Question>,
    /// Whether the call in flight waits for a job (an MCP task): a first run's question is left
    /// unanswered, so the job waits for the person's answer instead of ending without it.
    pub(super) task: bool,
    /// Told when a question is left unanswered ([`Asking::task`]): the task's wait stops there.
    pub(super) parked: Arc<tokio::sync::Notify>,
}

impl Asking {
    /// The answer to `request` for the call in flight; `None`: none yet (a task's first run:
    /// its job waits for the person's answer, given by the call's second run).
    pub(super) fn answer(&mut self, request: &ElicitRequestParams) -> Option<ElicitResult> {
        let decline = Some(ElicitResult::new(ElicitationAction::Decline));
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
                        Some(ElicitResult::new(ElicitationAction::Accept).with_content(content))
                    }
                    Reply::Defaults => Some(elicit(Elicitation::Defaults, request)),
                    Reply::Decline => decline,
                },
                _ => decline,
            };
        }
        if self.asked.is_some() {
            return decline;
        }
        self.asked = Some(question);
        if self.task {
            return None;
        }
        Some(ElicitResult::new(ElicitationAction::Cancel))
    }
}

impl ClientHandler for Handler {
    fn get_info(&self) -> ClientConfig {
        self.info.clone()
    }

    async fn create_elicitation(
        &self,
        request: ElicitRequestParams,
        context: RequestContext<RoleClient>,
    ) -> Result<ElicitResult, rmcp::ErrorData> {
        if self.elicitation != Elicitation::Person {
            return Ok(elicit(self.elicitation, &request));
        }
        let (answer, parked) = {
            let mut asking = self.asking.lock().unwrap_or_else(PoisonError::into_inner);
            (asking.answer(&request), asking.parked.clone())
        };
        if let Some(answer) = answer {
            return Ok(answer);
        }
        // A task's question, for a person: never answered by this handler (any answer, a
        // cancel or an error too, would reach the job). The task's wait stops, the run is
        // suspended, and the connection closes with the question still open on the server;
        // the call's second run gets it again and answers it. The handler outlives the
        // connection, so that the process it runs in can go on (a served run's): the request's
        // token is cancelled when the connection starts to close, and rmcp then sends what
        // handlers answer for up to its drain time (2 s, 5 s for a transport the server
        // closed); past that the transport is closed, and this handler's answer goes nowhere.
        // A server that withdraws its question (`notifications/cancelled`) cancels the token
        // too; rmcp drops the answer to a withdrawn request.
        parked.notify_waiters();
        context.ct.cancelled().await;
        tokio::time::sleep(PAST_THE_DRAIN).await;
        Ok(ElicitResult::new(ElicitationAction::Cancel))
    }
}

/// How long a handler that left a task's question open waits, once its request's token is
/// cancelled, before it ends: past rmcp's longest drain of a closing connection (5 s), so that
/// its answer is never sent.
const PAST_THE_DRAIN: std::time::Duration = std::time::Duration::from_secs(10);

/// A transport that counts the server's `notifications/tools/list_changed` as they are
/// received: before any later message (the result of the call that changed the list) is, so a
/// refresh after that result sees the count. (The SDK's notification callback runs in a task of
/// its own, which may come after.)
pub(super) struct Counting<T> {
    pub(super) inner: T,
    pub(super) list_changes: Arc<AtomicU64>,
}

impl<T> Counting<T> {
    pub(super) fn new(inner: T, list_changes: &Arc<AtomicU64>) -> Counting<T> {
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
pub(super) fn elicit(policy: Elicitation, request: &ElicitRequestParams) -> ElicitResult {
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
pub(super) struct StderrTail(Arc<Mutex<Vec<u8>>>);

impl StderrTail {
    const KEEP: usize = 8 * 1024;

    pub(super) fn text(&self) -> String {
        let bytes = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        String::from_utf8_lossy(&bytes).into_owned()
    }

    pub(super) fn follow(&self, mut stderr: tokio::process::ChildStderr) {
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

pub(super) async fn open(
    config: &McpConfig,
    stderr: &StderrTail,
    auth: Option<&Authorizer>,
    list_changes: &Arc<AtomicU64>,
    asking: &Arc<Mutex<Asking>>,
) -> Result<(Client, Option<u32>), McpError> {
    let mut capabilities = ClientCapabilities::default();
    if !config.tasks.is_empty() {
        // The 2026-07-28 tasks extension: a server that declares it answers the calls of
        // `tasks` with its tasks (an older one takes a `task` on the call).
        let extensions = capabilities.extensions.get_or_insert_with(Default::default);
        extensions.insert(TASKS_EXTENSION_ID.to_owned(), Default::default());
    }
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
pub(super) async fn listen_for_changes(client: &Client, wait: Duration) {
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

#[cfg(test)]
mod tests {
    use super::*;

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
}
