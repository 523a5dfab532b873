//! Chat messages as the frameworks keep them, read into the kernel's events: once, here, for
//! every framework adapter.
//!
//! A message is JSON in one of the shapes the frameworks use; the reader recognises each by its
//! keys, so an adapter passes its messages as they are (a dict or an object's fields):
//!
//! | framework | a reply | a tool result |
//! |---|---|---|
//! | OpenAI chat (the common shape) | `{"role": "assistant", "content", "tool_calls": [{"id", "function": {"name", "arguments": TEXT}}], "finish_reason", "usage": {"prompt_tokens", "completion_tokens"}, "reasoning_content"}` | `{"role": "tool", "tool_call_id", "content"}` |
//! | LangChain (Python `model_dump()`, JS fields) | `{"type": "ai", "content", "tool_calls": [{"id", "name", "args"}], "invalid_tool_calls", "usage_metadata", "response_metadata": {"finish_reason" or "stop_reason"}, "additional_kwargs"}` | `{"type": "tool", "tool_call_id", "content", "status", "response_metadata": {"terminus_error"}}` |
//! | AI SDK | `{"role": "assistant", "content": [{"type": "text"}, {"type": "tool-call", "toolCallId", "toolName", "input"}], "finishReason", "usage": {"inputTokens", "outputTokens"}}` | `{"role": "tool", "content": [{"type": "tool-result", "toolCallId", "toolName", "output"}]}` |
//! | Pydantic AI | `{"kind": "response", "parts": [{"part_kind": "text"}, {"part_kind": "tool-call", "tool_call_id", "tool_name", "args"}], "usage", "finish_reason"}` | `{"kind": "request", "parts": [{"part_kind": "tool-return" or "retry-prompt", "tool_call_id", "tool_name", "content", "outcome", "retry": {"cause"}, "metadata": {"terminus_error"}}]}` |
//! | OpenAI Agents (`ModelResponse`: `{"output": [items], "usage", "response_id"}`, Responses items) | `{"type": "message", "role": "assistant", "status", "content": [{"type": "output_text"} or {"type": "refusal"}]}`, `{"type": "function_call", "call_id", "name", "arguments"}`, `{"type": "reasoning"}` (a message `incomplete`: cut at the length limit; a refusal: the provider withheld the reply, a content filter) | `{"type": "function_call_output", "call_id", "output"}` |
//! | OpenAI Agents JS (its items) | the same, a call's id in `callId`, a `reasoning` item for reasoning, the `finish_reason` the host read beside `output` | `{"type": "function_call_result", "callId", "output": TEXT or {"type": "text", "text"}}` |
//!
//! Content is a string or a list of blocks whose `text` blocks (`text`, `output_text`) are the
//! visible text; `reasoning`/`thinking` blocks (or `reasoning_content`) mark reasoning output.
//! Tool call arguments that are not a JSON object (text that does not parse) are still a call,
//! an *invalid* one: the kernel sees the raw text and the host answers it `invalid_arguments`.
//! A tool result is `ok` with the SHA-256 digest of its text (the kernel compares outputs and
//! never reads them, so a snapshot never carries them), or an error when the framework marks it
//! one (`status: "error"`, `isError` or an `error-*` output, a `retry-prompt` part, a
//! `tool-return` part whose `outcome` is not `success`). A host that knows the kernel's class of
//! a failure puts it in `terminus_error` (on the message, on its part, in its
//! `response_metadata`, LangChain's place for it, or in a part's `metadata`); it wins over the
//! shape's own mark.

use serde_json::{Map, Value};
use sha2::{Digest, Sha256};
use terminus_kernel::{Finish, ToolErrorKind, Usage};

use super::wire::{CallIn, InputError, ResultIn, TurnIn};

/// A model reply read from a message.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Reply {
    /// The message's id, when it has one.
    pub id: Option<String>,
    /// The `model_turn` (its `tools` unset: the host knows what it offered).
    pub turn: TurnIn,
    /// The calls whose arguments are not a JSON object: `(id, name, what they are answered)`
    /// (the words `terminus run` answers such a call with).
    pub invalid: Vec<(String, String, String)>,
    /// The calls of output tools taken as the reply's text ([`Reply::claim_outputs`]):
    /// `(id, name)`, answered by the host core when the kernel does not accept the claim.
    pub claims: Vec<(String, String)>,
}

