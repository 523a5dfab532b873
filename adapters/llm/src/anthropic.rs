//! Anthropic Messages: the request body, the non-streamed response and the streamed one
//! (`message_start`, `content_block_start` / `_delta` / `_stop` with `text_delta`,
//! `input_json_delta` and `thinking_delta`, `message_delta` with the cumulative usage and the
//! `stop_reason`, `message_stop`, `ping`, `error`; unknown events and block types are ignored).
//! Pure: no IO here.

use crate::error::{ErrorInfo, event_failure};
use crate::json_str::push_raw_str;
use crate::reply::{self, Options, Reply};
use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::{Map, Value, json};
use std::borrow::Cow;
use terminus_kernel::{Finish, ModelErrorKind, ModelTurn, ToolCall, Usage};
use terminus_runtime::{Message, ModelFailure, ModelRequest, Role};

/// The API version sent in `anthropic-version`.
pub const API_VERSION: &str = "2023-06-01";

/// `max_tokens` is required by the Messages API; this is sent when the config sets none.
pub const DEFAULT_MAX_TOKENS: u32 = crate::DEFAULT_MAX_OUTPUT_TOKENS;

/// The JSON body of a `POST {base_url}/messages`. System messages go to `system`; tool results
/// (and the kernel's guidance that follows them) are merged into one user message, tool results
/// first, as the API requires; empty text blocks, which the API refuses, are left out.
pub fn request_body(options: Options<'_>, request: &ModelRequest<'_>) -> Value {
    let mut system = String::new();
    let mut messages: Vec<(Role, Vec<Value>)> = Vec::new();
    for m in request.messages {
        let (role, blocks) = match m.role {
            Role::System => {
                if !system.is_empty() {
                    system.push_str("\n\n");
                }
                system.push_str(&m.content);
                continue;
            }
            Role::User => (Role::User, text_block(&m.content).into_iter().collect()),
            Role::Tool => (Role::User, vec![tool_result(m)]),
            Role::Assistant => {
                let mut blocks: Vec<Value> = text_block(&m.content).into_iter().collect();
                blocks.extend(m.tool_calls.iter().map(|c| {
                    json!({ "type": "tool_use", "id": c.id, "name": c.name, "input": input(&c.arguments) })
                }));
                (Role::Assistant, blocks)
            }
        };
        if blocks.is_empty() {
            continue;
        }
        match messages.last_mut() {
            Some((last, content)) if *last == role => content.extend(blocks),
            _ => messages.push((role, blocks)),
        }
    }
    let messages: Vec<Value> = messages
        .into_iter()
        .map(|(role, content)| {
            let role = if role == Role::Assistant {
                "assistant"
            } else {
                "user"
            };
            json!({ "role": role, "content": content })
        })
        .collect();
    let mut body = json!({
        "model": options.model,
        "max_tokens": options.max_output_tokens.unwrap_or(DEFAULT_MAX_TOKENS),
        "messages": messages,
    });
    if !system.is_empty() {
        body["system"] = json!(system);
    }
    if !request.tools.is_empty() {
        body["tools"] = request
            .tools
            .iter()
            .map(|t| json!({ "name": t.name, "description": t.description, "input_schema": t.parameters }))
            .collect();
        if !request.tools_enabled {
            body["tool_choice"] = json!({ "type": "none" });
        }
    }
    if let Some(t) = options.temperature {
        body["temperature"] = json!(t);
    }
    if options.stream {
        body["stream"] = json!(true);
    }
    body
}

fn text_block(text: &str) -> Option<Value> {
    (!text.is_empty()).then(|| json!({ "type": "text", "text": text }))
}

fn tool_result(m: &Message) -> Value {
    json!({
        "type": "tool_result",
        "tool_use_id": m.tool_call_id.as_deref().unwrap_or_default(),
        "content": m.content,
    })
}

/// A `tool_use` input must be an object; arguments the model sent broken are sent back under
/// `_raw`, so the conversation stays valid and the model sees what it wrote.
fn input(arguments: &Value) -> Value {
    match arguments {
        Value::Object(_) => arguments.clone(),
        Value::String(raw) => json!({ "_raw": raw }),
        other => json!({ "_raw": other.to_string() }),
    }
}

/// The kernel's class of an Anthropic `stop_reason`: `max_tokens` and `pause_turn` (the reply is
/// unfinished and must be continued) are cut replies, `refusal` is filtered; unknown values are
/// kept as strings in [`Reply::finish_reason`].
pub fn finish(reason: &str) -> Finish {
    match reason {
        "max_tokens" | "pause_turn" => Finish::Length,
        "refusal" => Finish::ContentFilter,
        "tool_use" => Finish::ToolCalls,
        _ => Finish::Stop,
    }
}

/// `model_context_window_exceeded`: the reply stopped because the context window is full. It is
/// a context-length error like the 400 that says so up front.
fn window_exceeded(reason: Option<&str>) -> Result<(), ModelFailure> {
    if reason == Some("model_context_window_exceeded") {
        return Err(ModelFailure::new(
            ModelErrorKind::ContextOverflow,
            "stop_reason model_context_window_exceeded: the context window is full",
        ));
    }
    Ok(())
}

