//! OpenAI-compatible Chat Completions (OpenAI, OpenRouter, DeepSeek, vLLM, Ollama, llama.cpp's
//! server, LiteLLM): the request body, the non-streamed response and the streamed one. Pure:
//! no IO here (the client is `crate::client`).
//!
//! Parsing is lenient, because compatible servers differ: unknown fields are ignored, an unknown
//! `finish_reason` is kept as a string, `choices` may be `null` or missing, `content` may be a
//! string, `null`, `""`, `[]` or a list of parts, reasoning comes as `reasoning_content`
//! (DeepSeek, vLLM) or `reasoning` (OpenRouter), usage comes in its own final chunk
//! (`choices: []`, `stream_options.include_usage`) or in any chunk.

use crate::error::{ErrorInfo, event_failure};
use crate::json_str::{NotAString, push_raw_str};
use crate::reply::{self, Reply};
use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::{Value, json};
use smallvec::SmallVec;
use std::borrow::Cow;
use terminus_kernel::{Finish, ModelErrorKind, ModelTurn, Usage};
use terminus_runtime::{ModelFailure, ModelRequest, Role};

/// The request options that are not in the [`ModelRequest`].
#[derive(Debug, Clone, Copy)]
pub struct Options<'a> {
    /// The model name.
    pub model: &'a str,
    /// `max_tokens`.
    pub max_output_tokens: Option<u32>,
    /// Stream the reply.
    pub stream: bool,
}

/// The JSON body of a `POST {base_url}/chat/completions`.
pub fn request_body(options: Options<'_>, request: &ModelRequest<'_>) -> Value {
    let messages: Vec<Value> = request
        .messages
        .iter()
        .map(|m| match m.role {
            Role::System => json!({ "role": "system", "content": m.content }),
            Role::User => json!({ "role": "user", "content": m.content }),
            Role::Tool => json!({
                "role": "tool",
                "tool_call_id": m.tool_call_id.as_deref().unwrap_or_default(),
                "content": m.content,
            }),
            Role::Assistant => {
                let mut out = json!({ "role": "assistant", "content": m.content });
                if !m.tool_calls.is_empty() {
                    if m.content.is_empty() {
                        out["content"] = Value::Null;
                    }
                    out["tool_calls"] = m
                        .tool_calls
                        .iter()
                        .map(|c| {
                            json!({
                                "id": c.id,
                                "type": "function",
                                "function": { "name": c.name, "arguments": arguments_text(&c.arguments) },
                            })
                        })
                        .collect();
                }
                out
            }
        })
        .collect();
    let mut body = json!({ "model": options.model, "messages": messages });
    if !request.tools.is_empty() {
        body["tools"] = request
            .tools
            .iter()
            .map(|t| {
                json!({ "type": "function", "function": {
                    "name": t.name, "description": t.description, "parameters": t.parameters } })
            })
            .collect();
        if !request.tools_enabled {
            body["tool_choice"] = json!("none");
        }
    }
    if let Some(max) = options.max_output_tokens {
        body["max_tokens"] = json!(max);
    }
    if options.stream {
        body["stream"] = json!(true);
        body["stream_options"] = json!({ "include_usage": true });
    }
    body
}

/// Arguments as the wire carries them: a JSON text. Arguments the model sent broken (kept as a
/// JSON string by [`reply::arguments`]) go back as the model wrote them.
pub(crate) fn arguments_text(arguments: &Value) -> String {
    match arguments {
        Value::String(raw) => raw.clone(),
        other => other.to_string(),
    }
}

/// The kernel's class of an OpenAI `finish_reason`. `refusal` and unknown values are kept as
/// strings in [`Reply::finish_reason`]; a refusal is never an answer.
pub fn finish(reason: &str) -> Finish {
    match reason {
        "length" | "max_tokens" => Finish::Length,
        "content_filter" | "refusal" => Finish::ContentFilter,
        "tool_calls" | "function_call" => Finish::ToolCalls,
        _ => Finish::Stop,
    }
}

