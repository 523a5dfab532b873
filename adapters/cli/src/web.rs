//! `terminus serve --bind ADDR --agent NAME=CONFIG.toml ... --journal J [--key-env VAR]`: live
//! agents over HTTP, as AG-UI (`docs/serve.md`). `POST /agents/NAME` takes a `RunAgentInput` and
//! answers with the run as a server-sent event stream (`crate::agui`); `GET /agents` lists the
//! names; `GET /` is the page a person watches and steers runs from.
//!
//! Every run is an execution of the journal whose id is the thread's: `terminus inspect`,
//! `resume`, `approve` work on it as on any. A run that holds calls for a decision is a
//! suspended execution, and finishes with the AG-UI interrupt outcome; the next input on the
//! thread answers it with `resume` (or `terminus approve` does, from a shell).
//!
//! The trust boundary (`docs/security.md`): the configs are the operator's, named at start and
//! checked then; a request names one and gives the task, nothing else. Nothing of a request
//! reaches a command line, a model server's address or a key variable.

use crate::agent::{LiveAgent, StoredAgent};
use crate::agui::{self, ResumeEntry, RunInput, RunState, Stream};
use crate::common::{StoreArgs, open_store};
use crate::error::CliError;
use bytes::Bytes;
use clap::Args;
use http_body_util::{BodyExt as _, Full, Limited, StreamBody, combinators::BoxBody};
use hyper::body::{Frame, Incoming};
use hyper::{Method, Request, Response, StatusCode};
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use terminus_kernel::{Decision, Record, recover};
use terminus_runtime::{HeldState, Run, RunError, RuntimeConfig, Store};
use terminus_scenario::Scenario;
use tokio::sync::mpsc::{UnboundedSender, unbounded_channel};

/// The largest request body read (a `RunAgentInput` carries the conversation).
const MAX_BODY: usize = 4 << 20;

#[derive(Debug, Args)]
pub(crate) struct ServeArgs {
    /// Where the endpoint listens (HTTP/1.1).
    #[arg(long, value_name = "ADDR", default_value = "127.0.0.1:8080")]
    bind: SocketAddr,
    /// An agent the endpoint serves under NAME (repeatable, at least one):
    /// `POST /agents/NAME` runs it. A live agent's config (TOML), or a scenario file (`.json`:
    /// its scripted model and tools, its policy). Each is read and checked at start.
    #[arg(long = "agent", value_name = "NAME=CONFIG.toml|SCENARIO.json", required = true,
          value_parser = crate::serve::parse_named_agent)]
    agents: Vec<(String, PathBuf)>,
    #[command(flatten)]
    store: StoreArgs,
    /// The name of an environment variable holding the key requests must carry
    /// (`Authorization: Bearer KEY`); read at start. Without it, anyone who reaches ADDR can
    /// run the agents: bind it to loopback.
    #[arg(long = "key-env", value_name = "VAR")]
    key_env: Option<String>,
}

/// A served agent, as read at start.
enum Agent {
    /// A live config: a real model and its MCP servers.
    Live {
        stored: StoredAgent,
        live: Box<LiveAgent>,
    },
    /// A scenario file (`NAME=FILE.json`): its scripted model and tools and its policy, for a
    /// task a request gives. The conformance scenarios' runs, served.
    Scenario {
        scenario: Box<Scenario>,
        /// The file as JSON, kept with each execution (as `terminus run` keeps it).
        json: Value,
    },
}

impl Agent {
    /// Reads the config or scenario at `path`, served as `name`.
    fn read(name: &str, path: &std::path::Path) -> Result<Agent, CliError> {
        let flag = || format!("--agent {name}");
        if path.extension().is_some_and(|x| x == "json") {
            let scenario =
                Scenario::load(path).map_err(|e| CliError::Invalid(format!("{}: {e}", flag())))?;
            let json = crate::common::scenario_json(path).ok_or_else(|| {
                CliError::Invalid(format!("{}: {}: not JSON", flag(), path.display()))
            })?;
            return Ok(Agent::Scenario {
                scenario: Box::new(scenario),
                json,
            });
        }
        let stored = StoredAgent::read(path).map_err(|e| e.context(flag()))?;
        let live = LiveAgent::new(&stored).map_err(|e| e.context(flag()))?;
        Ok(Agent::Live {
            stored,
            live: Box::new(live),
        })
    }