impl Reply {
    /// Whether the reply calls a tool (a valid or an invalid call).
    pub fn has_calls(&self) -> bool {
        self.turn.tool_calls.as_ref().is_some_and(|c| !c.is_empty())
    }

    /// The calls of `output_tools` (a structured answer) taken as the reply's text: each one's
    /// arguments as compact JSON (the raw text when they did not parse), on lines after the
    /// reply's own text.
    pub fn claim_outputs(&mut self, output_tools: &[String]) {
        if output_tools.is_empty() {
            return;
        }
        let calls = self.turn.tool_calls.take().unwrap_or_default();
        let (claims, calls): (Vec<CallIn>, Vec<CallIn>) = calls
            .into_iter()
            .partition(|c| output_tools.contains(&c.name));
        self.turn.tool_calls = Some(calls);
        if claims.is_empty() {
            return;
        }
        self.claims = claims
            .iter()
            .map(|c| (c.id.clone().unwrap_or_default(), c.name.clone()))
            .collect();
        self.invalid
            .retain(|(_, name, _)| !output_tools.contains(name));
        let text = self.turn.text.take().unwrap_or_default();
        let lines = claims.iter().map(|c| match &c.arguments {
            Some(Value::String(raw)) => raw.clone(),
            Some(args) => args.to_string(),
            None => "{}".to_owned(),
        });
        let all: Vec<String> = (!text.is_empty())
            .then_some(text)
            .into_iter()
            .chain(lines)
            .collect();
        self.turn.text = Some(all.join("\n"));
    }
}

/// The role a message plays in the conversation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// The person (or the host) asking.
    User,
    /// The model.
    Assistant,
    /// Tool results.
    Tool,
    /// Anything else (system prompts).
    Other,
}

fn str_at<'a>(v: &'a Value, key: &str) -> Option<&'a str> {
    v.get(key).and_then(Value::as_str)
}

/// The role of a message in any of the shapes above.
pub fn role(message: &Value) -> Role {
    if let Some(role) = str_at(message, "role") {
        return match role {
            "user" | "human" => Role::User,
            "assistant" | "ai" | "model" => Role::Assistant,
            "tool" | "function" => Role::Tool,
            _ => Role::Other,
        };
    }
    match str_at(message, "type") {
        Some("human" | "user") => return Role::User,
        Some("ai" | "assistant" | "function_call" | "AIMessageChunk" | "reasoning") => {
            return Role::Assistant;
        }
        Some("tool" | "function_call_output" | "function_call_result") => return Role::Tool,
        Some("message") => return Role::Other,
        _ => {}
    }
    match str_at(message, "kind") {
        Some("response") => Role::Assistant,
        Some("request") => {
            let parts = message.get("parts").and_then(Value::as_array);
            let user = parts.is_some_and(|p| {
                p.iter()
                    .any(|p| str_at(p, "part_kind") == Some("user-prompt"))
            });
            if user { Role::User } else { Role::Tool }
        }
        _ => Role::Other,
    }
}

/// The visible text of a content value: a string, or the text of its text blocks.
pub fn text_of(content: &Value) -> String {
    match content {
        Value::String(s) => s.clone(),
        Value::Array(blocks) => {
            let mut text = String::new();
            for block in blocks {
                match block {
                    Value::String(s) => text.push_str(s),
                    Value::Object(b) => {
                        let kind = b.get("type").and_then(Value::as_str);
                        let part = b.get("part_kind").and_then(Value::as_str);
                        if matches!(kind, Some("text" | "output_text" | "input_text"))
                            || part == Some("text")
                        {
                            let field = if part.is_some() { "content" } else { "text" };
                            if let Some(s) = b.get(field).and_then(Value::as_str) {
                                text.push_str(s);
                            }
                        }
                    }
                    _ => {}
                }
            }
            text
        }
        _ => String::new(),
    }
}