#[derive(Deserialize, Default, Clone, Copy)]
struct UsageWire {
    input_tokens: Option<u64>,
    output_tokens: Option<u64>,
    cache_creation_input_tokens: Option<u64>,
    cache_read_input_tokens: Option<u64>,
}

/// Usage as it accumulates over a stream: `message_start` gives the input, `message_delta` the
/// cumulative output (and, on newer servers, the input again).
#[derive(Debug, Clone, Copy, Default)]
struct UsageAcc {
    input: Option<u64>,
    output: Option<u64>,
}

impl UsageAcc {
    fn add(&mut self, wire: &UsageWire) {
        // The prompt's size is all of its tokens, cached or not.
        let cached = wire.cache_creation_input_tokens.unwrap_or(0)
            + wire.cache_read_input_tokens.unwrap_or(0);
        if let Some(input) = wire.input_tokens {
            self.input = Some(input + cached);
        }
        if let Some(output) = wire.output_tokens {
            self.output = Some(output);
        }
    }

    fn usage(self) -> Option<Usage> {
        if self.input.is_none() && self.output.is_none() {
            return None;
        }
        Some(Usage {
            input_tokens: self.input.unwrap_or(0),
            output_tokens: self.output.unwrap_or(0),
        })
    }
}

fn assemble(
    text: String,
    reasoning: bool,
    tool_calls: Vec<ToolCall>,
    finish_reason: Option<String>,
    usage: Option<Usage>,
    (id, model): (Option<String>, Option<String>),
) -> Result<Reply, ModelFailure> {
    window_exceeded(finish_reason.as_deref())?;
    Ok(Reply {
        turn: ModelTurn {
            needs_more_work: reply::needs_more_work(&text),
            text,
            tool_calls,
            usage,
            finish: finish_reason.as_deref().map(finish).unwrap_or_default(),
            reasoning,
            text_calls: None,
        },
        finish_reason,
        id,
        model,
    })
}

// ----- non-streamed -----

#[derive(Deserialize)]
struct ResponseWire {
    #[serde(rename = "type")]
    kind: Option<String>,
    id: Option<String>,
    model: Option<String>,
    content: Option<Vec<BlockWire>>,
    stop_reason: Option<String>,
    usage: Option<UsageWire>,
    error: Option<Value>,
}

#[derive(Deserialize)]
struct BlockWire {
    #[serde(rename = "type")]
    kind: String,
    text: Option<String>,
    thinking: Option<String>,
    id: Option<String>,
    name: Option<String>,
    input: Option<Value>,
}

/// A non-streamed response body.
pub fn parse_response(body: &[u8]) -> Result<Reply, ModelFailure> {
    let wire: ResponseWire = serde_json::from_slice(body).map_err(|e| {
        ModelFailure::new(
            ModelErrorKind::Server,
            format!("the response is not a message: {e}"),
        )
    })?;
    if wire.kind.as_deref() == Some("error") || wire.error.is_some() {
        return Err(event_failure(&ErrorInfo::parse(body)));
    }
    let mut text = String::new();
    let mut reasoning = false;
    let mut tool_calls = Vec::new();
    for block in wire.content.unwrap_or_default() {
        match block.kind.as_str() {
            "text" => text.push_str(block.text.as_deref().unwrap_or_default()),
            "thinking" => reasoning |= block.thinking.is_some_and(|t| !t.is_empty()),
            "redacted_thinking" => reasoning = true,
            "tool_use" => tool_calls.push(ToolCall {
                id: block.id.unwrap_or_default().into(),
                name: block.name.unwrap_or_default().into(),
                arguments: block
                    .input
                    .unwrap_or_else(|| Value::Object(Map::new()))
                    .into(),
            }),
            _ => {}
        }
    }
    let mut usage = UsageAcc::default();
    if let Some(u) = &wire.usage {
        usage.add(u);
    }
    assemble(
        text,
        reasoning,
        tool_calls,
        wire.stop_reason,
        usage.usage(),
        (wire.id, wire.model),
    )
}

// ----- streamed -----

#[derive(Deserialize)]
struct EventWire<'a> {
    #[serde(rename = "type", borrow)]
    kind: Cow<'a, str>,
    index: Option<usize>,
    #[serde(borrow)]
    message: Option<StartWire<'a>>,
    #[serde(borrow)]
    content_block: Option<BlockStartWire<'a>>,
    #[serde(borrow)]
    delta: Option<DeltaWire<'a>>,
    usage: Option<UsageWire>,
}

#[derive(Deserialize)]
struct StartWire<'a> {
    #[serde(borrow)]
    id: Option<Cow<'a, str>>,
    #[serde(borrow)]
    model: Option<Cow<'a, str>>,
    usage: Option<UsageWire>,
}