    fn policy(&self) -> &terminus_kernel::Policy {
        match self {
            Agent::Live { live, .. } => live.policy(),
            Agent::Scenario { scenario, .. } => scenario.policy(),
        }
    }

    /// What an execution this agent starts keeps of it, served as `name`.
    fn host_data(&self, name: &str) -> Value {
        let mut host = match self {
            Agent::Live { stored, .. } => stored.host_data(),
            Agent::Scenario { json, .. } => json!({ "scenario": json }),
        };
        host["served_as"] = json!(name);
        host
    }

    /// Whether an execution whose host data is `host` is one this agent, served as `name`,
    /// started: the same name and the same config (or scenario).
    fn started(&self, name: &str, host: Option<&Value>) -> bool {
        let Some(host) = host else { return false };
        host.get("served_as").and_then(Value::as_str) == Some(name)
            && match self {
                Agent::Live { stored, .. } => {
                    host.pointer("/agent/config").and_then(Value::as_str)
                        == Some(stored.config.as_str())
                }
                Agent::Scenario { json, .. } => host.get("scenario") == Some(json),
            }
    }
}

/// How a job's run begins: a new execution, or the journal's.
enum Start {
    /// A new execution of the task, under the agent's policy.
    Fresh(String),
    /// The journal's execution, going on.
    Resume,
}

/// What every request shares.
struct Served {
    agents: BTreeMap<String, Arc<Agent>>,
    store: Arc<dyn Store>,
    key: Option<String>,
    lease: Duration,
}

type Body = BoxBody<Bytes, Infallible>;

/// `terminus serve`: serves until Ctrl-C, then 0.
pub(crate) async fn serve(args: ServeArgs) -> Result<u8, CliError> {
    let mut agents = BTreeMap::new();
    for (name, path) in &args.agents {
        let agent = Agent::read(name, path)?;
        if agents.insert(name.clone(), Arc::new(agent)).is_some() {
            return Err(CliError::Invalid(format!(
                "--agent {name}: the name is given twice"
            )));
        }
    }
    let key = match &args.key_env {
        None => None,
        Some(var) => match std::env::var(var) {
            Ok(value) if !value.is_empty() => Some(value),
            _ => {
                return Err(CliError::Invalid(format!(
                    "--key-env {var}: the variable is unset or empty"
                )));
            }
        },
    };
    let store = open_store(&args.store.journal, args.store.durability).await?;
    let listener = tokio::net::TcpListener::bind(args.bind)
        .await
        .map_err(|e| CliError::Invalid(format!("--bind {}: cannot listen: {e}", args.bind)))?;
    let addr = listener
        .local_addr()
        .map_err(|e| CliError::Internal(format!("--bind {}: {e}", args.bind)))?;
    let served = Arc::new(Served {
        agents,
        store,
        key,
        lease: Duration::from_millis(args.store.lease_ms),
    });
    eprintln!(
        "terminus: serving {} at http://{addr} (POST /agents/NAME with an AG-UI RunAgentInput)",
        served.agents.keys().cloned().collect::<Vec<_>>().join(", ")
    );
    let shutdown = tokio::signal::ctrl_c();
    tokio::pin!(shutdown);
    loop {
        let (stream, _) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                // A connection that failed before it was accepted is the client's loss; a
                // listener out of file descriptors gets a moment before it tries again.
                Err(_) => {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            _ = &mut shutdown => break,
        };
        let served = Arc::clone(&served);
        tokio::spawn(async move {
            let service = hyper::service::service_fn(move |request| {
                let served = Arc::clone(&served);
                async move { Ok::<_, Infallible>(handle(&served, request).await) }
            });
            let _ = hyper::server::conn::http1::Builder::new()
                .serve_connection(hyper_util::rt::TokioIo::new(stream), service)
                .await;
        });
    }
    // Runs still going stop with the process: their journals keep them, and the next input on
    // their thread (or `terminus resume`) goes on once their lease has run out.
    eprintln!("terminus: stopped serving");
    Ok(0)
}

