//! One connected server: calls with their timeouts, the tasks they wait on, and the
//! restarts of a server that was lost.

use super::config::{Elicitation, McpConfig, McpError, McpTransport, Poll, stderr_suffix};
use super::errors::{error, error_kind, lost};
use super::login::{auth_error, authorize};
use super::session::{Asking, Client, StderrTail, open};
use crate::content::render;
use crate::mcp_auth::{AuthFailure, Authorizer};
use crate::mcp_task::Revision;
use rmcp::model::{CallToolRequestParams, ElicitRequestParams};
use rmcp::service::ServiceError;
use serde_json::Value;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use terminus_kernel::{ToolErrorKind, ToolOutcome};

/// One connected MCP server.
pub struct McpServer {
    pub(super) config: McpConfig,
    /// OAuth state of an HTTP server with `auth` (it outlives reconnections).
    pub(super) auth: Option<Arc<Authorizer>>,
    pub(super) state: tokio::sync::Mutex<State>,
    pub(super) stderr: StderrTail,
    /// Bumped by each `notifications/tools/list_changed` (and each restart): a list taken at
    /// an older count may be out of date.
    pub(super) list_changes: Arc<AtomicU64>,
    /// The call in flight, for the elicitation handler ([`Elicitation::Person`]).
    pub(super) asking: Arc<Mutex<Asking>>,
    /// Held by the call in flight of an [`Elicitation::Person`] server: one at a time.
    pub(super) one_call: tokio::sync::Mutex<()>,
    /// The `tasks/cancel` of task waits that were dropped, to finish before the connection
    /// closes.
    pub(super) cancels: crate::mcp_task::Cancels,
}

pub(super) struct State {
    /// Shared by the calls in flight: a call goes through the running service (not only its
    /// peer), which answers a 2026-07-28 server's `input_required` rounds (SEP-2322).
    pub(super) client: Option<Arc<Client>>,
    /// The child's process id (stdio servers).
    pub(super) pid: Option<u32>,
    /// Bumped on every (re)connection, so that two calls that see the same loss restart once.
    pub(super) generation: u64,
    pub(super) restarts: u32,
    /// Why the server is gone for good.
    pub(super) gone: Option<String>,
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

    pub(super) async fn peer(&self) -> Result<(Arc<Client>, u64), String> {
        let state = self.state.lock().await;
        if let Some(why) = &state.gone {
            return Err(why.clone());
        }
        match &state.client {
            Some(client) => Ok((client.clone(), state.generation)),
            None => Err(format!("server `{}` is not connected", self.config.name)),
        }
    }

    /// Calls tool `name` of this server. Never a [`Fault`](terminus_runtime::Fault): every failure is an outcome. On an
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
            // Outside a run nobody will reply: a task's question is cancelled, as any other.
            asking.task = self.config.tasks.iter().any(|t| t == name)
                && terminus_runtime::asking::held_here();
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

    pub(super) async fn call_once(&self, name: &str, arguments: Value) -> ToolOutcome {
        match self.config.poll.get(name) {
            Some(poll) => self.call_until_ready(name, arguments, poll).await,
            None => self.call_plain(name, arguments).await,
        }
    }

    /// Calls tool `name` again while its result says not ready ([`Poll`]).
    pub(super) async fn call_until_ready(
        &self,
        name: &str,
        arguments: Value,
        poll: &Poll,
    ) -> ToolOutcome {
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

    pub(super) async fn call_plain(&self, name: &str, arguments: Value) -> ToolOutcome {
        let (client, generation) = match self.peer().await {
            Ok(p) => p,
            Err(why) => return error(ToolErrorKind::NotFound, why),
        };
        let limit = self.config.tool_timeout;
        if self.config.tasks.iter().any(|t| t == name) {
            let (peer, server) = (client.peer(), &self.config.name);
            // A person's server: a question the task asks may be left for the person.
            let parked = (self.config.elicitation == Elicitation::Person).then(|| {
                let asking = self.asking.lock().unwrap_or_else(PoisonError::into_inner);
                asking.parked.clone()
            });
            let revision = if peer
                .peer_info()
                .is_some_and(|info| info.capabilities.supports_tasks())
            {
                Revision::Extension
            } else {
                Revision::Experimental
            };
            // A 2026-07-28 task's questions come with its status, not to the handler: the
            // same policy answers them.
            let policy = self.config.elicitation;
            let answer = |request: &ElicitRequestParams| match policy {
                Elicitation::Person => self
                    .asking
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .answer(request),
                other => Some(super::session::elicit(other, request)),
            };
            let wait = crate::mcp_task::Wait {
                peer,
                server,
                cancels: &self.cancels,
                parked: parked.as_deref(),
                revision,
                answer: &answer,
            };
            return wait.call(name, arguments, limit).await;
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
    pub(super) async fn reauthorize(
        &self,
        e: &ServiceError,
        authorizations: &mut u32,
    ) -> Option<Result<(), AuthFailure>> {
        let auth = self.auth.as_ref()?;
        let challenge = e.auth_challenge()?;
        Some(authorize(auth, challenge, authorizations).await)
    }

    /// After the connection of `generation` was lost: start the server once more, or give up.
    pub(super) async fn restart(&self, generation: u64) -> String {
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
