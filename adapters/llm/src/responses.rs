//! OpenAI Responses (`POST {base_url}/responses`; OpenAI, and llama.cpp's server): the request
//! body, the non-streamed response and the streamed one. Pure: no IO here. The body's pieces
//! (a message's items, the `tools` array) are written with the kept encodings, in `crate::body`.
//!
//! The conversation goes in `input` as items: messages (`{"role", "content"}`), the model's
//! tool calls as `function_call` items and their results as `function_call_output` items, paired
//! by `call_id`. Nothing is stored on the server (`store: false`): every request carries the
//! whole conversation, as with the other two wire formats.
//!
//! A reply is a `response` object whose `output` holds `message` items (`output_text` and
//! `refusal` parts), `function_call` items and `reasoning` items; `status` is `completed`,
//! `incomplete` (with `incomplete_details.reason`: `max_output_tokens` or `content_filter`) or
//! `failed` (with `error`). Streamed, it comes as typed events (`response.output_text.delta`,
//! `response.function_call_arguments.delta`, `response.output_item.added` / `.done`…) ended by
//! `response.completed`, `response.incomplete` or `response.failed`; an `error` event carries
//! `code` and `message` at its top level. Unknown events, items and parts are ignored.

use crate::body::Wire;
use crate::error::{ErrorInfo, event_failure};
use crate::json_str::push_raw_str;
use crate::openai::{PartialCall, call_at, is_blank, push_arguments};
use crate::reply::{self, Options, Reply};
use serde::Deserialize;
use serde_json::Value;
use serde_json::value::RawValue;
use terminus_kernel::{Finish, ModelErrorKind, ModelTurn, ToolCall, Usage};
use terminus_runtime::{ModelFailure, ModelRequest};

/// The JSON body of a `POST {base_url}/responses`, as a value (the client sends the same
/// bytes, written from the kept encodings of `crate::body`).
pub fn request_body(options: Options<'_>, request: &ModelRequest<'_>) -> Value {
    crate::body::value(Wire::Responses, options, request)
}

// ----- replies -----

#[derive(Deserialize, Default, Clone, Copy)]
struct UsageWire {
    input_tokens: Option<u64>,
    output_tokens: Option<u64>,
}

impl UsageWire {
    fn usage(self) -> Option<Usage> {
        if self.input_tokens.is_none() && self.output_tokens.is_none() {
            return None;
        }
        Some(Usage {
            input_tokens: self.input_tokens.unwrap_or(0),
            output_tokens: self.output_tokens.unwrap_or(0),
        })
    }
}

#[derive(Deserialize, Default)]
struct ResponseWire {
    id: Option<String>,
    model: Option<String>,
    status: Option<String>,
    incomplete_details: Option<IncompleteWire>,
    error: Option<Box<RawValue>>,
    output: Option<Vec<OutputWire>>,
    usage: Option<UsageWire>,
}

#[derive(Deserialize)]
struct IncompleteWire {
    reason: Option<String>,
}

#[derive(Deserialize, Default)]
struct OutputWire {
    #[serde(rename = "type")]
    kind: Option<String>,
    content: Option<Vec<PartWire>>,
    call_id: Option<String>,
    id: Option<String>,
    name: Option<String>,
    arguments: Option<Box<RawValue>>,
}

#[derive(Deserialize)]
struct PartWire {
    #[serde(rename = "type")]
    kind: Option<String>,
    text: Option<String>,
    refusal: Option<String>,
}

/// What the output items said.
#[derive(Debug, Default)]
struct Output {
    text: String,
    refused: bool,
    reasoning: bool,
    calls: Vec<ToolCall>,
}

impl Output {
    fn add(&mut self, item: OutputWire) {
        match item.kind.as_deref() {
            Some("message") => {
                for part in item.content.unwrap_or_default() {
                    match (part.kind.as_deref(), part.text, part.refusal) {
                        (Some("refusal"), _, Some(refusal)) if !refusal.is_empty() => {
                            self.refused = true;
                            self.text.push_str(&refusal);
                        }
                        (_, Some(text), _) => self.text.push_str(&text),
                        _ => {}
                    }
                }
            }
            Some("function_call") => self.calls.push(function_call(item)),
            Some("reasoning") => self.reasoning = true,
            _ => {}
        }
    }
}

