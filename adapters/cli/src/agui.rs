//! The AG-UI protocol as `terminus serve` speaks it (`docs/serve.md`): the request
//! (`RunAgentInput`, read with every problem naming its JSON path), the events of the answer's
//! server-sent event stream (camelCase fields, as AG-UI 1.0 gives them), the interrupts a
//! suspended run finishes with and the decisions a later `resume` makes of them, the run's state
//! (snapshot and RFC 6902 deltas), and [`Stream`], the observer that turns a run's steps into
//! events.
//!
//! Nothing here does IO: events go into a channel the HTTP layer (`crate::web`) drains.

use serde::Deserialize;
use serde_json::{Map, Value, json};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use terminus_kernel::{
    Decision, Entry, Hold, Machine, Policy, Record, Stats, ToolErrorKind, ToolOutcome,
};
use terminus_runtime::json_path::{self, JsonError};
use terminus_runtime::{Budget, HeldState, Observer, PendingCall, Report, Transition};
use tokio::sync::mpsc::UnboundedSender;

/// A `RunAgentInput`, as read: what `terminus serve` uses of it.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct RunInput {
    /// The thread: the execution id in the journal.
    pub(crate) thread_id: String,
    /// This run (one request).
    pub(crate) run_id: String,
    /// The run this one branches from, echoed in `RUN_STARTED`.
    pub(crate) parent_run_id: Option<String>,
    /// The task: the text of the last user message, then the `context` entries; `None` when
    /// there is no user message.
    pub(crate) task: Option<String>,
    /// Answers to the interrupts of the run this one continues.
    pub(crate) resume: Vec<ResumeEntry>,
}

/// An answer to one interrupt.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct ResumeEntry {
    /// The interrupt's id: a held call's id.
    pub(crate) interrupt_id: String,
    /// `resolved` (the person answered) or `cancelled` (they abandoned it).
    pub(crate) status: ResumeStatus,
    /// The answer (`resolved` only).
    #[serde(default)]
    pub(crate) payload: Option<Value>,
    /// Envelope data about the answer; not read.
    #[serde(default)]
    #[allow(dead_code)]
    pub(crate) metadata: Option<Map<String, Value>>,
}

/// Whether a person answered an interrupt.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum ResumeStatus {
    /// Answered: the payload is the answer.
    Resolved,
    /// Abandoned without an answer.
    Cancelled,
}

/// The wire form of `RunAgentInput`: unknown fields are ignored (AG-UI adds fields over time),
/// known ones are typed.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Wire {
    thread_id: String,
    run_id: String,
    #[serde(default)]
    parent_run_id: Option<String>,
    messages: Vec<Message>,
    #[serde(default)]
    tools: Vec<Value>,
    #[serde(default)]
    context: Vec<Context>,
    #[serde(default)]
    forwarded_props: Option<Value>,
    #[serde(default)]
    resume: Option<Vec<ResumeEntry>>,
}

#[derive(Debug, Deserialize)]
struct Message {
    role: String,
    #[serde(default)]
    content: Option<Value>,
}

#[derive(Debug, Deserialize)]
struct Context {
    description: String,
    value: String,
}

/// Keys of `forwardedProps` that would choose what runs: refused, since the endpoint runs only
/// the configs it was started with.
const REFUSED_PROPS: &[&str] = &["agent", "config", "model", "mcp", "policy", "system_prompt"];