/// The text of a user message (the task), in any shape.
pub fn user_text(message: &Value) -> String {
    if let Some(parts) = message.get("parts").and_then(Value::as_array) {
        return parts
            .iter()
            .filter(|p| str_at(p, "part_kind") == Some("user-prompt"))
            .map(|p| p.get("content").map(text_of).unwrap_or_default())
            .collect();
    }
    message.get("content").map(text_of).unwrap_or_default()
}

/// The run's task: the text of the first user message.
pub fn task_of(messages: &[Value]) -> String {
    messages
        .iter()
        .find(|m| role(m) == Role::User)
        .map(user_text)
        .unwrap_or_default()
}

fn finish_of(reason: &str) -> Option<Finish> {
    Some(match reason {
        "stop" | "end_turn" | "stop_sequence" | "STOP" => Finish::Stop,
        "length" | "max_tokens" | "MAX_TOKENS" => Finish::Length,
        "content_filter" | "content-filter" | "SAFETY" => Finish::ContentFilter,
        "repetition" => Finish::Repetition,
        "tool_calls" | "tool-calls" | "tool_use" | "tool_call" | "function_call" => {
            Finish::ToolCalls
        }
        _ => return None,
    })
}

fn count(v: Option<&Value>) -> Option<u64> {
    let v = v?;
    v.as_u64()
        .or_else(|| v.as_f64().filter(|f| *f >= 0.0).map(|f| f as u64))
}

fn usage_of(message: &Value) -> Option<Usage> {
    let usage = message
        .get("usage_metadata")
        .filter(|u| u.is_object())
        .or_else(|| message.get("usage").filter(|u| u.is_object()))?;
    let pick = |keys: &[&str]| keys.iter().find_map(|k| count(usage.get(*k)));
    let input = pick(&[
        "input_tokens",
        "prompt_tokens",
        "inputTokens",
        "request_tokens",
    ]);
    let output = pick(&[
        "output_tokens",
        "completion_tokens",
        "outputTokens",
        "response_tokens",
    ]);
    if input.is_none() && output.is_none() {
        return None;
    }
    Some(Usage {
        input_tokens: input.unwrap_or(0),
        output_tokens: output.unwrap_or(0),
    })
}

/// Arguments as the kernel takes them: an object as it is; text parsed when it is a JSON
/// object, else kept as the raw text with the parser's error (an invalid call).
fn arguments_of(args: Option<&Value>) -> (Value, Option<String>) {
    match args {
        None | Some(Value::Null) => (Value::Object(Map::new()), None),
        Some(Value::String(text)) if text.trim().is_empty() => (Value::Object(Map::new()), None),
        Some(Value::String(text)) => match serde_json::from_str::<Value>(text) {
            Ok(v @ Value::Object(_)) => (v, None),
            Ok(_) => (
                Value::String(text.clone()),
                Some("not a JSON object".to_owned()),
            ),
            Err(e) => (Value::String(text.clone()), Some(e.to_string())),
        },
        Some(other) => (other.clone(), None),
    }
}

fn reasoned(message: &Value) -> bool {
    let blocks = message
        .get("content")
        .and_then(Value::as_array)
        .into_iter()
        .chain(message.get("parts").and_then(Value::as_array))
        .flatten();
    for block in blocks {
        let kind = str_at(block, "type").or_else(|| str_at(block, "part_kind"));
        // A Pydantic AI `thinking` part is reasoning when it has content.
        let empty = str_at(block, "part_kind") == Some("thinking")
            && str_at(block, "content").is_none_or(str::is_empty);
        if matches!(kind, Some("reasoning" | "thinking")) && !empty {
            return true;
        }
    }
    let filled = |v: Option<&Value>| {
        v.is_some_and(|v| match v {
            Value::String(s) => !s.is_empty(),
            Value::Null | Value::Bool(false) => false,
            _ => true,
        })
    };
    let extra = message.get("additional_kwargs");
    filled(message.get("reasoning_content"))
        || filled(extra.and_then(|e| e.get("reasoning_content")))
        || filled(extra.and_then(|e| e.get("reasoning")))
}