/// A `function_call` item: its `call_id` pairs it with its output (`id` is the item's own).
fn function_call(item: OutputWire) -> ToolCall {
    let mut args = String::new();
    if let Some(raw) = &item.arguments {
        push_arguments(&mut args, raw);
    }
    // A missing id is left empty: the runtime gives the call a unique one.
    let id = item.call_id.or(item.id).unwrap_or_default();
    reply::call(id, item.name.unwrap_or_default(), &args)
}

/// The kernel's class of a response's end: `incomplete` is a cut reply (`max_output_tokens`,
/// or any reason this adapter does not know), except `content_filter`; a `completed` response
/// ends in tool calls when it holds any.
pub fn finish(status: Option<&str>, incomplete_reason: Option<&str>, has_calls: bool) -> Finish {
    match (status, incomplete_reason) {
        (_, Some("content_filter")) => Finish::ContentFilter,
        (Some("incomplete"), _) | (_, Some(_)) => Finish::Length,
        _ if has_calls => Finish::ToolCalls,
        _ => Finish::Stop,
    }
}

/// The error a failed response carries (`{"code", "message"}`, sometimes with a `type`).
fn error_info(raw: &RawValue) -> ErrorInfo {
    let mut wrapped = String::with_capacity(raw.get().len() + 10);
    wrapped.push_str("{\"error\":");
    wrapped.push_str(raw.get());
    wrapped.push('}');
    ErrorInfo::parse(wrapped.as_bytes())
}

impl ResponseWire {
    /// The reply of a finished response; `streamed` (the text and calls the stream's events
    /// carried) stands in for `output` when the final object holds none.
    fn reply(self, streamed: Option<Output>) -> Result<Reply, ModelFailure> {
        if let Some(error) = self.error.as_deref().filter(|e| !is_blank(e)) {
            return Err(event_failure(&error_info(error)));
        }
        let status = self.status;
        match status.as_deref() {
            None | Some("completed" | "incomplete") => {}
            Some("failed") => {
                return Err(ModelFailure::new(
                    ModelErrorKind::Server,
                    "the response failed without an error",
                ));
            }
            Some(other) => {
                return Err(ModelFailure::new(
                    ModelErrorKind::Server,
                    format!("the response is not finished (status {other})"),
                ));
            }
        }
        let mut output = Output::default();
        for item in self.output.unwrap_or_default() {
            output.add(item);
        }
        if let Some(streamed) = streamed {
            let reasoning = output.reasoning || streamed.reasoning;
            if output.text.is_empty() && output.calls.is_empty() {
                output = streamed;
            }
            output.reasoning = reasoning;
        }
        let reason = self.incomplete_details.and_then(|d| d.reason);
        let mut class = finish(
            status.as_deref(),
            reason.as_deref(),
            !output.calls.is_empty(),
        );
        if output.refused {
            class = Finish::ContentFilter;
        }
        // The provider's own words: the incomplete reason, else the status.
        let finish_reason = reason.or(status);
        Ok(Reply {
            turn: ModelTurn {
                needs_more_work: reply::needs_more_work(&output.text),
                text: output.text,
                tool_calls: output.calls,
                usage: self.usage.and_then(UsageWire::usage),
                finish: class,
                reasoning: output.reasoning,
                text_calls: None,
            },
            finish_reason,
            id: self.id,
            model: self.model,
        })
    }
}

/// `reply` as the kernel must take it when `cap` was the request's output cap: a `completed`
/// text reply whose output tokens reached the cap was cut by it. llama.cpp's server says
/// `completed` (with no `incomplete_details`) for a reply its `max_output_tokens` cut, where
/// OpenAI says `incomplete`; a reply that ends exactly at the cap is taken as cut too, never
/// as an answer.
pub fn cut_at_cap(mut reply: Reply, cap: u32) -> Reply {
    let reached = reply
        .turn
        .usage
        .is_some_and(|u| u.output_tokens >= u64::from(cap));
    if reached && reply.turn.finish == Finish::Stop {
        reply.turn.finish = Finish::Length;
    }
    reply
}

/// A non-streamed response body.
pub fn parse_response(body: &[u8]) -> Result<Reply, ModelFailure> {
    let wire: ResponseWire = serde_json::from_slice(body).map_err(|e| {
        ModelFailure::new(
            ModelErrorKind::Server,
            format!("the response is not a Responses API response: {e}"),
        )
    })?;
    wire.reply(None)
}

