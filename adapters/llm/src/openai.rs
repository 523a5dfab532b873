//! OpenAI-compatible Chat Completions (OpenAI, OpenRouter, DeepSeek, vLLM, Ollama, llama.cpp's
//! server, LiteLLM): the request body, the non-streamed response and the streamed one. Pure:
//! no IO here (the client is `crate::client`). The body's pieces (a message, the `tools` array)
//! are written with the kept encodings, in `crate::body`.
//!
//! Parsing is lenient, because compatible servers differ: unknown fields are ignored, an unknown
//! `finish_reason` is kept as a string, `choices` may be `null` or missing, `content` may be a
//! string, `null`, `""`, `[]` or a list of parts, reasoning comes as `reasoning_content`
//! (DeepSeek, vLLM) or `reasoning` (OpenRouter), usage comes in its own final chunk
//! (`choices: []`, `stream_options.include_usage`) or in any chunk.

use crate::body::Wire;
use crate::error::{ErrorInfo, event_failure};
use crate::json_str::{NotAString, push_raw_str};
use crate::reply::{self, Options, Reply};
use serde::Deserialize;
use serde::de::{self, DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::Value;
use serde_json::value::RawValue;
use std::fmt;
use terminus_kernel::{Finish, ModelErrorKind, ModelTurn, Usage};
use terminus_runtime::{ModelFailure, ModelRequest};

/// The JSON body of a `POST {base_url}/chat/completions`, as a value (the client sends the
/// same bytes, written from the kept encodings of `crate::body`).
pub fn request_body(options: Options<'_>, request: &ModelRequest<'_>) -> Value {
    crate::body::value(Wire::Chat, options, request)
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

// Text, reasoning and arguments are borrowed raw from the body and decoded straight into the
// reply's buffers: nothing is allocated for a field the reply does not keep.

#[derive(Deserialize)]
struct ResponseWire<'a> {
    id: Option<String>,
    model: Option<String>,
    #[serde(borrow)]
    choices: Option<Vec<ChoiceWire<'a>>>,
    usage: Option<UsageWire>,
    #[serde(borrow)]
    error: Option<&'a RawValue>,
}

#[derive(Deserialize)]
struct ChoiceWire<'a> {
    #[serde(borrow)]
    message: Option<MessageWire<'a>>,
    finish_reason: Option<String>,
}

#[derive(Deserialize)]
struct MessageWire<'a> {
    #[serde(borrow)]
    content: Option<&'a RawValue>,
    #[serde(borrow)]
    reasoning_content: Option<&'a RawValue>,
    #[serde(borrow)]
    reasoning: Option<&'a RawValue>,
    #[serde(borrow)]
    refusal: Option<&'a RawValue>,
    #[serde(borrow)]
    tool_calls: Option<Vec<CallWire<'a>>>,
}

#[derive(Deserialize)]
struct CallWire<'a> {
    id: Option<String>,
    #[serde(borrow)]
    function: Option<FunctionWire<'a>>,
}

#[derive(Deserialize)]
struct FunctionWire<'a> {
    name: Option<String>,
    #[serde(borrow)]
    arguments: Option<&'a RawValue>,
}

/// A non-streamed response body.
pub fn parse_response(body: &[u8]) -> Result<Reply, ModelFailure> {
    let wire: ResponseWire<'_> = serde_json::from_slice(body).map_err(|e| {
        ModelFailure::new(
            ModelErrorKind::Server,
            format!("the response is not a chat completion: {e}"),
        )
    })?;
    if let Some(error) = wire.error {
        return Err(event_failure(&error_info(error)));
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
            if let Some(content) = m.content {
                push_content(&mut text, content);
            }
            reasoning = [m.reasoning_content, m.reasoning]
                .into_iter()
                .flatten()
                .any(|r| !is_blank(r));
            if let Some(refusal) = m.refusal.filter(|r| !is_blank(r)) {
                refused = true;
                push_content(&mut text, refusal);
            }
            for c in m.tool_calls.unwrap_or_default() {
                let (name, raw) = match c.function {
                    Some(f) => (f.name.unwrap_or_default(), f.arguments),
                    None => (String::new(), None),
                };
                let mut args = String::new();
                if let Some(raw) = raw {
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
        (wire.id, wire.model),
    ))
}

fn assemble(
    text: String,
    reasoning: bool,
    refused: bool,
    tool_calls: Vec<terminus_kernel::ToolCall>,
    finish_reason: Option<String>,
    usage: Option<Usage>,
    (id, model): (Option<String>, Option<String>),
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
            text_calls: None,
        },
        finish_reason,
        id,
        model,
    }
}