/// Adds one call to `calls` (and to the reply's invalid calls when its arguments are not an
/// object); a call without an id is refused: its result could not be matched to it.
fn push_call(
    id: Option<&str>,
    name: Option<&str>,
    args: Option<&Value>,
    at: String,
    reply: &mut Reply,
    calls: &mut Vec<CallIn>,
) -> Result<(), InputError> {
    let name = name.unwrap_or_default();
    let Some(id) = id.filter(|id| !id.is_empty()) else {
        return Err(InputError::at(
            &at,
            format!("the call of `{name}` has no id (its result could not be matched to it)"),
        ));
    };
    let (arguments, error) = arguments_of(args);
    if error.is_some() {
        let answer = crate::tool::invalid_arguments_message(&arguments);
        reply.invalid.push((id.to_owned(), name.to_owned(), answer));
    }
    calls.push(CallIn {
        id: Some(id.to_owned()),
        name: name.to_owned(),
        arguments: Some(arguments),
    });
    Ok(())
}

/// A model reply: one message, or (OpenAI Agents) the items of one turn.
pub fn reply_of(message: &Value, at: &str) -> Result<Reply, InputError> {
    // OpenAI Agents' `ModelResponse`: its `output` items, its usage and id beside them.
    let wrapped = message.get("output").and_then(Value::as_array);
    let items: Vec<&Value> = match (message, wrapped) {
        (Value::Object(_), Some(items)) => items.iter().collect(),
        (Value::Array(items), _) => items.iter().collect(),
        (Value::Object(_), None) => vec![message],
        _ => return Err(InputError::at(at, "expected a message object".to_owned())),
    };
    let mut reply = Reply::default();
    let mut text = String::new();
    let mut calls: Vec<CallIn> = Vec::new();
    for (i, item) in items.iter().enumerate() {
        let at = if items.len() > 1 {
            format!("{at}[{i}]")
        } else {
            at.to_owned()
        };
        if reply.id.is_none() {
            reply.id = str_at(item, "id").map(str::to_owned);
        }
        if str_at(item, "type") == Some("reasoning") {
            // OpenAI Agents: a reasoning item of the turn (its summary is not the reply's text).
            reply.turn.reasoning = Some(true);
            continue;
        }
        if str_at(item, "type") == Some("message") {
            // OpenAI Agents: a message cut short is `incomplete`; a refusal part is the provider
            // withholding the reply (the SDK's chat models put a content filter's stop there),
            // not an answer.
            if str_at(item, "status") == Some("incomplete") {
                reply.turn.finish = Some(Finish::Length);
            }
            let blocks = item.get("content").and_then(Value::as_array);
            if blocks.is_some_and(|b| b.iter().any(|b| str_at(b, "type") == Some("refusal"))) {
                reply.turn.finish = Some(Finish::ContentFilter);
            }
        }
        if str_at(item, "type") == Some("function_call") {
            push_call(
                str_at(item, "call_id")
                    .or_else(|| str_at(item, "callId"))
                    .or_else(|| str_at(item, "id")),
                str_at(item, "name"),
                item.get("arguments"),
                at,
                &mut reply,
                &mut calls,
            )?;
            continue;
        }
        if let Some(content) = item.get("content") {
            text.push_str(&text_of(content));
        }
        if let Some(parts) = item.get("parts").and_then(Value::as_array) {
            text.push_str(&text_of(&Value::Array(parts.clone())));
            for (j, part) in parts.iter().enumerate() {
                if str_at(part, "part_kind") == Some("tool-call") {
                    push_call(
                        str_at(part, "tool_call_id"),
                        str_at(part, "tool_name"),
                        part.get("args"),
                        format!("{at}.parts[{j}]"),
                        &mut reply,
                        &mut calls,
                    )?;
                }
            }
        }
        if let Some(blocks) = item.get("content").and_then(Value::as_array) {
            for (j, block) in blocks.iter().enumerate() {
                if str_at(block, "type") == Some("tool-call") {
                    push_call(
                        str_at(block, "toolCallId"),
                        str_at(block, "toolName"),
                        block.get("input").or_else(|| block.get("args")),
                        format!("{at}.content[{j}]"),
                        &mut reply,
                        &mut calls,
                    )?;
                }
            }
        }
        for (j, c) in item
            .get("tool_calls")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .enumerate()
        {
            let function = c.get("function");
            push_call(
                str_at(c, "id"),
                str_at(c, "name").or_else(|| function.and_then(|f| str_at(f, "name"))),
                c.get("args")
                    .or_else(|| function.and_then(|f| f.get("arguments"))),
                format!("{at}.tool_calls[{j}]"),
                &mut reply,
                &mut calls,
            )?;
        }
        for c in item
            .get("invalid_tool_calls")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            // LangChain's calls whose arguments did not parse: answerable only with an id.
            let Some(id) = str_at(c, "id").filter(|id| !id.is_empty()) else {
                continue;
            };
            let name = str_at(c, "name").unwrap_or_default();
            // Answered as `terminus run` answers them (LangChain's own `error` is not used).
            let raw = Value::String(str_at(c, "args").unwrap_or_default().to_owned());
            let answer = crate::tool::invalid_arguments_message(&raw);
            reply.invalid.push((id.to_owned(), name.to_owned(), answer));
            calls.push(CallIn {
                id: Some(id.to_owned()),
                name: name.to_owned(),
                arguments: Some(raw),
            });
        }
        let reason = item
            .get("response_metadata")
            .and_then(|m| str_at(m, "finish_reason").or_else(|| str_at(m, "stop_reason")))
            .or_else(|| str_at(item, "finish_reason"))
            .or_else(|| str_at(item, "finishReason"));
        if let Some(finish) = reason.and_then(finish_of) {
            reply.turn.finish = Some(finish);
        }
        if let Some(usage) = usage_of(item) {
            reply.turn.usage = Some(usage);
        }
        if reasoned(item) {
            reply.turn.reasoning = Some(true);
        }
    }
    if wrapped.is_some() {
        reply.id = str_at(message, "response_id")
            .or_else(|| str_at(message, "id"))
            .map(str::to_owned)
            .or(reply.id);
        if let Some(usage) = usage_of(message) {
            reply.turn.usage = Some(usage);
        }
        // OpenAI Agents JS keeps a turn's finish reason beside its items, when the host read one.
        if let Some(finish) = str_at(message, "finish_reason").and_then(finish_of) {
            reply.turn.finish = Some(finish);
        }
    }
    reply.turn.text = Some(text);
    reply.turn.tool_calls = Some(calls);
    Ok(reply)
}