#[derive(Deserialize)]
struct BlockStartWire<'a> {
    #[serde(rename = "type", borrow)]
    kind: Cow<'a, str>,
    #[serde(borrow)]
    id: Option<Cow<'a, str>>,
    #[serde(borrow)]
    name: Option<Cow<'a, str>>,
    #[serde(borrow)]
    input: Option<&'a RawValue>,
    #[serde(borrow)]
    text: Option<&'a RawValue>,
}

#[derive(Deserialize)]
struct DeltaWire<'a> {
    #[serde(borrow)]
    text: Option<&'a RawValue>,
    #[serde(borrow)]
    partial_json: Option<&'a RawValue>,
    #[serde(borrow)]
    thinking: Option<&'a RawValue>,
    #[serde(borrow)]
    stop_reason: Option<Cow<'a, str>>,
}

#[derive(Debug)]
struct PartialCall {
    index: usize,
    id: String,
    name: String,
    /// `input_json_delta` fragments; when none came, the block's start `input`.
    arguments: String,
    start_input: String,
}

/// A streamed reply being assembled: feed it each SSE event's data with [`Stream::data`], then
/// [`Stream::finish`] when the body ends. Text and partial JSON are decoded straight from the
/// chunk into the buffers the reply keeps.
#[derive(Debug, Default)]
pub struct Stream {
    text: String,
    reasoning: bool,
    calls: Vec<PartialCall>,
    stop_reason: Option<String>,
    usage: UsageAcc,
    id: Option<String>,
    model: Option<String>,
    done: bool,
}

impl Stream {
    /// The text streamed so far.
    pub fn text(&self) -> &str {
        &self.text
    }

    /// A stream at its start.
    pub fn new() -> Stream {
        Stream::default()
    }

    /// Whether `message_stop` arrived.
    pub fn is_done(&self) -> bool {
        self.done
    }

    /// One SSE event's data (its `type` field says which event it is).
    pub fn data(&mut self, data: &str) -> Result<(), ModelFailure> {
        if self.done {
            return Ok(());
        }
        let event: EventWire<'_> = serde_json::from_str(data).map_err(|e| {
            ModelFailure::new(
                ModelErrorKind::Server,
                format!("a stream event is not JSON: {e}"),
            )
        })?;
        match event.kind.as_ref() {
            "message_start" => {
                if let Some(start) = event.message {
                    self.id = start.id.map(Cow::into_owned);
                    self.model = start.model.map(Cow::into_owned);
                    if let Some(u) = &start.usage {
                        self.usage.add(u);
                    }
                }
            }
            "content_block_start" => {
                let (Some(index), Some(block)) = (event.index, event.content_block) else {
                    return Ok(());
                };
                match block.kind.as_ref() {
                    "text" => {
                        if let Some(text) = block.text {
                            let _ = push_raw_str(&mut self.text, text);
                        }
                    }
                    "thinking" | "redacted_thinking" => self.reasoning = true,
                    "tool_use" => self.calls.push(PartialCall {
                        index,
                        id: block.id.map(Cow::into_owned).unwrap_or_default(),
                        name: block.name.map(Cow::into_owned).unwrap_or_default(),
                        arguments: String::new(),
                        start_input: block.input.map(|i| i.get().to_owned()).unwrap_or_default(),
                    }),
                    _ => {}
                }
            }
            "content_block_delta" => {
                let Some(delta) = event.delta else {
                    return Ok(());
                };
                if let Some(text) = delta.text {
                    let _ = push_raw_str(&mut self.text, text);
                }
                if delta.thinking.is_some() {
                    self.reasoning = true;
                }
                if let Some(partial) = delta.partial_json
                    && let Some(call) = self.calls.iter_mut().find(|c| Some(c.index) == event.index)
                {
                    let _ = push_raw_str(&mut call.arguments, partial);
                }
            }
            "message_delta" => {
                if let Some(reason) = event.delta.and_then(|d| d.stop_reason) {
                    self.stop_reason = Some(reason.into_owned());
                }
                if let Some(u) = &event.usage {
                    self.usage.add(u);
                }
            }
            "message_stop" => self.done = true,
            "error" => return Err(event_failure(&ErrorInfo::parse(data.as_bytes()))),
            // `ping`, `content_block_stop` and events this adapter does not know.
            _ => {}
        }
        Ok(())
    }

    /// The reply, once the body has ended. A stream that ended before `message_stop` and
    /// before any `stop_reason` was cut: a retryable `server` failure, never a short answer.
    pub fn finish(self) -> Result<Reply, ModelFailure> {
        if !self.done && self.stop_reason.is_none() {
            return Err(ModelFailure::new(
                ModelErrorKind::Server,
                "the stream ended before its end (message_stop or a stop_reason)",
            ));
        }
        let tool_calls = self
            .calls
            .into_iter()
            .map(|c| {
                let raw = if c.arguments.is_empty() {
                    &c.start_input
                } else {
                    &c.arguments
                };
                reply::call(c.id, c.name, raw)
            })
            .collect();
        assemble(
            self.text,
            self.reasoning,
            tool_calls,
            self.stop_reason,
            self.usage.usage(),
            (self.id, self.model),
        )
    }
}