pub(crate) fn is_blank(raw: &RawValue) -> bool {
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
pub(crate) fn push_arguments(args: &mut String, raw: &RawValue) {
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
//
// A chunk is folded into the reply while serde reads it: each object is visited by a seed that
// holds the `Stream`, so no chunk is first materialised as a tree of structs (moving those
// structs around cost a third of the parse), and text and arguments are borrowed raw from the
// chunk and decoded straight into the buffers the reply keeps.

/// A tool call being streamed: its position among the reply's calls or output items, and what
/// has come of it so far.
#[derive(Debug, Default)]
pub(crate) struct PartialCall {
    pub(crate) index: usize,
    pub(crate) id: String,
    pub(crate) name: String,
    pub(crate) arguments: String,
}

/// The call at `index` in `calls`, added when there is none yet.
pub(crate) fn call_at(calls: &mut Vec<PartialCall>, index: usize) -> &mut PartialCall {
    let position = match calls.iter().position(|c| c.index == index) {
        Some(p) => p,
        None => {
            calls.push(PartialCall {
                index,
                ..PartialCall::default()
            });
            calls.len() - 1
        }
    };
    &mut calls[position]
}

/// A streamed reply being assembled: feed it each SSE event's data with [`Stream::data`], then
/// [`Stream::finish`] when the body ends. A chunk allocates nothing of its own.
#[derive(Debug, Default)]
pub struct Stream {
    text: String,
    reasoning: bool,
    refused: bool,
    calls: Vec<PartialCall>,
    finish_reason: Option<String>,
    usage: Option<Usage>,
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
        let mut de = serde_json::Deserializer::from_str(data);
        let error = ChunkSeed(self)
            .deserialize(&mut de)
            .and_then(|error| de.end().map(|()| error))
            .map_err(|e| {
                ModelFailure::new(
                    ModelErrorKind::Server,
                    format!("a stream chunk is not a chat completion chunk: {e}"),
                )
            })?;
        match error {
            Some(info) => Err(event_failure(&info)),
            None => Ok(()),
        }
    }

    fn call_at(&mut self, index: Option<usize>, id: Option<&RawValue>) -> &mut PartialCall {
        // Deltas are matched by `index`; a server that sends none starts a new call when a new
        // id appears and continues the last one otherwise.
        let index = match index {
            Some(i) => i,
            None => match (id, self.calls.last()) {
                (Some(id), Some(last)) if !last.id.is_empty() && !raw_is(id, &last.id) => {
                    last.index + 1
                }
                (_, Some(last)) => last.index,
                (_, None) => 0,
            },
        };
        call_at(&mut self.calls, index)
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
            (self.id, self.model),
        ))
    }
}

/// Whether the raw JSON string `raw` decodes to `text`.
fn raw_is(raw: &RawValue, text: &str) -> bool {
    let mut decoded = String::new();
    push_raw_str(&mut decoded, raw).is_ok() && decoded == text
}

/// The position of `key` in `names`, read as serde reads a field name (borrowed or escaped).
struct Field(&'static [&'static str]);

impl<'de> DeserializeSeed<'de> for Field {
    type Value = Option<usize>;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Option<usize>, D::Error> {
        d.deserialize_identifier(self)
    }
}

impl<'de> Visitor<'de> for Field {
    type Value = Option<usize>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a field name")
    }

    fn visit_str<E: de::Error>(self, key: &str) -> Result<Option<usize>, E> {
        Ok(self.0.iter().position(|name| *name == key))
    }
}

/// Visits `null` as nothing and anything else with `seed`.
struct Nullable<S>(S);

impl<'de, S: DeserializeSeed<'de, Value = ()>> DeserializeSeed<'de> for Nullable<S> {
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_option(self)
    }
}

impl<'de, S: DeserializeSeed<'de, Value = ()>> Visitor<'de> for Nullable<S> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("null or a value")
    }

    fn visit_none<E: de::Error>(self) -> Result<(), E> {
        Ok(())
    }

    fn visit_unit<E: de::Error>(self) -> Result<(), E> {
        Ok(())
    }

    fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        self.0.deserialize(d)
    }
}

/// A chunk: `id`, `choices`, `usage`, `error`. Gives back the error a chunk carries.
struct ChunkSeed<'s>(&'s mut Stream);

impl<'de> DeserializeSeed<'de> for ChunkSeed<'_> {
    type Value = Option<ErrorInfo>;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Option<ErrorInfo>, D::Error> {
        d.deserialize_map(self)
    }
}

impl<'de> Visitor<'de> for ChunkSeed<'_> {
    type Value = Option<ErrorInfo>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a chat completion chunk")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Option<ErrorInfo>, A::Error> {
        let stream = self.0;
        let mut error = None;
        while let Some(field) =
            map.next_key_seed(Field(&["id", "choices", "usage", "error", "model"]))?
        {
            match field {
                Some(0) => {
                    let raw: Option<&'de RawValue> = map.next_value()?;
                    if stream.id.is_none()
                        && let Some(raw) = raw
                    {
                        let mut id = String::new();
                        if push_raw_str(&mut id, raw).is_ok() {
                            stream.id = Some(id);
                        }
                    }
                }
                Some(1) => map.next_value_seed(Nullable(ChoicesSeed(&mut *stream)))?,
                Some(2) => {
                    let usage: Option<UsageWire> = map.next_value()?;
                    if let Some(usage) = usage.as_ref().and_then(UsageWire::usage) {
                        stream.usage = Some(usage);
                    }
                }
                Some(4) => {
                    let raw: Option<&'de RawValue> = map.next_value()?;
                    if stream.model.is_none()
                        && let Some(raw) = raw
                    {
                        let mut model = String::new();
                        if push_raw_str(&mut model, raw).is_ok() {
                            stream.model = Some(model);
                        }
                    }
                }
                Some(_) => {
                    let raw: Option<&'de RawValue> = map.next_value()?;
                    error = raw.map(error_info);
                }
                None => {
                    map.next_value::<de::IgnoredAny>()?;
                }
            }
        }
        Ok(error)
    }
}