// ----- streamed -----

#[derive(Deserialize)]
struct EventWire<'a> {
    #[serde(rename = "type", borrow)]
    kind: Option<&'a str>,
    #[serde(borrow)]
    delta: Option<&'a RawValue>,
    output_index: Option<usize>,
    /// The item an event is about; llama.cpp's server names items by it alone, with no
    /// `output_index`.
    #[serde(borrow)]
    item_id: Option<&'a str>,
    item: Option<OutputWire>,
    response: Option<ResponseWire>,
    #[serde(borrow)]
    arguments: Option<&'a RawValue>,
    // An `error` event: its fields at the top level.
    code: Option<Value>,
    message: Option<String>,
}

/// A streamed reply being assembled: feed it each SSE event's data with [`Stream::data`], then
/// [`Stream::finish`] when the body ends.
#[derive(Debug, Default)]
pub struct Stream {
    text: String,
    /// Output indexes whose text came in deltas (their `output_item.done` adds nothing).
    texts: Vec<usize>,
    /// The item ids seen in events without an `output_index`, in order: an item's place here
    /// stands in for its index.
    item_ids: Vec<String>,
    refused: bool,
    reasoning: bool,
    calls: Vec<PartialCall>,
    id: Option<String>,
    model: Option<String>,
    /// The reply, once `response.completed` or `response.incomplete` came.
    done: Option<Reply>,
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

    /// Whether the final event (`response.completed`, `response.incomplete`) arrived.
    pub fn is_done(&self) -> bool {
        self.done.is_some()
    }

    fn call_at(&mut self, index: usize) -> &mut PartialCall {
        call_at(&mut self.calls, index)
    }

    /// The index standing in for the item `id` in events without an `output_index`.
    fn index_of(&mut self, id: &str) -> usize {
        match self.item_ids.iter().position(|known| known == id) {
            Some(index) => index,
            None => {
                self.item_ids.push(id.to_owned());
                self.item_ids.len() - 1
            }
        }
    }