/// One tool result found in the conversation: the call it answers, and what it is.
#[derive(Debug, Clone, PartialEq)]
pub struct Found {
    /// The call id.
    pub call_id: String,
    /// The message's id, when it has one (where the kernel's notices go).
    pub id: Option<String>,
    /// The error class, when it failed.
    pub error: Option<ToolErrorKind>,
    /// Its text.
    pub text: String,
}

/// A tool's failure as the model reads it in `terminus run`, for a framework whose tool result
/// is only text: `error (KIND): MESSAGE`, `kind` a class of the kernel's (any other is `failed`,
/// as the core counts it).
pub fn failure_text(kind: &str, message: &str) -> String {
    crate::tool::failure_text(error_kind(kind), message)
}

fn error_kind(value: &str) -> ToolErrorKind {
    serde_json::from_value(Value::String(value.to_owned())).unwrap_or(ToolErrorKind::Failed)
}

fn output_text(output: &Value) -> String {
    match output {
        Value::String(s) => s.clone(),
        Value::Object(o) if o.contains_key("value") && o.contains_key("type") => {
            match o.get("value") {
                Some(Value::String(s)) => s.clone(),
                Some(v) => v.to_string(),
                None => String::new(),
            }
        }
        // OpenAI Agents JS: `{"type": "text", "text"}`.
        Value::Object(o) if o.get("type").and_then(Value::as_str) == Some("text") => o
            .get("text")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned(),
        Value::Array(_) => text_of(output),
        Value::Null => String::new(),
        other => other.to_string(),
    }
}

