//! The events: the observer that turns a run's steps into AG-UI events, the server-sent event
//! framing, and the conversation a journal holds as AG-UI messages.

use serde_json::{Value, json};
use std::sync::{Arc, Mutex, PoisonError};
use terminus_kernel::{Entry, Machine, Record};
use terminus_runtime::{Observer, Report, Transition};
use tokio::sync::mpsc::UnboundedSender;

use super::state::{RunState, lock};
use terminus_runtime::StateParts;

/// One server-sent event: `data: {json}` and a blank line.
pub(crate) fn sse(event: &Value) -> String {
    format!("data: {event}\n\n")
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
    pub(super) out: UnboundedSender<String>,
    pub(super) state: Arc<Mutex<RunState>>,
    pub(super) held: Vec<Value>,
    pub(super) parts: StateParts,
    pub(super) live: Arc<Mutex<LiveText>>,
}

/// The text message a streaming reply is writing, shared by the observer and the model's sink.
#[derive(Debug, Default)]
pub(super) struct LiveText {
    /// The steps the machine has taken: the turn being streamed will be the next one.
    pub(super) steps: u32,
    /// The message being streamed (its id), from its first piece until the kernel takes the turn.
    pub(super) open: Option<String>,
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
            parts: StateParts::default(),
            live: Arc::new(Mutex::new(LiveText { steps, open: None })),
        }
    }

    pub(super) fn send(&self, event: &Value) {
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
    pub(super) fn end_streamed(&self, steps: u32) -> Option<String> {
        let mut live = self.live.lock().unwrap_or_else(PoisonError::into_inner);
        live.steps = steps;
        let id = live.open.take()?;
        self.send(&json!({ "type": "TEXT_MESSAGE_END", "messageId": id }));
        Some(id)
    }
}

/// A streamed message that may be left open when the run ends ([`Stream::open_text`]).
pub(crate) struct OpenText {
    pub(super) out: UnboundedSender<String>,
    pub(super) live: Arc<Mutex<LiveText>>,
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
        self.parts = StateParts::of(machine);
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