#[derive(Deserialize, Default)]
struct UsageWire {
    prompt_tokens: Option<u64>,
    completion_tokens: Option<u64>,
}

impl UsageWire {
    fn usage(&self) -> Option<Usage> {
        if self.prompt_tokens.is_none() && self.completion_tokens.is_none() {
            return None;
        }
        Some(Usage {
            input_tokens: self.prompt_tokens.unwrap_or(0),
            output_tokens: self.completion_tokens.unwrap_or(0),
        })
    }
}

// ----- non-streamed -----

#[derive(Deserialize)]
struct ResponseWire {
    id: Option<String>,
    choices: Option<Vec<ChoiceWire>>,
    usage: Option<UsageWire>,
    error: Option<Box<RawValue>>,
}

#[derive(Deserialize)]
struct ChoiceWire {
    message: Option<MessageWire>,
    finish_reason: Option<String>,
}

#[derive(Deserialize)]
struct MessageWire {
    content: Option<Box<RawValue>>,
    reasoning_content: Option<Box<RawValue>>,
    reasoning: Option<Box<RawValue>>,
    refusal: Option<Box<RawValue>>,
    tool_calls: Option<Vec<CallWire>>,
}

#[derive(Deserialize)]
struct CallWire {
    id: Option<String>,
    function: Option<FunctionWire>,
}

#[derive(Deserialize)]
struct FunctionWire {
    name: Option<String>,
    arguments: Option<Box<RawValue>>,
}

/// A non-streamed response body.
pub fn parse_response(body: &[u8]) -> Result<Reply, ModelFailure> {
    let wire: ResponseWire = serde_json::from_slice(body).map_err(|e| {
        ModelFailure::new(
            ModelErrorKind::Server,
            format!("the response is not a chat completion: {e}"),
        )
    })?;
    if let Some(error) = wire.error {
        return Err(event_failure(&error_info(&error)));
    }
    let mut text = String::new();
    let mut reasoning = false;
    let mut refused = false;
    let mut tool_calls = Vec::new();
    let mut finish_reason = None;
    // The first choice is the reply (`n` is never set above 1).
    if let Some(choice) = wire.choices.and_then(|c| c.into_iter().next()) {
        finish_reason = choice.finish_reason;
        if let Some(m) = choice.message {
            if let Some(content) = &m.content {
                push_content(&mut text, content);
            }
            reasoning = [&m.reasoning_content, &m.reasoning]
                .into_iter()
                .flatten()
                .any(|r| !is_blank(r));
            if let Some(refusal) = m.refusal.as_deref().filter(|r| !is_blank(r)) {
                refused = true;
                push_content(&mut text, refusal);
            }
            for c in m.tool_calls.unwrap_or_default() {
                let (name, raw) = match c.function {
                    Some(f) => (f.name.unwrap_or_default(), f.arguments),
                    None => (String::new(), None),
                };
                let mut args = String::new();
                if let Some(raw) = &raw {
                    push_arguments(&mut args, raw);
                }
                // A missing id is left empty: the runtime gives the call a unique one.
                tool_calls.push(reply::call(c.id.unwrap_or_default(), name, &args));
            }
        }
    }
    Ok(assemble(
        text,
        reasoning,
        refused,
        tool_calls,
        finish_reason,
        wire.usage.as_ref().and_then(UsageWire::usage),
        wire.id,
    ))
}

fn assemble(
    text: String,
    reasoning: bool,
    refused: bool,
    tool_calls: Vec<terminus_kernel::ToolCall>,
    finish_reason: Option<String>,
    usage: Option<Usage>,
    id: Option<String>,
) -> Reply {
    let mut class = finish_reason.as_deref().map(finish).unwrap_or_default();
    if refused {
        class = Finish::ContentFilter;
    }
    Reply {
        turn: ModelTurn {
            needs_more_work: reply::needs_more_work(&text),
            text,
            tool_calls,
            usage,
            finish: class,
            reasoning,
        },
        finish_reason,
        id,
    }
}