/// The kernel's error class a host put on a result: `terminus_error`, on the message or part,
/// or in its `response_metadata` (LangChain's place for it).
fn marked(v: &Value) -> Option<ToolErrorKind> {
    str_at(v, "terminus_error")
        .or_else(|| {
            v.get("response_metadata")
                .and_then(|m| str_at(m, "terminus_error"))
        })
        .map(error_kind)
}

/// The kernel's error class of a Pydantic AI `tool-return` part (`None`: a success): the class
/// a tool marked in its `metadata` (`terminus_error`), else its `outcome`: `denied` is
/// `permission_denied`; `retried` is by its retry's `cause` (`validation_error`:
/// `invalid_arguments`, `unknown_tool` or `unavailable_tool`: `not_found`, else `failed`);
/// any other but `success` is `failed`.
fn outcome_error(part: &Value) -> Option<ToolErrorKind> {
    if let Some(kind) = part
        .get("metadata")
        .and_then(|m| str_at(m, "terminus_error"))
    {
        return Some(error_kind(kind));
    }
    Some(match str_at(part, "outcome") {
        None | Some("success") => return None,
        Some("denied") => ToolErrorKind::PermissionDenied,
        Some("retried") => match part.get("retry").and_then(|r| str_at(r, "cause")) {
            Some("validation_error") => ToolErrorKind::InvalidArguments,
            Some("unknown_tool" | "unavailable_tool") => ToolErrorKind::NotFound,
            _ => ToolErrorKind::Failed,
        },
        Some(_) => ToolErrorKind::Failed,
    })
}

/// The tool results of one message (none for a message that is not one).
fn results_in(message: &Value, out: &mut Vec<Found>) {
    let id = str_at(message, "id").map(str::to_owned);
    if let Some(call_id) = str_at(message, "tool_call_id") {
        let error = match (marked(message), str_at(message, "status")) {
            (Some(kind), _) => Some(kind),
            (None, Some("error")) => Some(ToolErrorKind::Failed),
            _ => None,
        };
        out.push(Found {
            call_id: call_id.to_owned(),
            id,
            error,
            text: message.get("content").map(text_of).unwrap_or_default(),
        });
        return;
    }
    if matches!(
        str_at(message, "type"),
        Some("function_call_output" | "function_call_result")
    ) {
        if let Some(call_id) = str_at(message, "call_id").or_else(|| str_at(message, "callId")) {
            out.push(Found {
                call_id: call_id.to_owned(),
                id,
                error: marked(message),
                text: message.get("output").map(output_text).unwrap_or_default(),
            });
        }
        return;
    }
    let parts = message
        .get("parts")
        .or_else(|| message.get("content"))
        .and_then(Value::as_array);
    for part in parts.into_iter().flatten() {
        let (call_id, error, text) = match (str_at(part, "part_kind"), str_at(part, "type")) {
            (Some("tool-return"), _) => (
                str_at(part, "tool_call_id"),
                outcome_error(part),
                part.get("content").map(output_text),
            ),
            (Some("retry-prompt"), _) => {
                // Validation errors (a list) are the arguments'; a tool's `ModelRetry` (text)
                // is its failure.
                let content = part.get("content");
                let kind = if content.is_some_and(Value::is_array) {
                    ToolErrorKind::InvalidArguments
                } else {
                    ToolErrorKind::Failed
                };
                (
                    str_at(part, "tool_call_id"),
                    Some(kind),
                    content.map(output_text),
                )
            }
            (_, Some("tool-result")) => {
                let output = part.get("output").or_else(|| part.get("result"));
                let failed = part.get("isError").and_then(Value::as_bool) == Some(true)
                    || output
                        .and_then(|o| str_at(o, "type"))
                        .is_some_and(|t| t.starts_with("error") || t == "execution-denied");
                (
                    str_at(part, "toolCallId"),
                    failed.then_some(ToolErrorKind::Failed),
                    output.map(output_text),
                )
            }
            _ => continue,
        };
        if let Some(call_id) = call_id {
            out.push(Found {
                call_id: call_id.to_owned(),
                id: id.clone(),
                error: marked(part).or(error),
                text: text.unwrap_or_default(),
            });
        }
    }
}