/// One request's answer.
async fn handle(served: &Served, request: Request<Incoming>) -> Response<Body> {
    let path = request.uri().path().to_owned();
    let method = request.method().clone();
    if method == Method::GET && path == "/" {
        // The page holds nothing of the server's: its script asks for the key when the
        // endpoint wants one.
        let mut response = Response::new(full(PAGE));
        let headers = response.headers_mut();
        headers.insert(
            hyper::header::CONTENT_TYPE,
            hyper::header::HeaderValue::from_static("text/html; charset=utf-8"),
        );
        headers.insert(
            hyper::header::CONTENT_SECURITY_POLICY,
            hyper::header::HeaderValue::from_static(
                "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; \
                 connect-src 'self'",
            ),
        );
        return response;
    }
    let agents = path == "/agents";
    let agent = path.strip_prefix("/agents/").map(str::to_owned);
    if !agents && agent.is_none() {
        return error(StatusCode::NOT_FOUND, &format!("no such path: {path}"));
    }
    if !authorized(served, &request) {
        let mut response = error(
            StatusCode::UNAUTHORIZED,
            "this endpoint wants `Authorization: Bearer KEY` with its key",
        );
        response.headers_mut().insert(
            "www-authenticate",
            hyper::header::HeaderValue::from_static("Bearer"),
        );
        return response;
    }
    match (method, agent) {
        (Method::GET, None) => json_response(
            StatusCode::OK,
            &json!({ "agents": served.agents.keys().collect::<Vec<_>>() }),
        ),
        (Method::POST, Some(name)) => {
            let Some(agent) = served.agents.get(&name).map(Arc::clone) else {
                let names: Vec<&str> = served.agents.keys().map(String::as_str).collect();
                return error(
                    StatusCode::NOT_FOUND,
                    &format!(
                        "no agent named `{name}`; this endpoint serves {}",
                        names.join(", ")
                    ),
                );
            };
            let body = match Limited::new(request.into_body(), MAX_BODY).collect().await {
                Ok(body) => body.to_bytes(),
                Err(e) => {
                    return error(
                        StatusCode::BAD_REQUEST,
                        &format!("$: the body cannot be read (at most {MAX_BODY} bytes): {e}"),
                    );
                }
            };
            match agui::parse_input(&body) {
                Ok(input) => start(served, name, agent, input),
                Err(e) => error(
                    StatusCode::BAD_REQUEST,
                    &format!("{}: {}", e.path, e.problem),
                ),
            }
        }
        _ => error(
            StatusCode::METHOD_NOT_ALLOWED,
            "GET /agents lists the agents; POST /agents/NAME runs one",
        ),
    }
}