/// Reads a request body as a `RunAgentInput`; the error names the JSON path at fault.
pub(crate) fn parse_input(body: &[u8]) -> Result<RunInput, JsonError> {
    let problem = |path: String, problem: String| JsonError {
        path,
        problem,
        position: None,
    };
    let text = std::str::from_utf8(body)
        .map_err(|e| problem("$".into(), format!("the body is not UTF-8: {e}")))?;
    let wire: Wire = json_path::read(text)?;
    if !wire.tools.is_empty() {
        return Err(problem(
            "$.tools".into(),
            "frontend tools are not served: the agent's tools are those of its config".into(),
        ));
    }
    if let Some(Value::Object(props)) = &wire.forwarded_props
        && let Some(key) = REFUSED_PROPS.iter().find(|k| props.contains_key(**k))
    {
        let kind = if *key == "agent" && props.get("agent").is_some_and(Value::is_object) {
            "an inline agent config is refused"
        } else {
            "refused"
        };
        return Err(problem(
            format!("$.forwardedProps.{key}"),
            format!(
                "{kind}: this endpoint runs only the configs it was started with, as they are \
                 (POST /agents/NAME names one)"
            ),
        ));
    }
    let mut task = None;
    for (i, message) in wire.messages.iter().enumerate().rev() {
        if message.role == "user" {
            task = Some(
                text_of(message.content.as_ref())
                    .map_err(|(below, e)| problem(format!("$.messages[{i}].content{below}"), e))?,
            );
            break;
        }
    }
    let task = task.map(|mut task| {
        if !wire.context.is_empty() {
            task.push_str("\n\nContext:");
            for c in &wire.context {
                task.push_str(&format!("\n- {}: {}", c.description, c.value));
            }
        }
        task
    });
    Ok(RunInput {
        thread_id: wire.thread_id,
        run_id: wire.run_id,
        parent_run_id: wire.parent_run_id,
        task,
        resume: wire.resume.unwrap_or_default(),
    })
}

/// A user message's text: a string, or the text parts of a list of parts. The error is the
/// path below the content at fault (`[2].text`, or empty) and the problem.
fn text_of(content: Option<&Value>) -> Result<String, (String, String)> {
    let none = || {
        (
            String::new(),
            "the task is the last user message's text: a non-empty string or text parts".to_owned(),
        )
    };
    match content {
        Some(Value::String(s)) if !s.trim().is_empty() => Ok(s.clone()),
        Some(Value::Array(parts)) => {
            let mut text = String::new();
            for (i, part) in parts.iter().enumerate() {
                if part.get("type").and_then(Value::as_str) == Some("text") {
                    let Some(piece) = part.get("text").and_then(Value::as_str) else {
                        return Err((
                            format!("[{i}].text"),
                            "a text part needs its text, a string".to_owned(),
                        ));
                    };
                    text.push_str(piece);
                }
            }
            if text.trim().is_empty() {
                Err(none())
            } else {
                Ok(text)
            }
        }
        _ => Err(none()),
    }
}

/// The interrupt a held call is, in `RUN_FINISHED`'s interrupt outcome: its id is the call's,
/// `reason` is `tool_call` (a call waiting for approval or for its answer) or `input_required`
/// (a question the call asked), `responseSchema` says what `resume[].payload` must be, and
/// `metadata.terminus` keeps the kind, the tool and its arguments.
pub(crate) fn interrupt(call: &PendingCall) -> Value {
    let arguments = call.arguments.to_string();
    let (reason, message, schema) = match call.kind {
        Hold::Approval => (
            "tool_call",
            format!("Approve the call of `{}` with {arguments}?", call.name),
            json!({
                "type": "object",
                "properties": {
                    "approved": { "type": "boolean" },
                    "editedArgs": { "type": "object", "description": "Run the call with these arguments instead (a full replacement)." },
                    "reason": { "type": "string", "description": "Why it is denied, for the model." }
                },
                "required": ["approved"]
            }),
        ),
        Hold::Deferred => (
            "tool_call",
            format!("Answer the call of `{}` with {arguments}.", call.name),
            json!({
                "type": "object",
                "properties": {
                    "result": { "description": "The call's output (any JSON)." },
                    "error": {
                        "type": "object",
                        "properties": {
                            "kind": { "type": "string", "enum": ToolErrorKind::ALL.iter().map(|k| k.as_str()).collect::<Vec<_>>() },
                            "message": { "type": "string" }
                        },
                        "required": ["kind", "message"]
                    }
                }
            }),
        ),
        Hold::Elicitation => {
            let (message, schema) = match &call.question {
                Some(q) => (q.message.clone(), q.schema.clone()),
                None => (
                    format!("The call of `{}` asks for an answer.", call.name),
                    json!({ "type": "object" }),
                ),
            };
            ("input_required", message, schema)
        }
    };
    json!({
        "id": call.call_id,
        "reason": reason,
        "message": message,
        "toolCallId": call.call_id,
        "responseSchema": schema,
        "metadata": { "terminus": {
            "kind": call.kind,
            "tool": call.name,
            "arguments": call.arguments,
        } },
    })
}