/// The results after the conversation's last reply, the last one first.
pub fn last_results(messages: &[Value]) -> Vec<Found> {
    let mut found = Vec::new();
    for message in messages.iter().rev() {
        if role(message) == Role::Assistant {
            break;
        }
        let mut here = Vec::new();
        results_in(message, &mut here);
        found.extend(here.into_iter().rev());
    }
    found
}

/// The kernel's result for a call answered by `found`: the error, or `ok` with the digest of
/// its text (the kernel compares results, it never reads them), or with the text itself when
/// `quoted` (a declared poller's, which the kernel quotes in its nudges).
pub fn result_of(call_id: &str, name: &str, found: Option<&Found>, quoted: bool) -> ResultIn {
    let Some(found) = found else {
        return ResultIn {
            call_id: call_id.to_owned(),
            name: name.to_owned(),
            ok: None,
            error: Some(ToolErrorKind::Failed),
            message: Some("no result came back for this call".to_owned()),
        };
    };
    match found.error {
        Some(kind) => ResultIn {
            call_id: call_id.to_owned(),
            name: name.to_owned(),
            ok: None,
            error: Some(kind),
            message: Some(found.text.clone()),
        },
        None => ResultIn {
            call_id: call_id.to_owned(),
            name: name.to_owned(),
            ok: Some(Value::String(if quoted {
                found.text.clone()
            } else {
                digest(&found.text)
            })),
            error: None,
            message: None,
        },
    }
}

/// `sha256:` and the hex SHA-256 of `text`.
pub fn digest(text: &str) -> String {
    let hash = Sha256::digest(text.as_bytes());
    let mut out = String::with_capacity(7 + 64);
    out.push_str("sha256:");
    for byte in hash {
        out.push_str(&format!("{byte:02x}"));
    }
    out
}

/// `content` with the kernel's `notices` after it (a step's `notices`, for its `notice_to`), as
/// `terminus run` and every host place them: the notices joined by blank lines, after a blank
/// line, or alone when `content` is empty. The one place of that rule: the bindings call it.
pub fn with_notices(content: &str, notices: &[String]) -> String {
    let mut out = content.to_owned();
    for notice in notices {
        crate::message::append_kernel_text(&mut out, notice);
    }
    out
}

pub use crate::driver::{Summary, summary_text};