/// `choices`: each choice's `delta` and `finish_reason`.
struct ChoicesSeed<'s>(&'s mut Stream);

impl<'de> DeserializeSeed<'de> for ChoicesSeed<'_> {
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_seq(self)
    }
}

impl<'de> Visitor<'de> for ChoicesSeed<'_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a list of choices")
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        while seq.next_element_seed(ChoiceSeed(&mut *self.0))?.is_some() {}
        Ok(())
    }
}

struct ChoiceSeed<'s>(&'s mut Stream);

impl<'de> DeserializeSeed<'de> for ChoiceSeed<'_> {
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_map(self)
    }
}

impl<'de> Visitor<'de> for ChoiceSeed<'_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a choice")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        let stream = self.0;
        while let Some(field) = map.next_key_seed(Field(&["delta", "finish_reason"]))? {
            match field {
                Some(0) => map.next_value_seed(Nullable(DeltaSeed(&mut *stream)))?,
                Some(_) => {
                    let raw: Option<&'de RawValue> = map.next_value()?;
                    if let Some(raw) = raw {
                        let mut reason = String::new();
                        if push_raw_str(&mut reason, raw).is_ok() {
                            stream.finish_reason = Some(reason);
                        }
                    }
                }
                None => {
                    map.next_value::<de::IgnoredAny>()?;
                }
            }
        }
        Ok(())
    }
}

/// A `delta`: `content`, `reasoning_content` / `reasoning`, `refusal`, `tool_calls`.
struct DeltaSeed<'s>(&'s mut Stream);

impl<'de> DeserializeSeed<'de> for DeltaSeed<'_> {
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_map(self)
    }
}

impl<'de> Visitor<'de> for DeltaSeed<'_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a delta")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        const FIELDS: &[&str] = &[
            "content",
            "reasoning_content",
            "reasoning",
            "refusal",
            "tool_calls",
        ];
        let stream = self.0;
        while let Some(field) = map.next_key_seed(Field(FIELDS))? {
            match field {
                Some(4) => map.next_value_seed(Nullable(CallsSeed(&mut *stream)))?,
                Some(i) => {
                    let raw: Option<&'de RawValue> = map.next_value()?;
                    let Some(raw) = raw else { continue };
                    match i {
                        0 => push_content(&mut stream.text, raw),
                        1 | 2 => stream.reasoning |= !is_blank(raw),
                        _ if !is_blank(raw) => {
                            stream.refused = true;
                            push_content(&mut stream.text, raw);
                        }
                        _ => {}
                    }
                }
                None => {
                    map.next_value::<de::IgnoredAny>()?;
                }
            }
        }
        Ok(())
    }
}

/// `tool_calls` deltas.
struct CallsSeed<'s>(&'s mut Stream);

impl<'de> DeserializeSeed<'de> for CallsSeed<'_> {
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_seq(self)
    }
}

impl<'de> Visitor<'de> for CallsSeed<'_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a list of tool-call deltas")
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        while let Some(delta) = seq.next_element::<CallDeltaWire<'de>>()? {
            let call = self.0.call_at(delta.index, delta.id);
            if let Some(id) = delta.id
                && call.id.is_empty()
            {
                let _ = push_raw_str(&mut call.id, id);
            }
            let Some(function) = delta.function else {
                continue;
            };
            // A name sent whole (OpenAI) or in pieces; a server that repeats it whole in every
            // delta is not appended twice.
            if let Some(name) = function.name
                && !raw_is(name, &call.name)
            {
                let _ = push_raw_str(&mut call.name, name);
            }
            if let Some(arguments) = function.arguments {
                push_arguments(&mut call.arguments, arguments);
            }
        }
        Ok(())
    }
}

#[derive(Deserialize)]
struct CallDeltaWire<'a> {
    index: Option<usize>,
    #[serde(borrow)]
    id: Option<&'a RawValue>,
    #[serde(borrow)]
    function: Option<FunctionDeltaWire<'a>>,
}

#[derive(Deserialize)]
struct FunctionDeltaWire<'a> {
    #[serde(borrow)]
    name: Option<&'a RawValue>,
    #[serde(borrow)]
    arguments: Option<&'a RawValue>,
}