/// The decision `entry` (the `index`-th of `resume`) makes on the held call `held`; the error
/// names the path at fault.
pub(crate) fn decision(
    entry: &ResumeEntry,
    index: usize,
    held: &HeldState,
) -> Result<Decision, String> {
    let at = format!("$.resume[{index}]");
    if entry.status == ResumeStatus::Cancelled {
        // Abandoned: the call never runs, and the model is told so.
        return Ok(Decision::Deny {
            reason: Some("the person cancelled the decision without answering".to_owned()),
        });
    }
    let Some(payload) = &entry.payload else {
        return Err(format!(
            "{at}.payload: a resolved interrupt needs its payload ({})",
            expected(held.call.kind)
        ));
    };
    let Value::Object(fields) = payload else {
        return Err(format!(
            "{at}.payload: expected an object ({})",
            expected(held.call.kind)
        ));
    };
    match held.call.kind {
        Hold::Approval => {
            let approved = match fields.get("approved") {
                Some(Value::Bool(b)) => *b,
                _ => {
                    return Err(format!(
                        "{at}.payload.approved: expected true or false ({})",
                        expected(Hold::Approval)
                    ));
                }
            };
            if !approved {
                let reason = match fields.get("reason") {
                    None | Some(Value::Null) => None,
                    Some(Value::String(s)) => Some(s.clone()),
                    Some(_) => return Err(format!("{at}.payload.reason: expected a string")),
                };
                return Ok(Decision::Deny { reason });
            }
            match fields.get("editedArgs") {
                None | Some(Value::Null) => Ok(Decision::Approve),
                Some(arguments @ Value::Object(_)) => Ok(Decision::Edit {
                    arguments: arguments.clone(),
                }),
                Some(_) => Err(format!(
                    "{at}.payload.editedArgs: expected an object (the tool's arguments)"
                )),
            }
        }
        Hold::Deferred => match (fields.get("result"), fields.get("error")) {
            (Some(result), None) => Ok(Decision::Answer {
                outcome: ToolOutcome::ok(result.clone()),
            }),
            (None, Some(error)) => {
                let kind = error
                    .get("kind")
                    .cloned()
                    .and_then(|k| serde_json::from_value::<ToolErrorKind>(k).ok())
                    .ok_or_else(|| {
                        let known: Vec<&str> =
                            ToolErrorKind::ALL.iter().map(|k| k.as_str()).collect();
                        format!(
                            "{at}.payload.error.kind: expected one of {}",
                            known.join(", ")
                        )
                    })?;
                let message = error
                    .get("message")
                    .and_then(Value::as_str)
                    .ok_or_else(|| format!("{at}.payload.error.message: expected a string"))?;
                Ok(Decision::Answer {
                    outcome: ToolOutcome::Error {
                        kind,
                        message: message.to_owned(),
                    },
                })
            }
            _ => Err(format!(
                "{at}.payload: expected `result` or `error`, one of them ({})",
                expected(Hold::Deferred)
            )),
        },
        // The form's content, an object.
        Hold::Elicitation => Ok(Decision::Answer {
            outcome: ToolOutcome::ok(payload.clone()),
        }),
    }
}

fn expected(kind: Hold) -> &'static str {
    match kind {
        Hold::Approval => {
            "an approval: {\"approved\": true}, {\"approved\": true, \"editedArgs\": {...}} or \
             {\"approved\": false, \"reason\": \"...\"}"
        }
        Hold::Deferred => {
            "an answer: {\"result\": ...} or {\"error\": {\"kind\": \"...\", \"message\": \"...\"}}"
        }
        Hold::Elicitation => "the form's content, an object",
    }
}

/// One server-sent event: `data: {json}` and a blank line.
pub(crate) fn sse(event: &Value) -> String {
    format!("data: {event}\n\n")
}

/// The run's state, as `STATE_SNAPSHOT` carries it and `STATE_DELTA` patches it.
#[derive(Debug, Clone)]
pub(crate) struct RunState {
    execution: String,
    agent: String,
    policy: Policy,
    value: Value,
}