fn is_blank(raw: &RawValue) -> bool {
    matches!(raw.get(), "null" | "\"\"" | "[]")
}

/// Appends `content` (a string, `null`, or a list of `{"type": "text", "text": …}` parts).
fn push_content(text: &mut String, content: &RawValue) {
    if push_raw_str(text, content) == Err(NotAString::Other) {
        #[derive(Deserialize)]
        struct Part {
            text: Option<String>,
        }
        if let Ok(parts) = serde_json::from_str::<Vec<Part>>(content.get()) {
            for part in parts {
                text.push_str(part.text.as_deref().unwrap_or_default());
            }
        }
    }
}

/// Appends tool-call arguments: a JSON text in a string, as the API says, or (some compatible
/// servers) the object itself.
fn push_arguments(args: &mut String, raw: &RawValue) {
    if push_raw_str(args, raw) == Err(NotAString::Other) {
        args.push_str(raw.get());
    }
}

fn error_info(raw: &RawValue) -> ErrorInfo {
    // `{"error": {...}}` is what `ErrorInfo::parse` reads; here we hold the inner object.
    let mut wrapped = String::with_capacity(raw.get().len() + 10);
    wrapped.push_str("{\"error\":");
    wrapped.push_str(raw.get());
    wrapped.push('}');
    ErrorInfo::parse(wrapped.as_bytes())
}

// ----- streamed -----

#[derive(Deserialize)]
struct ChunkWire<'a> {
    // Raw, not `Option<Cow<str>>`: serde never borrows a `Cow` inside an `Option`, and every
    // chunk repeats the id.
    #[serde(borrow)]
    id: Option<&'a RawValue>,
    #[serde(borrow)]
    choices: Option<SmallVec<[DeltaChoiceWire<'a>; 1]>>,
    usage: Option<UsageWire>,
    #[serde(borrow)]
    error: Option<&'a RawValue>,
}

#[derive(Deserialize)]
struct DeltaChoiceWire<'a> {
    #[serde(borrow)]
    delta: Option<DeltaWire<'a>>,
    #[serde(borrow)]
    finish_reason: Option<Cow<'a, str>>,
}

#[derive(Deserialize)]
struct DeltaWire<'a> {
    #[serde(borrow)]
    content: Option<&'a RawValue>,
    #[serde(borrow)]
    reasoning_content: Option<&'a RawValue>,
    #[serde(borrow)]
    reasoning: Option<&'a RawValue>,
    #[serde(borrow)]
    refusal: Option<&'a RawValue>,
    #[serde(borrow)]
    tool_calls: Option<SmallVec<[CallDeltaWire<'a>; 1]>>,
}

#[derive(Deserialize)]
struct CallDeltaWire<'a> {
    index: Option<usize>,
    #[serde(borrow)]
    id: Option<Cow<'a, str>>,
    #[serde(borrow)]
    function: Option<FunctionDeltaWire<'a>>,
}

#[derive(Deserialize)]
struct FunctionDeltaWire<'a> {
    #[serde(borrow)]
    name: Option<Cow<'a, str>>,
    #[serde(borrow)]
    arguments: Option<&'a RawValue>,
}

#[derive(Debug, Default)]
struct PartialCall {
    index: usize,
    id: String,
    name: String,
    arguments: String,
}

/// A streamed reply being assembled: feed it each SSE event's data with [`Stream::data`], then
/// [`Stream::finish`] when the body ends. Text and arguments are decoded straight from the
/// chunk into the buffers the reply keeps: a chunk allocates nothing of its own.
#[derive(Debug, Default)]
pub struct Stream {
    text: String,
    reasoning: bool,
    refused: bool,
    calls: Vec<PartialCall>,
    finish_reason: Option<String>,
    usage: Option<Usage>,
    id: Option<String>,
    done: bool,
}

impl Stream {
    /// A stream at its start.
    pub fn new() -> Stream {
        Stream::default()
    }