    /// One SSE event's data.
    pub fn data(&mut self, data: &str) -> Result<(), ModelFailure> {
        if self.done.is_some() || data.trim() == "[DONE]" {
            return Ok(());
        }
        let event: EventWire<'_> = serde_json::from_str(data).map_err(|e| {
            ModelFailure::new(
                ModelErrorKind::Server,
                format!("a stream event is not a Responses API event: {e}"),
            )
        })?;
        let item_id = event
            .item_id
            .or_else(|| event.item.as_ref().and_then(|i| i.id.as_deref()));
        let index = match (event.output_index, item_id) {
            (Some(index), _) => index,
            (None, Some(id)) => self.index_of(id),
            (None, None) => 0,
        };
        match event.kind.unwrap_or_default() {
            "response.output_text.delta" | "response.refusal.delta" => {
                if let Some(delta) = event.delta {
                    if event.kind == Some("response.refusal.delta") {
                        self.refused |= !is_blank(delta);
                    }
                    let _ = push_raw_str(&mut self.text, delta);
                    if !self.texts.contains(&index) {
                        self.texts.push(index);
                    }
                }
            }
            "response.function_call_arguments.delta" => {
                if let Some(delta) = event.delta {
                    push_arguments(&mut self.call_at(index).arguments, delta);
                }
            }
            "response.function_call_arguments.done" => {
                if let Some(whole) = event.arguments {
                    let call = self.call_at(index);
                    call.arguments.clear();
                    push_arguments(&mut call.arguments, whole);
                }
            }
            kind @ ("response.output_item.added" | "response.output_item.done") => {
                let Some(item) = event.item else {
                    return Ok(());
                };
                match item.kind.as_deref() {
                    Some("function_call") => {
                        let call = self.call_at(index);
                        if let Some(id) = item.call_id.or(item.id) {
                            call.id = id;
                        }
                        if let Some(name) = item.name {
                            call.name = name;
                        }
                        // The whole arguments, when the item carries them (its `done`).
                        if let Some(raw) = item.arguments.as_deref().filter(|r| !is_blank(r)) {
                            call.arguments.clear();
                            push_arguments(&mut call.arguments, raw);
                        }
                    }
                    Some("reasoning") => self.reasoning = true,
                    Some("message")
                        if kind == "response.output_item.done" && !self.texts.contains(&index) =>
                    {
                        let mut whole = Output::default();
                        whole.add(item);
                        self.refused |= whole.refused;
                        self.text.push_str(&whole.text);
                        self.texts.push(index);
                    }
                    _ => {}
                }
            }
            "response.reasoning_summary_text.delta" | "response.reasoning_text.delta" => {
                self.reasoning = true;
            }
            "response.created" | "response.in_progress" => {
                if let Some(response) = event.response {
                    self.id = self.id.take().or(response.id);
                    self.model = self.model.take().or(response.model);
                }
            }
            "response.completed" | "response.incomplete" | "response.failed" => {
                let mut response = event.response.unwrap_or_default();
                if event.kind == Some("response.failed") && response.error.is_none() {
                    response.status = Some("failed".into());
                }
                response.id = response.id.or(self.id.take());
                response.model = response.model.or(self.model.take());
                let streamed = self.streamed();
                self.done = Some(response.reply(Some(streamed))?);
            }
            "error" => {
                let code = match event.code {
                    Some(Value::String(code)) => Some(code),
                    Some(Value::Null) | None => None,
                    Some(other) => Some(other.to_string()),
                };
                return Err(event_failure(&ErrorInfo {
                    kind: None,
                    code,
                    message: event.message.unwrap_or_default(),
                }));
            }
            _ => {}
        }
        Ok(())
    }

    /// What the events carried so far.
    fn streamed(&mut self) -> Output {
        let mut calls = std::mem::take(&mut self.calls);
        calls.sort_by_key(|c| c.index);
        Output {
            text: std::mem::take(&mut self.text),
            refused: self.refused,
            reasoning: self.reasoning,
            calls: calls
                .into_iter()
                .map(|c| reply::call(c.id, c.name, &c.arguments))
                .collect(),
        }
    }

    /// The reply, once the body has ended. A stream that ended before its final event was cut:
    /// that is a retryable `server` failure, never a short answer.
    pub fn finish(self) -> Result<Reply, ModelFailure> {
        self.done.ok_or_else(|| {
            ModelFailure::new(
                ModelErrorKind::Server,
                "the stream ended before its end (response.completed or response.incomplete)",
            )
        })
    }
}

#[cfg(test)]
mod tests {
    //! Bodies in the shapes OpenAI documents for the Responses API.
    use super::*;
    use crate::client::{Provider, Stream as AnyStream};
    use serde_json::json;
    use terminus_runtime::Message;

    /// OpenAI's documented text response.
    const TEXT: &str = r#"{"id":"resp_67ccd2bed1ec8190b14f964abc0542670bb6a6b452d3795b","object":"response","created_at":1741476542,"status":"completed","error":null,"incomplete_details":null,"instructions":null,"max_output_tokens":null,"model":"gpt-4.1-2025-04-14","output":[{"type":"message","id":"msg_67ccd2bf17f0819081ff3bb2cf6508e60bb6a6b452d3795b","status":"completed","role":"assistant","content":[{"type":"output_text","text":"In a peaceful grove beneath a silver moon, a unicorn named Lumina discovered a hidden pool.","annotations":[]}]}],"parallel_tool_calls":true,"previous_response_id":null,"reasoning":{"effort":null,"summary":null},"store":true,"temperature":1.0,"text":{"format":{"type":"text"}},"tool_choice":"auto","tools":[],"top_p":1.0,"truncation":"disabled","usage":{"input_tokens":36,"input_tokens_details":{"cached_tokens":0},"output_tokens":87,"output_tokens_details":{"reasoning_tokens":0},"total_tokens":123},"user":null,"metadata":{}}"#;