/// Whether the request carries the key (or none is wanted); compared in constant time.
fn authorized(served: &Served, request: &Request<Incoming>) -> bool {
    let Some(key) = &served.key else {
        return true;
    };
    let given = request
        .headers()
        .get(hyper::header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .unwrap_or("");
    let (a, b) = (given.as_bytes(), key.as_bytes());
    let mut differ = a.len() ^ b.len();
    for (i, byte) in b.iter().enumerate() {
        differ |= usize::from(a.get(i).copied().unwrap_or(0) ^ byte);
    }
    differ == 0
}

fn full(body: impl Into<Bytes>) -> Body {
    Full::new(body.into()).boxed()
}

fn json_response(status: StatusCode, body: &Value) -> Response<Body> {
    let mut response = Response::new(full(body.to_string()));
    *response.status_mut() = status;
    response.headers_mut().insert(
        hyper::header::CONTENT_TYPE,
        hyper::header::HeaderValue::from_static("application/json"),
    );
    response
}

fn error(status: StatusCode, message: &str) -> Response<Body> {
    json_response(status, &json!({ "error": message }))
}

/// Starts the run of `input` on `agent`, served as `name`, and answers with its event stream.
fn start(served: &Served, name: String, agent: Arc<Agent>, input: RunInput) -> Response<Body> {
    let (tx, mut rx) = unbounded_channel::<String>();
    let mut started =
        json!({ "type": "RUN_STARTED", "threadId": input.thread_id, "runId": input.run_id });
    if let Some(parent) = &input.parent_run_id {
        started["parentRunId"] = json!(parent);
    }
    let _ = tx.send(agui::sse(&started));
    let job = Job {
        agent: name,
        input,
        store: Arc::clone(&served.store),
        lease: served.lease,
        out: tx,
    };
    // The run is a task of its own, so a client that leaves does not stop it (it is journaled,
    // and the next input on its thread shows its end).
    tokio::spawn(async move { job.run(&agent).await });
    let stream = futures_util::stream::poll_fn(move |cx| {
        rx.poll_recv(cx)
            .map(|event| event.map(|e| Ok::<_, Infallible>(Frame::data(Bytes::from(e)))))
    });
    Response::builder()
        .header("content-type", "text/event-stream")
        .header("cache-control", "no-cache")
        .body(StreamBody::new(stream).boxed())
        .unwrap_or_else(|_| error(StatusCode::INTERNAL_SERVER_ERROR, "the stream"))
}

/// A failure before or after the run that ends the stream with `RUN_ERROR`.
struct Failed {
    code: &'static str,
    message: String,
}

fn failed(code: &'static str, message: impl Into<String>) -> Failed {
    Failed {
        code,
        message: message.into(),
    }
}

/// One request's run.
struct Job {
    agent: String,
    input: RunInput,
    store: Arc<dyn Store>,
    lease: Duration,
    out: UnboundedSender<String>,
}

impl Job {
    fn send(&self, event: &Value) {
        let _ = self.out.send(agui::sse(event));
    }

    fn fail(&self, code: &str, message: &str) {
        self.send(&json!({ "type": "RUN_ERROR", "message": message, "code": code }));
    }

    async fn run(&self, agent: &Agent) {
        if let Err(e) = self.go(agent).await {
            eprintln!(
                "terminus: thread {}: {}: {}",
                self.input.thread_id, e.code, e.message
            );
            self.fail(e.code, &e.message);
        }
    }

    fn execution(&self) -> &str {
        &self.input.thread_id
    }

    async fn go(&self, agent: &Agent) -> Result<(), Failed> {
        let execution = self.execution();
        let store_error = |e: terminus_runtime::StoreError| failed("store", e.to_string());
        let Some(spec) = self.store.spec(execution).await.map_err(store_error)? else {
            return self.fresh(agent).await;
        };
        if !agent.started(&self.agent, spec.host.as_ref()) {
            return Err(failed(
                "thread_of_another_agent",
                format!(
                    "thread {execution} is not a run of agent `{}` as this endpoint serves it: \
                     start a new thread",
                    self.agent
                ),
            ));
        }
        let records = self.store.records(execution).await.map_err(store_error)?;
        let recovery = recover(
            spec.policy.clone(),
            records.iter().map(|r| Record::clone(r)),
        )
        .map_err(|e| failed("internal", format!("execution {execution}: {e}")))?;
        let state = RunState::new(execution, &self.agent, &recovery.machine);
        if let Some(report) = self.store.report(execution).await.map_err(store_error)? {
            // A thread is one run: the same input again shows its end; a new task is refused.
            if self.input.task.as_deref().is_some_and(|t| t != spec.task) {
                return Err(failed(
                    "thread_ended",
                    format!(
                        "thread {execution} ended ({}): a thread is one run of the kernel; start \
                         a new thread for a new task",
                        report.outcome
                    ),
                ));
            }
            self.send(&json!({ "type": "STATE_SNAPSHOT", "snapshot": state.value() }));
            self.finish(Ok(report), state.value().clone()).await;
            return Ok(());
        }
        let held = terminus_runtime::held_calls(&recovery);
        let decisions = self.decisions(&held)?;
        let at = crate::decide::unix_ms();
        for (h, decision) in &decisions {
            crate::decide::record(self.store.as_ref(), execution, h, decision, at)
                .await
                .map_err(|e| failed("decision_conflict", e.to_string()))?;
        }
        self.send(&json!({ "type": "STATE_SNAPSHOT", "snapshot": state.value() }));
        eprintln!("terminus: thread {execution}: resumed ({})", self.agent);
        self.execute(agent, Start::Resume, state).await
    }

    /// Runs `agent` from `start`, streaming its steps from `state` (sent as the snapshot), and
    /// ends the stream.
    async fn execute(&self, agent: &Agent, start: Start, state: RunState) -> Result<(), Failed> {
        let execution = self.execution().to_owned();
        let shared = Arc::new(Mutex::new(state));
        let stream = Stream::new(self.out.clone(), Arc::clone(&shared));
        let open_text = stream.open_text();
        let store = Arc::clone(&self.store) as Arc<dyn terminus_runtime::Claims>;
        let host = agent.host_data(&self.agent);
        let result = match agent {
            Agent::Live { live, .. } => {
                let mcp = live
                    .connect()
                    .await
                    .map_err(|e| failed("unavailable", e.to_string()))?;
                let streaming = live.streaming(stream.text_sink());
                let config = live.runtime(self.lease);
                let result = match start {
                    Start::Fresh(task) => {
                        let policy = agent.policy().clone();
                        let start = |model| {
                            Run::new(task, policy, model)
                                .name("agent")
                                .execution(execution)
                                .host_data(host)
                        };
                        let run = streaming.run(start, &mcp, None);
                        run.store(store)
                            .config(config)
                            .observer(stream)
                            .execute()
                            .await
                    }
                    Start::Resume => {
                        let run = streaming.run(|model| Run::resume(execution, model), &mcp, None);
                        // The system prompt is the journal's (as `terminus resume` takes it).
                        let config = RuntimeConfig {
                            system_prompt: None,
                            ..config
                        };
                        run.store(store)
                            .config(config)
                            .observer(stream)
                            .execute()
                            .await
                    }
                };
                mcp.shutdown().await;
                result
            }
            Agent::Scenario { scenario, .. } => match start {
                Start::Fresh(task) => {
                    let run = scenario.run_as(task, agent.policy().clone());
                    let run = run.execution(execution);
                    run.host_data(host)
                        .store(store)
                        .observer(stream)
                        .execute()
                        .await
                }
                Start::Resume => {
                    let run = scenario.resume(execution).store(store);
                    run.observer(stream).execute().await
                }
            },
        };
        // A reply a failure cut before the kernel took it: its message ends before the run's.
        open_text.close();
        let last = agui::lock(&shared).value().clone();
        self.finish(result, last).await;
        Ok(())
    }

    /// The decisions `resume` makes, each on its held call, once every one is checked: every
    /// call still open must be answered, each entry must name a held call, and a call decided
    /// already must be decided alike.
    fn decisions<'h>(
        &self,
        held: &'h [HeldState],
    ) -> Result<Vec<(&'h HeldState, Decision)>, Failed> {
        let execution = self.execution();
        let ids = || {
            held.iter()
                .map(|h| h.call.call_id.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        };
        let mut decided = Vec::new();
        for (i, entry) in self.input.resume.iter().enumerate() {
            let Some(h) = held.iter().find(|h| h.call.call_id == entry.interrupt_id) else {
                return Err(failed(
                    "unknown_interrupt",
                    format!(
                        "$.resume[{i}].interruptId: thread {execution} holds no call `{}` ({})",
                        entry.interrupt_id,
                        if held.is_empty() {
                            "it holds none".to_owned()
                        } else {
                            format!("held: {}", ids())
                        }
                    ),
                ));
            };
            let decision = agui::decision(entry, i, h).map_err(|e| failed("invalid_resume", e))?;
            match &h.decision {
                Some(earlier) if *earlier != decision => {
                    return Err(failed(
                        "decision_conflict",
                        format!(
                            "$.resume[{i}]: call `{}` was already decided ({}): a decision is final",
                            h.call.call_id,
                            earlier.as_str()
                        ),
                    ));
                }
                // The same decision again changes nothing.
                Some(_) => {}
                None => decided.push((h, decision)),
            }
        }
        let answered = |h: &HeldState| {
            self.input
                .resume
                .iter()
                .any(|e: &ResumeEntry| e.interrupt_id == h.call.call_id)
        };
        let open: Vec<&str> = held
            .iter()
            .filter(|h| h.decision.is_none() && !answered(h))
            .map(|h| h.call.call_id.as_str())
            .collect();
        if !open.is_empty() {
            let code = if self.input.resume.is_empty() {
                "interrupts_pending"
            } else {
                "resume_incomplete"
            };
            return Err(failed(
                code,
                format!(
                    "$.resume: thread {execution} waits for a decision on every held call; not \
                     answered: {}",
                    open.join(", ")
                ),
            ));
        }
        Ok(decided)
    }

    /// A new thread: a new execution, its config kept with it.
    async fn fresh(&self, agent: &Agent) -> Result<(), Failed> {
        let execution = self.execution();
        if !self.input.resume.is_empty() {
            return Err(failed(
                "unknown_interrupt",
                format!("$.resume: thread {execution} is new: it holds no call"),
            ));
        }
        let Some(task) = self.input.task.clone() else {
            return Err(failed(
                "no_task",
                format!("$.messages: thread {execution} is new: its task is a user message"),
            ));
        };
        let machine = terminus_kernel::Machine::new(agent.policy().clone())
            .map_err(|e| failed("invalid_policy", e.to_string()))?;
        let state = RunState::new(execution, &self.agent, &machine);
        self.send(&json!({ "type": "STATE_SNAPSHOT", "snapshot": state.value() }));
        eprintln!("terminus: thread {execution}: started ({})", self.agent);
        self.execute(agent, Start::Fresh(task), state).await
    }

    /// The end of the stream: the last state, the `inspect` text, then `RUN_FINISHED` (the
    /// result and the report, or the interrupt outcome) or `RUN_ERROR` (the stop reason).
    async fn finish(&self, result: Result<terminus_runtime::Report, RunError>, state: Value) {
        let execution = self.execution();
        let done = |ended: &str| {
            eprintln!("terminus: thread {execution}: {ended}");
        };
        match result {
            Ok(report) => {
                let last = agui::ended_state(&state, &report);
                if let Some(delta) = agui::delta(&state, &last) {
                    self.send(&delta);
                }
                self.inspect().await;
                done(&report.outcome.to_string());
                let report_json = serde_json::to_value(&report).unwrap_or(Value::Null);
                if report.outcome.is_complete() {
                    self.send(&json!({
                        "type": "RUN_FINISHED",
                        "threadId": execution,
                        "runId": self.input.run_id,
                        "outcome": { "type": "success" },
                        "result": { "result": report.result, "report": report_json },
                    }));
                } else {
                    self.send(&json!({ "type": "CUSTOM", "name": "terminus.report", "value": report_json }));
                    self.send(&json!({
                        "type": "RUN_ERROR",
                        "message": format!(
                            "{} after {} (rule {})",
                            report.outcome,
                            crate::common::steps(report.steps),
                            report.rule.name()
                        ),
                        "code": report.outcome.reason_str(),
                    }));
                }
            }
            Err(RunError::Suspended(suspended)) => {
                let last = agui::suspended_state(&state, &suspended.pending);
                // The messages and the state a resume needs go out before the interrupt
                // (AG-UI); the resume itself goes on from the journal.
                if let Ok(records) = self.store.records(execution).await {
                    let messages = agui::messages(&records);
                    self.send(&json!({ "type": "MESSAGES_SNAPSHOT", "messages": messages }));
                }
                self.send(&json!({ "type": "STATE_SNAPSHOT", "snapshot": last }));
                self.inspect().await;
                done(&format!(
                    "suspended: {} held call(s)",
                    suspended.pending.len()
                ));
                let interrupts: Vec<Value> =
                    suspended.pending.iter().map(agui::interrupt).collect();
                self.send(&json!({
                    "type": "RUN_FINISHED",
                    "threadId": execution,
                    "runId": self.input.run_id,
                    "outcome": { "type": "interrupt", "interrupts": interrupts },
                }));
            }
            Err(e) => {
                done(&format!("error: {e}"));
                self.fail(e.class(), &e.to_string());
            }
        }
    }

    /// `terminus inspect`'s text of the execution, as a `CUSTOM` event (`terminus.inspect`).
    async fn inspect(&self) {
        if let Ok(explanation) =
            crate::inspect::explain(self.store.as_ref(), self.execution()).await
        {
            self.send(&json!({ "type": "CUSTOM", "name": "terminus.inspect", "value": explanation.text() }));
        }
    }
}

/// The page (`GET /`): static HTML and a script, no build step.
const PAGE: &str = include_str!("../page/index.html");