impl RunState {
    /// The state of `execution` of `agent`, from `machine` (a new run's, or a resumed one's as
    /// its journal left it).
    pub(crate) fn new(execution: &str, agent: &str, machine: &Machine) -> RunState {
        let mut state = RunState {
            execution: execution.to_owned(),
            agent: agent.to_owned(),
            policy: machine.policy().clone(),
            value: Value::Null,
        };
        state.value = state.render(
            "running",
            machine.phase().as_str(),
            &machine.stats(),
            0,
            &Parts::of(machine),
        );
        state
    }

    /// The state as JSON.
    pub(crate) fn value(&self) -> &Value {
        &self.value
    }

    fn render(
        &self,
        status: &str,
        phase: &str,
        stats: &Stats,
        elapsed_ms: u64,
        parts: &Parts,
    ) -> Value {
        let mut budgets = Map::new();
        for budget in Budget::all() {
            if let Some((spent, limit)) = budget.spent(&self.policy, stats, elapsed_ms) {
                budgets.insert(
                    budget.as_str().to_owned(),
                    json!({
                        "limit_field": budget.limit_name(),
                        "spent": spent,
                        "limit": limit,
                        "left": limit.saturating_sub(spent),
                    }),
                );
            }
        }
        json!({
            "execution": self.execution,
            "agent": self.agent,
            "status": status,
            "phase": phase,
            "step": stats.steps,
            "elapsed_ms": elapsed_ms,
            "counters": stats,
            "budgets": budgets,
            "todos": parts.todos,
            "excluded_tools": parts.excluded,
            "tool_budgets": parts.tool_budgets,
            "pending": [],
        })
    }

    /// Moves to `next`; the RFC 6902 patch from the state before (empty when nothing changed).
    fn update(&mut self, next: Value) -> Vec<Value> {
        let mut patch = Vec::new();
        diff(&self.value, &next, &mut String::new(), &mut patch);
        self.value = next;
        patch
    }
}

/// What the state shows of the machine besides its counters.
#[derive(Debug, Clone, Default)]
struct Parts {
    todos: Value,
    excluded: Vec<String>,
    /// Where each per-tool budget stands (`terminus_runtime::tool_budget_state`).
    tool_budgets: Value,
}

impl Parts {
    fn of(machine: &Machine) -> Parts {
        Parts {
            todos: serde_json::to_value(machine.todos()).unwrap_or(Value::Array(Vec::new())),
            excluded: machine
                .ledger()
                .excluded()
                .map(|(name, _)| name.to_owned())
                .collect(),
            tool_budgets: terminus_runtime::tool_budget_state(machine.policy(), machine.ledger()),
        }
    }
}

/// Appends to `patch` the RFC 6902 operations that turn `old` into `new` at `path`: objects
/// key by key, anything else (arrays included) replaced whole.
pub(crate) fn diff(old: &Value, new: &Value, path: &mut String, patch: &mut Vec<Value>) {
    match (old, new) {
        (Value::Object(a), Value::Object(b)) => {
            for (key, value) in a {
                let len = path.len();
                push_pointer(path, key);
                match b.get(key) {
                    None => patch.push(json!({ "op": "remove", "path": path })),
                    Some(next) => diff(value, next, path, patch),
                }
                path.truncate(len);
            }
            for (key, value) in b {
                if !a.contains_key(key) {
                    let len = path.len();
                    push_pointer(path, key);
                    patch.push(json!({ "op": "add", "path": path, "value": value }));
                    path.truncate(len);
                }
            }
        }
        (a, b) if a == b => {}
        (_, b) => patch.push(json!({ "op": "replace", "path": path, "value": b })),
    }
}

/// Appends `/key` to a JSON pointer (RFC 6901: `~` as `~0`, `/` as `~1`).
fn push_pointer(path: &mut String, key: &str) {
    path.push('/');
    path.push_str(&key.replace('~', "~0").replace('/', "~1"));
}

/// The observer that streams a run as AG-UI events: per kernel step `STEP_STARTED` (its name:
/// the rule that fired), the model's text and tool calls or the tool results the step was fed,
/// `STATE_DELTA` when the state changed, `STEP_FINISHED`. What a step saw is held until its
/// transition is reported ([`Observer::on_transition`]), after its entries went to the journal.
///
/// The model's text, when its reply streams, goes out as it arrives ([`Stream::text_sink`]):
/// `TEXT_MESSAGE_START` at its first piece, a `TEXT_MESSAGE_CONTENT` per piece, and
/// `TEXT_MESSAGE_END` once the kernel has taken the turn (before the turn's step), or the
/// failure that cut it (a retried call streams a new message).
pub(crate) struct Stream {
    out: UnboundedSender<String>,
    state: Arc<Mutex<RunState>>,
    held: Vec<Value>,
    parts: Parts,
    live: Arc<Mutex<LiveText>>,
}