    /// OpenAI's documented function-calling response, after a reasoning item.
    const CALL: &str = r#"{"id":"resp_67ca09c5efe0819096d0511c92b8c890096610f474011cc0","object":"response","created_at":1741294021,"status":"completed","error":null,"incomplete_details":null,"model":"o4-mini-2025-04-16","output":[{"id":"rs_6820f383d7c08191846711c5df8233bc0ac5ba57aafcbac7","type":"reasoning","summary":[]},{"type":"function_call","id":"fc_67ca09c6bedc8190a7abfec07b1a1332096610f474011cc0","call_id":"call_unLAR8MvFNptuiZK6K6HCy5k","name":"get_current_weather","arguments":"{\"location\":\"Boston, MA\",\"unit\":\"celsius\"}","status":"completed"}],"usage":{"input_tokens":291,"output_tokens":23,"output_tokens_details":{"reasoning_tokens":0},"total_tokens":314}}"#;

    fn parse_stream(events: &[Value]) -> Result<Reply, ModelFailure> {
        let body: String = events
            .iter()
            .map(|e| format!("event: {}\ndata: {e}\n\n", e["type"].as_str().unwrap_or("")))
            .collect();
        AnyStream::parse(Provider::OpenAiResponses, [body.as_bytes()])
    }

    #[test]
    fn a_text_response_with_usage() {
        let reply = parse_response(TEXT.as_bytes()).expect("a reply");
        assert!(reply.turn.text.starts_with("In a peaceful grove"));
        assert_eq!(reply.turn.finish, Finish::Stop);
        assert_eq!(reply.finish_reason.as_deref(), Some("completed"));
        assert_eq!(
            reply.turn.usage,
            Some(Usage {
                input_tokens: 36,
                output_tokens: 87
            })
        );
        assert_eq!(reply.model.as_deref(), Some("gpt-4.1-2025-04-14"));
        assert!(
            reply
                .id
                .as_deref()
                .is_some_and(|id| id.starts_with("resp_"))
        );
    }

    #[test]
    fn a_function_call_is_a_tool_call_by_its_call_id() {
        let reply = parse_response(CALL.as_bytes()).expect("a reply");
        assert_eq!(reply.turn.finish, Finish::ToolCalls);
        assert!(reply.turn.reasoning);
        let call = &reply.turn.tool_calls[0];
        assert_eq!(call.id, "call_unLAR8MvFNptuiZK6K6HCy5k");
        assert_eq!(call.name, "get_current_weather");
        assert_eq!(
            call.arguments,
            json!({ "location": "Boston, MA", "unit": "celsius" })
        );
    }

    #[test]
    fn incomplete_is_a_cut_reply_never_an_answer() {
        for (reason, class) in [
            ("max_output_tokens", Finish::Length),
            ("content_filter", Finish::ContentFilter),
        ] {
            let body = json!({ "id": "resp_1", "object": "response", "status": "incomplete",
                "incomplete_details": { "reason": reason }, "output": [{ "type": "message",
                "role": "assistant", "content": [{ "type": "output_text", "text": "Once upon" }] }],
                "usage": { "input_tokens": 10, "output_tokens": 16 } });
            let reply = parse_response(body.to_string().as_bytes()).expect("a reply");
            assert_eq!(reply.turn.finish, class, "{reason}");
            assert_eq!(reply.finish_reason.as_deref(), Some(reason));
        }
    }

    #[test]
    fn a_refusal_part_is_filtered() {
        let body = json!({ "status": "completed", "output": [{ "type": "message",
            "role": "assistant", "content": [{ "type": "refusal",
            "refusal": "I can't help with that." }] }] });
        let reply = parse_response(body.to_string().as_bytes()).expect("a reply");
        assert_eq!(reply.turn.finish, Finish::ContentFilter);
        assert_eq!(reply.turn.text, "I can't help with that.");
    }

    #[test]
    fn a_failed_response_and_an_error_event_map_through_the_table() {
        let failed = json!({ "id": "resp_1", "status": "failed", "output": [],
            "error": { "code": "server_error", "message": "The model failed." } });
        let failure = parse_response(failed.to_string().as_bytes()).expect_err("failed");
        assert_eq!(failure.kind, ModelErrorKind::Server);
        assert!(failure.message.contains("The model failed."), "{failure}");
        let events = [
            json!({ "type": "response.created", "response": { "id": "resp_1",
                    "status": "in_progress", "output": [] } }),
            json!({ "type": "response.failed", "response": { "id": "resp_1",
                    "status": "failed", "output": [], "error": { "code": "rate_limit_exceeded",
                    "message": "Rate limit reached." } } }),
        ];
        let failure = parse_stream(&events).expect_err("failed");
        assert_eq!(failure.kind, ModelErrorKind::RateLimited, "{failure}");
        let error = [json!({ "type": "error", "code": "context_length_exceeded",
            "message": "Your input exceeds the context window of this model.",
            "param": "input", "sequence_number": 1 })];
        let failure = parse_stream(&error).expect_err("an error event");
        assert_eq!(failure.kind, ModelErrorKind::ContextOverflow, "{failure}");
        let quota = [json!({ "type": "error", "code": "insufficient_quota",
            "message": "You exceeded your current quota.", "param": null })];
        assert_eq!(
            parse_stream(&quota).expect_err("quota").kind,
            ModelErrorKind::Auth
        );
    }