/// The user message a checkpoint written for the agent adds to the conversation before the next
/// model call (a step's `checkpoint`): its `note`, a blank line, and the summary's text
/// ([`summary_text`]), as `terminus run` writes it.
pub fn checkpoint_message(note: &str, summary: Summary<'_>) -> String {
    crate::message::checkpoint_text(note, &summary_text(summary))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn notices_ride_after_a_blank_line_or_alone() {
        let two = ["loop warning".to_owned(), "token warning".to_owned()];
        assert_eq!(
            with_notices("result", &two),
            "result\n\nloop warning\n\ntoken warning"
        );
        assert_eq!(with_notices("", &two), "loop warning\n\ntoken warning");
        assert_eq!(with_notices("result", &[]), "result");
        // As `terminus run` appends them to a tool message.
        let m = crate::message::Message::tool_result(
            "c1",
            "read",
            "result".into(),
            Some(&two.join("\n\n")),
        );
        assert_eq!(m.content, with_notices("result", &two));
    }

    #[test]
    fn a_checkpoint_reads_its_note_then_the_summary_or_why_there_is_none() {
        let note = "Checkpoint written for you.";
        assert_eq!(
            checkpoint_message(note, Summary::Reply("  a.md read; c.md left \n")),
            "Checkpoint written for you.\n\na.md read; c.md left"
        );
        assert_eq!(
            checkpoint_message(note, Summary::Reply(" \n")),
            "Checkpoint written for you.\n\n(The model wrote no summary.)"
        );
        assert_eq!(
            checkpoint_message(
                note,
                Summary::Failed {
                    kind: "rate_limited",
                    message: "slow down"
                }
            ),
            "Checkpoint written for you.\n\n(No summary: the model call failed: rate_limited: slow down.)"
        );
        assert_eq!(
            checkpoint_message(note, Summary::NoAnswer),
            "Checkpoint written for you.\n\n(No summary: the model did not answer in time.)"
        );
        // As the conversation of `terminus run` holds the journaled checkpoint.
        let policy = terminus_kernel::Policy::default();
        let mut conversation = crate::conversation::Conversation::new(None, "task", true, &policy);
        let entry = terminus_kernel::Entry::Checkpoint {
            note: note.to_owned(),
            text: summary_text(Summary::Reply("done")),
        };
        conversation.apply(&entry, None).expect("applied");
        let last = conversation.messages().last().expect("a message");
        assert_eq!(
            last.content,
            checkpoint_message(note, Summary::Reply("done"))
        );
    }

    #[test]
    fn an_openai_agents_response_reads_reasoning_refusals_and_cut_messages() {
        let response = json!({
            "output": [
                {"type": "reasoning", "id": "rs_1", "summary": [{"type": "summary_text", "text": "think"}]},
                {"type": "message", "id": "msg_1", "role": "assistant", "content": [
                    {"type": "refusal", "refusal": "I can't help with that."}
                ]}
            ],
            "usage": {"input_tokens": 5, "output_tokens": 2},
            "response_id": "resp_1"
        });
        let reply = reply_of(&response, "message").expect("read");
        assert_eq!(reply.id.as_deref(), Some("resp_1"));
        assert_eq!(reply.turn.reasoning, Some(true));
        assert_eq!(reply.turn.text.as_deref(), Some(""));
        assert_eq!(reply.turn.finish, Some(Finish::ContentFilter));
        assert!(!reply.has_calls());
        let usage = reply.turn.usage.expect("usage");
        assert_eq!((usage.input_tokens, usage.output_tokens), (5, 2));

        let cut = json!({"output": [{"type": "message", "status": "incomplete", "content": [
            {"type": "output_text", "text": "The design has"}
        ]}]});
        let reply = reply_of(&cut, "message").expect("read");
        assert_eq!(reply.turn.finish, Some(Finish::Length));
        assert_eq!(reply.turn.text.as_deref(), Some("The design has"));
        assert_eq!(reply.turn.reasoning, None);
    }

    /// OpenAI Agents JS: a call's id in `callId`, a reasoning item, and its results
    /// (`function_call_result`, output as `{"type": "text", "text"}`) marked by the host.
    #[test]
    fn openai_agents_js_items() {
        let response = json!({"response_id": "r1", "output": [
            {"type": "reasoning", "id": "rs_1", "content": []},
            {"type": "function_call", "id": "fc_1", "callId": "c1", "name": "ls", "arguments": "{}"}
        ], "usage": {"inputTokens": 5, "outputTokens": 2}, "finish_reason": "length"});
        let reply = reply_of(&response, "message").expect("a reply");
        assert_eq!(reply.id.as_deref(), Some("r1"));
        assert_eq!(reply.turn.reasoning, Some(true));
        assert_eq!(reply.turn.finish, Some(Finish::Length));
        let calls = reply.turn.tool_calls.expect("calls");
        assert_eq!(calls[0].id.as_deref(), Some("c1"));
        let history = [
            json!({"type": "reasoning", "id": "rs_1"}),
            json!({"type": "function_call", "callId": "c1", "name": "ls"}),
            json!({"type": "function_call_result", "callId": "c1", "output": {"type": "text", "text": "a.txt"}}),
            json!({"type": "function_call_result", "callId": "c2", "output": "boom", "terminus_error": "failed"}),
        ];
        let found = last_results(&history);
        assert_eq!(found.len(), 2);
        assert_eq!(
            (found[1].call_id.as_str(), found[1].text.as_str()),
            ("c1", "a.txt")
        );
        assert_eq!(found[0].error, Some(ToolErrorKind::Failed));
        assert_eq!(role(&history[0]), Role::Assistant);
    }
}