/// The text message a streaming reply is writing, shared by the observer and the model's sink.
#[derive(Debug, Default)]
struct LiveText {
    /// The steps the machine has taken: the turn being streamed will be the next one.
    steps: u32,
    /// The message being streamed (its id), from its first piece until the kernel takes the turn.
    open: Option<String>,
}

impl Stream {
    /// Streams into `out`, from `state` (already sent as the snapshot), which it keeps up to
    /// date for whoever shares it (the end of the stream is written from it).
    pub(crate) fn new(out: UnboundedSender<String>, state: Arc<Mutex<RunState>>) -> Stream {
        let steps = lock(&state).value["step"]
            .as_u64()
            .and_then(|s| u32::try_from(s).ok())
            .unwrap_or(0);
        Stream {
            out,
            state,
            held: Vec::new(),
            parts: Parts::default(),
            live: Arc::new(Mutex::new(LiveText { steps, open: None })),
        }
    }

    fn send(&self, event: &Value) {
        // A closed stream is a client that left: the run goes on, journaled.
        let _ = self.out.send(sse(event));
    }

    /// Where the model gives a turn's text while its reply streams: the first piece opens the
    /// message (`msg-STEP`, the step the turn will be), each piece is a `TEXT_MESSAGE_CONTENT`.
    pub(crate) fn text_sink(&self) -> terminus_llm::TextSink {
        let out = self.out.clone();
        let live = Arc::clone(&self.live);
        Arc::new(move |piece: &str| {
            let mut live = live.lock().unwrap_or_else(PoisonError::into_inner);
            let send = |event: Value| {
                let _ = out.send(sse(&event));
            };
            let id = match &live.open {
                Some(id) => id.clone(),
                None => {
                    let id = format!("msg-{}", live.steps.saturating_add(1));
                    send(
                        json!({ "type": "TEXT_MESSAGE_START", "messageId": id, "role": "assistant" }),
                    );
                    live.open = Some(id.clone());
                    id
                }
            };
            send(json!({ "type": "TEXT_MESSAGE_CONTENT", "messageId": id, "delta": piece }));
        })
    }

    /// What ends a message the run left open: a reply cut by a failure that ended the run (a
    /// store's, a model's) before the kernel took it. The job closes it before the stream's end.
    pub(crate) fn open_text(&self) -> OpenText {
        OpenText {
            out: self.out.clone(),
            live: Arc::clone(&self.live),
        }
    }

    /// Ends the message being streamed, if one is: its id.
    fn end_streamed(&self, steps: u32) -> Option<String> {
        let mut live = self.live.lock().unwrap_or_else(PoisonError::into_inner);
        live.steps = steps;
        let id = live.open.take()?;
        self.send(&json!({ "type": "TEXT_MESSAGE_END", "messageId": id }));
        Some(id)
    }
}

/// A streamed message that may be left open when the run ends ([`Stream::open_text`]).
pub(crate) struct OpenText {
    out: UnboundedSender<String>,
    live: Arc<Mutex<LiveText>>,
}

impl OpenText {
    /// Sends `TEXT_MESSAGE_END` for the message still open, if one is.
    pub(crate) fn close(&self) {
        let open = self
            .live
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .open
            .take();
        if let Some(id) = open {
            let _ = self
                .out
                .send(sse(&json!({ "type": "TEXT_MESSAGE_END", "messageId": id })));
        }
    }
}