    #[test]
    fn streamed_deltas_assemble_text_calls_and_usage() {
        let events = [
            json!({ "type": "response.created", "response": { "id": "resp_9",
                    "model": "gpt-4.1-mini", "status": "in_progress", "output": [] } }),
            json!({ "type": "response.output_item.added", "output_index": 0,
                    "item": { "type": "message", "id": "msg_1", "role": "assistant",
                              "content": [] } }),
            json!({ "type": "response.output_text.delta", "output_index": 0,
                    "content_index": 0, "delta": "Reading \"a" }),
            json!({ "type": "response.output_text.delta", "output_index": 0,
                    "content_index": 0, "delta": ".rs\"" }),
            json!({ "type": "response.output_item.done", "output_index": 0,
                    "item": { "type": "message", "id": "msg_1", "role": "assistant",
                              "content": [{ "type": "output_text", "text": "Reading \"a.rs\"" }] } }),
            json!({ "type": "response.output_item.added", "output_index": 1,
                    "item": { "type": "function_call", "id": "fc_1", "call_id": "call_1",
                              "name": "read_file", "arguments": "" } }),
            json!({ "type": "response.function_call_arguments.delta", "output_index": 1,
                    "item_id": "fc_1", "delta": "{\"path\":" }),
            json!({ "type": "response.function_call_arguments.delta", "output_index": 1,
                    "item_id": "fc_1", "delta": "\"a.rs\"}" }),
            // The final event without its output: what the deltas said is the reply.
            json!({ "type": "response.completed", "response": { "id": "resp_9",
                    "status": "completed", "output": [],
                    "usage": { "input_tokens": 50, "output_tokens": 12 } } }),
        ];
        let reply = parse_stream(&events).expect("a reply");
        assert_eq!(reply.turn.text, "Reading \"a.rs\"");
        assert_eq!(reply.turn.tool_calls[0].id, "call_1");
        assert_eq!(
            reply.turn.tool_calls[0].arguments,
            json!({ "path": "a.rs" })
        );
        assert_eq!(reply.turn.finish, Finish::ToolCalls);
        assert_eq!(
            reply.turn.usage,
            Some(Usage {
                input_tokens: 50,
                output_tokens: 12
            })
        );
        assert_eq!(reply.model.as_deref(), Some("gpt-4.1-mini"));
        // Cut before its final event: never an answer.
        let cut = parse_stream(&events[..8]).expect_err("cut");
        assert_eq!(cut.kind, ModelErrorKind::Server);
    }

    /// llama.cpp's server, as it answered a request capped at 3 tokens: `completed`, items
    /// named by `item_id` alone (no `output_index`).
    const LLAMA_CUT: &str = r#"{"completed_at":1795654404,"created_at":1795654404,"id":"resp_XeYv1P9fR4TmA9mjJzL7Ya0N4mQYgnyR","model":"SmolLM2-135M-Instruct.Q4_1.gguf","object":"response","output":[{"content":[{"type":"output_text","annotations":[],"logprobs":[],"text":"How do we"}],"id":"msg_VMrG7pE6JGEtiQuFbGvUCASNIG5jdkMK","role":"assistant","status":"completed","type":"message"}],"status":"completed","usage":{"input_tokens":21,"output_tokens":3,"total_tokens":24,"input_tokens_details":{"cached_tokens":0}}}"#;