    /// Whether `[DONE]` arrived.
    pub fn is_done(&self) -> bool {
        self.done
    }

    /// One SSE event's data: a chunk, `[DONE]`, or an error object.
    pub fn data(&mut self, data: &str) -> Result<(), ModelFailure> {
        if self.done {
            return Ok(());
        }
        if data.trim() == "[DONE]" {
            self.done = true;
            return Ok(());
        }
        let chunk: ChunkWire<'_> = serde_json::from_str(data).map_err(|e| {
            ModelFailure::new(
                ModelErrorKind::Server,
                format!("a stream chunk is not JSON: {e}"),
            )
        })?;
        if let Some(error) = chunk.error {
            return Err(event_failure(&error_info(error)));
        }
        if self.id.is_none()
            && let Some(raw) = chunk.id
        {
            let mut id = String::new();
            if push_raw_str(&mut id, raw).is_ok() {
                self.id = Some(id);
            }
        }
        if let Some(usage) = chunk.usage.as_ref().and_then(UsageWire::usage) {
            self.usage = Some(usage);
        }
        for choice in chunk.choices.into_iter().flatten() {
            if let Some(reason) = choice.finish_reason {
                self.finish_reason = Some(reason.into_owned());
            }
            let Some(delta) = choice.delta else { continue };
            if let Some(content) = delta.content {
                push_content(&mut self.text, content);
            }
            if [delta.reasoning_content, delta.reasoning]
                .into_iter()
                .flatten()
                .any(|r| !is_blank(r))
            {
                self.reasoning = true;
            }
            if let Some(refusal) = delta.refusal.filter(|r| !is_blank(r)) {
                self.refused = true;
                push_content(&mut self.text, refusal);
            }
            for call in delta.tool_calls.into_iter().flatten() {
                self.call_delta(call);
            }
        }
        Ok(())
    }

    fn call_delta(&mut self, delta: CallDeltaWire<'_>) {
        // Deltas are matched by `index`; a server that sends none starts a new call when a new
        // id appears and continues the last one otherwise.
        let index = match delta.index {
            Some(i) => i,
            None => match (&delta.id, self.calls.last()) {
                (Some(id), Some(last)) if !last.id.is_empty() && last.id != id.as_ref() => {
                    last.index + 1
                }
                (_, Some(last)) => last.index,
                (_, None) => 0,
            },
        };
        let position = match self.calls.iter().position(|c| c.index == index) {
            Some(p) => p,
            None => {
                self.calls.push(PartialCall {
                    index,
                    ..PartialCall::default()
                });
                self.calls.len() - 1
            }
        };
        let call = &mut self.calls[position];
        if let Some(id) = delta.id
            && call.id.is_empty()
        {
            call.id.push_str(&id);
        }
        if let Some(function) = delta.function {
            if let Some(name) = function.name
                && call.name != name.as_ref()
            {
                // A name sent whole (OpenAI) or in pieces; a server that repeats it whole in
                // every delta is not appended twice.
                call.name.push_str(&name);
            }
            if let Some(arguments) = function.arguments {
                push_arguments(&mut call.arguments, arguments);
            }
        }
    }

    /// The reply, once the body has ended. A stream that ended before `[DONE]` and before any
    /// `finish_reason` was cut: that is a retryable `server` failure, never a short answer.
    pub fn finish(mut self) -> Result<Reply, ModelFailure> {
        if !self.done && self.finish_reason.is_none() {
            return Err(ModelFailure::new(
                ModelErrorKind::Server,
                "the stream ended before its end ([DONE] or a finish_reason)",
            ));
        }
        self.calls.sort_by_key(|c| c.index);
        let tool_calls = self
            .calls
            .into_iter()
            .map(|c| reply::call(c.id, c.name, &c.arguments))
            .collect();
        Ok(assemble(
            self.text,
            self.reasoning,
            self.refused,
            tool_calls,
            self.finish_reason,
            self.usage,
            self.id,
        ))
    }
}