impl Observer for Stream {
    fn on_event(&mut self, event: &Entry, machine: &Machine) {
        let step = machine.stats().steps;
        // A streamed text ends as the kernel takes the turn, or whatever cut it short.
        let streamed = self.end_streamed(step);
        match event {
            Entry::Assistant(turn) => {
                let message_id = streamed.clone().unwrap_or_else(|| format!("msg-{step}"));
                if streamed.is_none() && !turn.text.is_empty() {
                    self.held.extend([
                        json!({ "type": "TEXT_MESSAGE_START", "messageId": message_id, "role": "assistant" }),
                        json!({ "type": "TEXT_MESSAGE_CONTENT", "messageId": message_id, "delta": turn.text }),
                        json!({ "type": "TEXT_MESSAGE_END", "messageId": message_id }),
                    ]);
                }
                for call in &turn.tool_calls {
                    let id = call.id.to_string();
                    self.held.extend([
                        json!({ "type": "TOOL_CALL_START", "toolCallId": id,
                                "toolCallName": call.name.to_string(), "parentMessageId": message_id }),
                        json!({ "type": "TOOL_CALL_ARGS", "toolCallId": id,
                                "delta": call.arguments.value().to_string() }),
                        json!({ "type": "TOOL_CALL_END", "toolCallId": id }),
                    ]);
                }
            }
            Entry::ToolResults { results } => {
                for result in results {
                    let id = result.call_id.to_string();
                    self.held.push(json!({
                        "type": "TOOL_CALL_RESULT",
                        "messageId": format!("result-{id}"),
                        "toolCallId": id,
                        "content": terminus_runtime::render_outcome(&result.outcome),
                        "role": "tool",
                    }));
                }
            }
            _ => {}
        }
        self.parts = Parts::of(machine);
    }

    fn on_transition(&mut self, t: &Transition<'_>) {
        let step_name = t.record.rule.name();
        self.send(&json!({ "type": "STEP_STARTED", "stepName": step_name }));
        for event in std::mem::take(&mut self.held) {
            self.send(&event);
        }
        let mut state = lock(&self.state);
        let mut next = state.render(
            "running",
            t.record.to.as_str(),
            &t.stats,
            t.elapsed_ms,
            &self.parts,
        );
        next["last"] = json!({
            "step": t.record.step,
            "from": t.record.from.as_str(),
            "to": t.record.to.as_str(),
            "input": t.record.input.label(),
            "rule": step_name,
            "summary": t.summary,
        });
        let patch = state.update(next);
        drop(state);
        if !patch.is_empty() {
            self.send(&json!({ "type": "STATE_DELTA", "delta": patch }));
        }
        self.send(&json!({ "type": "STEP_FINISHED", "stepName": step_name }));
    }

    /// A tool call waits for its job (an MCP task): each status its server reports is a
    /// `CUSTOM` event `terminus.job` (AG-UI's events for what the protocol does not name), so a
    /// client shows the wait as it happens.
    fn on_job(&mut self, status: &terminus_runtime::jobs::JobStatus) {
        self.send(&json!({
            "type": "CUSTOM",
            "name": "terminus.job",
            "value": {
                "toolCallId": status.call_id,
                "toolCallName": status.tool,
                "job": status.job,
                "status": status.status,
            },
        }));
    }

    fn on_stop(&mut self, report: &Report) {
        self.end_streamed(report.steps);
    }
}

/// The conversation a journal holds, as AG-UI messages (`MESSAGES_SNAPSHOT`): the task, each
/// model turn (its text and tool calls, `msg-STEP` as its events named it) and each tool
/// result (`result-CALL`). The kernel's own guidance to the model is not among them.
pub(crate) fn messages(records: &[Arc<Record>]) -> Vec<Value> {
    let mut messages = Vec::new();
    for record in records {
        match &record.entry {
            Entry::User { task } => {
                messages.push(json!({ "id": "task", "role": "user", "content": task }));
            }
            Entry::Assistant(turn) => {
                let mut message = json!({
                    "id": format!("msg-{}", record.key.checkpoint),
                    "role": "assistant",
                });
                if !turn.text.is_empty() {
                    message["content"] = json!(turn.text);
                }
                if !turn.tool_calls.is_empty() {
                    message["toolCalls"] = turn
                        .tool_calls
                        .iter()
                        .map(|call| {
                            json!({
                                "id": call.id.to_string(),
                                "type": "function",
                                "function": {
                                    "name": call.name.to_string(),
                                    "arguments": call.arguments.value().to_string(),
                                },
                            })
                        })
                        .collect();
                }
                messages.push(message);
            }
            Entry::ToolResults { results } => {
                for result in results {
                    let id = result.call_id.to_string();
                    messages.push(json!({
                        "id": format!("result-{id}"),
                        "role": "tool",
                        "toolCallId": id,
                        "content": terminus_runtime::render_outcome(&result.outcome),
                    }));
                }
            }
            _ => {}
        }
    }
    messages
}