    #[test]
    fn a_completed_reply_that_reached_the_cap_is_cut() {
        let reply = parse_response(LLAMA_CUT.as_bytes()).expect("a reply");
        assert_eq!(reply.turn.finish, Finish::Stop);
        assert_eq!(reply.turn.text, "How do we");
        assert_eq!(cut_at_cap(reply, 3).turn.finish, Finish::Length);
        let reply = parse_response(LLAMA_CUT.as_bytes()).expect("a reply");
        assert_eq!(cut_at_cap(reply, 48).turn.finish, Finish::Stop);
        // Tool calls and OpenAI's own `incomplete` stay as they are.
        let calls = parse_response(CALL.as_bytes()).expect("a reply");
        assert_eq!(cut_at_cap(calls, 23).turn.finish, Finish::ToolCalls);
    }

    #[test]
    fn events_that_name_items_by_id_alone_keep_them_apart() {
        let msg = "msg_VMrG7pE6JGEtiQuFbGvUCASNIG5jdkMK";
        let events = [
            json!({ "type": "response.created", "response": { "id": "resp_1",
                    "object": "response", "status": "in_progress" } }),
            json!({ "type": "response.output_item.added", "item": { "content": [], "id": msg,
                    "role": "assistant", "status": "in_progress", "type": "message" } }),
            json!({ "type": "response.content_part.added", "item_id": msg,
                    "part": { "type": "output_text", "text": "" } }),
            json!({ "type": "response.output_text.delta", "item_id": msg, "delta": "Count" }),
            json!({ "type": "response.output_text.delta", "item_id": msg, "delta": " to" }),
            json!({ "type": "response.output_text.done", "item_id": msg, "text": "Count to" }),
            json!({ "type": "response.output_item.done", "item": { "type": "message",
                    "status": "completed", "id": msg, "role": "assistant", "content": [
                    { "type": "output_text", "annotations": [], "text": "Count to" }] } }),
            json!({ "type": "response.output_item.added", "item": { "type": "function_call",
                    "id": "fc_1", "call_id": "call_1", "name": "read", "arguments": "" } }),
            json!({ "type": "response.output_item.added", "item": { "type": "function_call",
                    "id": "fc_2", "call_id": "call_2", "name": "read", "arguments": "" } }),
            json!({ "type": "response.function_call_arguments.delta", "item_id": "fc_1",
                    "delta": "{\"path\":\"a\"}" }),
            json!({ "type": "response.function_call_arguments.delta", "item_id": "fc_2",
                    "delta": "{\"path\":\"b\"}" }),
            json!({ "type": "response.completed", "response": { "id": "resp_1",
                    "status": "completed", "output": [],
                    "usage": { "input_tokens": 34, "output_tokens": 20 } } }),
        ];
        let reply = parse_stream(&events).expect("a reply");
        assert_eq!(reply.turn.text, "Count to");
        let calls = &reply.turn.tool_calls;
        assert_eq!(calls.len(), 2);
        assert_eq!(calls[0].id, "call_1");
        assert_eq!(calls[0].arguments, json!({ "path": "a" }));
        assert_eq!(calls[1].id, "call_2");
        assert_eq!(calls[1].arguments, json!({ "path": "b" }));
    }

    #[test]
    fn the_request_carries_items_tools_and_the_cap() {
        let calls = vec![ToolCall::new("call_1", "read_file", json!({ "path": "a" }))];
        let messages = [
            Message::system("Be brief."),
            Message::user("Read a."),
            Message::assistant("Reading.", calls),
            Message::tool_result("call_1", "read_file", "text".into(), None),
        ];
        let options = Options {
            model: "gpt-4.1-mini",
            max_output_tokens: Some(64),
            stream: false,
            temperature: None,
            seed: None,
        };
        let body = request_body(
            options,
            &ModelRequest {
                messages: &messages,
                tools: &[],
                tools_enabled: true,
                purpose: terminus_runtime::Purpose::Verify,
            },
        );
        assert_eq!(
            body,
            json!({ "model": "gpt-4.1-mini", "input": [
                { "type": "message", "role": "system", "content": "Be brief." },
                { "type": "message", "role": "user", "content": "Read a." },
                { "type": "message", "role": "assistant", "content": "Reading." },
                { "type": "function_call", "call_id": "call_1", "name": "read_file",
                  "arguments": "{\"path\":\"a\"}" },
                { "type": "function_call_output", "call_id": "call_1", "output": "text" },
            ], "max_output_tokens": 64, "store": false })
        );
    }
}