/// The last state of a run that ended with `report`: its status, reason and result.
pub(crate) fn ended_state(state: &Value, report: &Report) -> Value {
    let mut next = state.clone();
    next["status"] = json!(report.outcome.outcome_str());
    next["reason"] = json!(report.outcome.reason_str());
    next["rule"] = json!(report.rule.name());
    next["result"] = json!(report.result);
    next
}

/// The last state of a run suspended on `pending` held calls.
pub(crate) fn suspended_state(state: &Value, pending: &[PendingCall]) -> Value {
    let mut next = state.clone();
    next["status"] = json!("suspended");
    next["pending"] = json!(pending);
    next
}

/// `STATE_DELTA` from `old` to `new`, or `None` when nothing changed.
pub(crate) fn delta(old: &Value, new: &Value) -> Option<Value> {
    let mut patch = Vec::new();
    diff(old, new, &mut String::new(), &mut patch);
    (!patch.is_empty()).then(|| json!({ "type": "STATE_DELTA", "delta": patch }))
}

/// The state, whoever panicked while holding it (a state is always whole: it is replaced, not
/// edited in place).
pub(crate) fn lock(state: &Mutex<RunState>) -> MutexGuard<'_, RunState> {
    state.lock().unwrap_or_else(PoisonError::into_inner)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Applies an RFC 6902 patch of `add`, `remove` and `replace` operations (what [`diff`]
    /// writes) to `doc`.
    fn apply(doc: &mut Value, patch: &[Value]) {
        for op in patch {
            let path = op["path"].as_str().expect("a path");
            let (parent, key) = path.rsplit_once('/').expect("not the root");
            let key = key.replace("~1", "/").replace("~0", "~");
            let target = doc.pointer_mut(parent).expect("the parent exists");
            let object = target.as_object_mut().expect("an object");
            match op["op"].as_str() {
                Some("remove") => {
                    object.remove(&key).expect("removed what was there");
                }
                Some("add" | "replace") => {
                    object.insert(key, op["value"].clone());
                }
                other => panic!("unexpected op {other:?}"),
            }
        }
    }

    #[test]
    fn a_diff_applied_to_the_old_state_gives_the_new_one() {
        let old = json!({ "a": 1, "gone": true, "n": { "x": [1, 2], "y": "same", "a/b~": 0 } });
        let new = json!({ "a": 2, "n": { "x": [1, 2, 3], "y": "same", "a/b~": 1 }, "new": null });
        let mut patch = Vec::new();
        diff(&old, &new, &mut String::new(), &mut patch);
        let paths: Vec<&str> = patch.iter().filter_map(|p| p["path"].as_str()).collect();
        assert_eq!(paths, ["/a", "/gone", "/n/a~1b~0", "/n/x", "/new"]);
        let mut doc = old.clone();
        apply(&mut doc, &patch);
        assert_eq!(doc, new);
        let mut none = Vec::new();
        diff(&new, &new, &mut String::new(), &mut none);
        assert!(none.is_empty());
    }

    #[test]
    fn a_bad_input_names_the_path() {
        let bad = |body: &str| parse_input(body.as_bytes()).expect_err(body).path;
        assert_eq!(bad("{"), "$");
        assert_eq!(bad(r#"{"runId": "r", "messages": []}"#), "$");
        assert_eq!(
            bad(r#"{"threadId": 1, "runId": "r", "messages": []}"#),
            "$.threadId"
        );
        assert_eq!(
            bad(r#"{"threadId": "t", "runId": "r", "messages": [{"content": "x"}]}"#),
            "$.messages[0]"
        );
        assert_eq!(
            bad(r#"{"threadId": "t", "runId": "r", "messages": [{"role": "user", "content": 3}]}"#),
            "$.messages[0].content"
        );
        assert_eq!(
            bad(
                r#"{"threadId": "t", "runId": "r", "messages": [], "resume": [{"interruptId": "c", "status": "maybe"}]}"#
            ),
            "$.resume[0].status"
        );
        assert_eq!(
            bad(
                r#"{"threadId": "t", "runId": "r", "messages": [], "forwardedProps": {"agent": {"model": {}}}}"#
            ),
            "$.forwardedProps.agent"
        );
        assert_eq!(
            bad(r#"{"threadId": "t", "runId": "r", "messages": [], "tools": [{"name": "x"}]}"#),
            "$.tools"
        );
    }

    #[test]
    fn the_task_is_the_last_user_message_with_the_context() {
        let input = parse_input(
            br#"{"threadId": "t", "runId": "r", "state": {}, "tools": [], "forwardedProps": {},
                 "messages": [{"id": "1", "role": "user", "content": "first"},
                              {"id": "2", "role": "assistant", "content": "ok"},
                              {"id": "3", "role": "user", "content": [{"type": "text", "text": "write "}, {"type": "text", "text": "the plan"}]}],
                 "context": [{"description": "repo", "value": "terminus"}]}"#,
        )
        .expect("valid");
        assert_eq!(
            input.task.as_deref(),
            Some("write the plan\n\nContext:\n- repo: terminus")
        );
        assert_eq!(
            (input.thread_id.as_str(), input.run_id.as_str()),
            ("t", "r")
        );
        let none =
            parse_input(br#"{"threadId": "t", "runId": "r", "messages": []}"#).expect("valid");
        assert_eq!(none.task, None);
    }

    fn held(kind: Hold) -> HeldState {
        HeldState {
            call: PendingCall {
                call_id: "c1".into(),
                name: "deploy".into(),
                arguments: json!({ "env": "prod" }),
                kind,
                question: None,
            },
            decision: None,
            key: terminus_kernel::Key::decision(3, 1, 0),
        }
    }

    fn entry(status: ResumeStatus, payload: Option<Value>) -> ResumeEntry {
        ResumeEntry {
            interrupt_id: "c1".into(),
            status,
            payload,
            metadata: None,
        }
    }

    #[test]
    fn resume_payloads_become_decisions() {
        let approval = held(Hold::Approval);
        let decide = |status, payload| decision(&entry(status, payload), 0, &approval);
        assert_eq!(
            decide(ResumeStatus::Resolved, Some(json!({ "approved": true }))),
            Ok(Decision::Approve)
        );
        assert_eq!(
            decide(
                ResumeStatus::Resolved,
                Some(json!({ "approved": true, "editedArgs": { "env": "staging" } }))
            ),
            Ok(Decision::Edit {
                arguments: json!({ "env": "staging" })
            })
        );
        assert_eq!(
            decide(
                ResumeStatus::Resolved,
                Some(json!({ "approved": false, "reason": "not on Friday" }))
            ),
            Ok(Decision::Deny {
                reason: Some("not on Friday".into())
            })
        );
        assert!(matches!(
            decide(ResumeStatus::Cancelled, None),
            Ok(Decision::Deny { .. })
        ));
        let e = decide(ResumeStatus::Resolved, Some(json!({ "approved": "yes" })))
            .expect_err("not a boolean");
        assert!(e.starts_with("$.resume[0].payload.approved: "), "{e}");
        let e = decide(ResumeStatus::Resolved, None).expect_err("no payload");
        assert!(e.starts_with("$.resume[0].payload: "), "{e}");

        let deferred = held(Hold::Deferred);
        assert_eq!(
            decision(
                &entry(
                    ResumeStatus::Resolved,
                    Some(json!({ "result": { "ok": 1 } }))
                ),
                2,
                &deferred
            ),
            Ok(Decision::Answer {
                outcome: ToolOutcome::ok(json!({ "ok": 1 }))
            })
        );
        let e = decision(
            &entry(
                ResumeStatus::Resolved,
                Some(json!({ "error": { "kind": "odd", "message": "m" } })),
            ),
            2,
            &deferred,
        )
        .expect_err("unknown kind");
        assert!(e.starts_with("$.resume[2].payload.error.kind: "), "{e}");
    }

    #[test]
    fn an_approval_interrupt_binds_the_call() {
        let value = interrupt(&held(Hold::Approval).call);
        assert_eq!(value["id"], "c1");
        assert_eq!(value["toolCallId"], "c1");
        assert_eq!(value["reason"], "tool_call");
        assert_eq!(value["responseSchema"]["required"], json!(["approved"]));
        assert_eq!(value["metadata"]["terminus"]["kind"], "approval");
    }
}
