//! Provider replies in their documented wire shapes (OpenAI's Chat Completions chunks and
//! objects, OpenAI's Responses events and objects, Anthropic's Messages events and objects), and a model client pointed at a fixture.

#![allow(dead_code, unreachable_pub)]

use serde_json::{Value, json};
use std::sync::Arc;
use std::time::Duration;
use terminus_fixture::{Fixture, Response};
use terminus_llm::{ApiKey, LlmConfig, LlmModel, Provider};

pub const MODEL_OPENAI: &str = "gpt-4o-mini";
pub const MODEL_ANTHROPIC: &str = "claude-sonnet-4-5";
pub const MODEL_RESPONSES: &str = "gpt-4.1-mini";

/// A client of `fixture` for `provider`.
pub fn model(fixture: &Fixture, provider: Provider, stream: bool) -> Arc<LlmModel> {
    Arc::new(model_with(fixture, provider, stream, |_| {}))
}

/// A client of `fixture`, its config changed by `change`.
pub fn model_with(
    fixture: &Fixture,
    provider: Provider,
    stream: bool,
    change: impl FnOnce(&mut LlmConfig),
) -> LlmModel {
    let name = match provider {
        Provider::OpenAi => MODEL_OPENAI,
        Provider::Anthropic => MODEL_ANTHROPIC,
        Provider::OpenAiResponses => MODEL_RESPONSES,
    };
    let mut config = LlmConfig::new(provider, format!("{}/v1", fixture.url()), name);
    config.stream = stream;
    config.timeout = Duration::from_secs(10);
    config.api_key = Some(ApiKey::new("test-key"));
    change(&mut config);
    LlmModel::new(config).expect("a valid config")
}

/// One reply, described once and served in either provider's shape, streamed or not.
#[derive(Debug, Clone, Default)]
pub struct Turn {
    pub text: String,
    pub calls: Vec<(String, String, String)>,
    pub finish: Option<String>,
    pub usage: Option<(u64, u64)>,
}

pub fn say(text: &str) -> Turn {
    Turn {
        text: text.into(),
        usage: Some((100, 10)),
        ..Turn::default()
    }
}

/// Tool calls: `(id, name, arguments as JSON text)`.
pub fn call(calls: &[(&str, &str, Value)]) -> Turn {
    Turn {
        calls: calls
            .iter()
            .map(|(id, name, args)| ((*id).into(), (*name).into(), args.to_string()))
            .collect(),
        usage: Some((100, 20)),
        ..Turn::default()
    }
}

/// A tool call whose arguments are the raw text given (broken JSON, for instance).
pub fn raw_call(id: &str, name: &str, raw: &str) -> Turn {
    Turn {
        calls: vec![(id.into(), name.into(), raw.into())],
        usage: Some((100, 20)),
        ..Turn::default()
    }
}

impl Turn {
    pub fn response(&self, provider: Provider, stream: bool) -> Response {
        match (provider, stream) {
            (Provider::OpenAi, true) => Response::sse(openai_chunks(self)),
            (Provider::OpenAi, false) => Response::json(200, openai_object(self).to_string()),
            (Provider::Anthropic, true) => Response::sse(anthropic_events(self)),
            (Provider::Anthropic, false) => Response::json(200, anthropic_object(self).to_string()),
            (Provider::OpenAiResponses, true) => Response::sse(responses_events(self)),
            (Provider::OpenAiResponses, false) => {
                Response::json(200, responses_object(self).to_string())
            }
        }
    }
}

fn openai_finish(turn: &Turn) -> String {
    turn.finish.clone().unwrap_or_else(|| {
        if turn.calls.is_empty() {
            "stop"
        } else {
            "tool_calls"
        }
        .into()
    })
}

fn chunk(delta: Value, finish: Option<&str>) -> String {
    let c = json!({
        "id": "chatcmpl-B9MBs8CjcvOU2jLn4n570S5qMJKcT", "object": "chat.completion.chunk",
        "created": 1741569952, "model": "gpt-4o-mini-2024-07-18", "service_tier": "default",
        "system_fingerprint": "fp_06737a9306",
        "choices": [{ "index": 0, "delta": delta, "logprobs": null, "finish_reason": finish }]
    });
    format!("data: {c}\n\n")
}

/// The chunks OpenAI streams for `turn`: role, text in pieces, each call's id and name then its
/// arguments in pieces, the finish chunk, the usage chunk (`choices: []`), `[DONE]`.
pub fn openai_chunks(turn: &Turn) -> Vec<String> {
    let mut out = vec![chunk(
        json!({ "role": "assistant", "content": "", "refusal": null }),
        None,
    )];
    for piece in pieces(&turn.text, 7) {
        out.push(chunk(json!({ "content": piece }), None));
    }
    for (i, (id, name, args)) in turn.calls.iter().enumerate() {
        out.push(chunk(
            json!({ "tool_calls": [{ "index": i, "id": id, "type": "function",
                                     "function": { "name": name, "arguments": "" } }] }),
            None,
        ));
        for piece in pieces(args, 5) {
            out.push(chunk(
                json!({ "tool_calls": [{ "index": i, "function": { "arguments": piece } }] }),
                None,
            ));
        }
    }
    out.push(chunk(json!({}), Some(&openai_finish(turn))));
    if let Some((input, output)) = turn.usage {
        let u = json!({
            "id": "chatcmpl-B9MBs8CjcvOU2jLn4n570S5qMJKcT", "object": "chat.completion.chunk",
            "created": 1741569952, "model": "gpt-4o-mini-2024-07-18", "choices": [],
            "usage": { "prompt_tokens": input, "completion_tokens": output,
                       "total_tokens": input + output }
        });
        out.push(format!("data: {u}\n\n"));
    }
    out.push("data: [DONE]\n\n".into());
    out
}

/// The object OpenAI returns for `turn` without streaming.
pub fn openai_object(turn: &Turn) -> Value {
    let mut message = json!({ "role": "assistant", "content": turn.text, "refusal": null,
                              "annotations": [] });
    if !turn.calls.is_empty() {
        message["content"] = Value::Null;
        message["tool_calls"] = turn
            .calls
            .iter()
            .map(|(id, name, args)| {
                json!({ "id": id, "type": "function",
                                            "function": { "name": name, "arguments": args } })
            })
            .collect();
    }
    let mut out = json!({
        "id": "chatcmpl-B9MHDbslfkBeAs8l4bebGdFOJ6PeG", "object": "chat.completion",
        "created": 1741570283, "model": "gpt-4o-2024-08-06",
        "choices": [{ "index": 0, "message": message, "logprobs": null,
                      "finish_reason": openai_finish(turn) }],
        "service_tier": "default", "system_fingerprint": "fp_fc9f1d7035"
    });
    if let Some((input, output)) = turn.usage {
        out["usage"] = json!({ "prompt_tokens": input, "completion_tokens": output,
                               "total_tokens": input + output,
                               "prompt_tokens_details": { "cached_tokens": 0 } });
    }
    out
}

fn anthropic_stop(turn: &Turn) -> String {
    turn.finish.clone().unwrap_or_else(|| {
        if turn.calls.is_empty() {
            "end_turn"
        } else {
            "tool_use"
        }
        .into()
    })
}

fn event(name: &str, data: Value) -> String {
    format!("event: {name}\ndata: {data}\n\n")
}

/// The events Anthropic streams for `turn`.
pub fn anthropic_events(turn: &Turn) -> Vec<String> {
    let (input, output) = turn.usage.unwrap_or((0, 0));
    let mut out = vec![event(
        "message_start",
        json!({ "type": "message_start", "message": {
            "id": "msg_1nZdL29xx5MUA1yADyHTEsnR8uuvGzszyY", "type": "message", "role": "assistant",
            "content": [], "model": MODEL_ANTHROPIC, "stop_reason": null, "stop_sequence": null,
            "usage": { "input_tokens": input, "output_tokens": 1 } } }),
    )];
    let mut index = 0;
    if !turn.text.is_empty() {
        out.push(event(
            "content_block_start",
            json!({ "type": "content_block_start",
            "index": index, "content_block": { "type": "text", "text": "" } }),
        ));
        out.push(event("ping", json!({ "type": "ping" })));
        for piece in pieces(&turn.text, 7) {
            out.push(event(
                "content_block_delta",
                json!({ "type": "content_block_delta",
                "index": index, "delta": { "type": "text_delta", "text": piece } }),
            ));
        }
        out.push(event(
            "content_block_stop",
            json!({ "type": "content_block_stop", "index": index }),
        ));
        index += 1;
    }
    for (id, name, args) in &turn.calls {
        out.push(event(
            "content_block_start",
            json!({ "type": "content_block_start",
            "index": index, "content_block": { "type": "tool_use", "id": id, "name": name,
                                               "input": {} } }),
        ));
        for piece in pieces(args, 5) {
            out.push(event(
                "content_block_delta",
                json!({ "type": "content_block_delta",
                "index": index, "delta": { "type": "input_json_delta", "partial_json": piece } }),
            ));
        }
        out.push(event(
            "content_block_stop",
            json!({ "type": "content_block_stop", "index": index }),
        ));
        index += 1;
    }
    out.push(event(
        "message_delta",
        json!({ "type": "message_delta",
        "delta": { "stop_reason": anthropic_stop(turn), "stop_sequence": null },
        "usage": { "output_tokens": output } }),
    ));
    out.push(event("message_stop", json!({ "type": "message_stop" })));
    out
}

/// The object Anthropic returns for `turn` without streaming.
pub fn anthropic_object(turn: &Turn) -> Value {
    let mut content = Vec::new();
    if !turn.text.is_empty() {
        content.push(json!({ "type": "text", "text": turn.text }));
    }
    for (id, name, args) in &turn.calls {
        let input: Value = serde_json::from_str(args).unwrap_or(json!({}));
        content.push(json!({ "type": "tool_use", "id": id, "name": name, "input": input }));
    }
    let (input, output) = turn.usage.unwrap_or((0, 0));
    json!({ "id": "msg_01XFDUDYJgAACzvnptvVoYEL", "type": "message", "role": "assistant",
            "model": MODEL_ANTHROPIC, "content": content, "stop_reason": anthropic_stop(turn),
            "stop_sequence": null,
            "usage": { "input_tokens": input, "output_tokens": output,
                       "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0 } })
}

/// The `output` items of `turn` in the Responses API: a message with one `output_text` part,
/// then one `function_call` item per call.
fn responses_output(turn: &Turn) -> Vec<Value> {
    let mut output = Vec::new();
    if !turn.text.is_empty() {
        output.push(
            json!({ "id": "msg_67ccd3acc8d48190a77525dc6de64b4104becb25c9dc6ea4",
            "type": "message", "status": "completed", "role": "assistant",
            "content": [{ "type": "output_text", "text": turn.text, "annotations": [] }] }),
        );
    }
    for (i, (id, name, args)) in turn.calls.iter().enumerate() {
        output.push(
            json!({ "id": format!("fc_67ccd3a9da748190baa7f1570fe91ac6{i}"),
            "type": "function_call", "status": "completed", "call_id": id, "name": name,
            "arguments": args }),
        );
    }
    output
}

/// The `response` object of `turn` (`status` `incomplete` when `turn.finish` names a reason).
fn responses_response(turn: &Turn, output: Vec<Value>) -> Value {
    let (status, details) = match &turn.finish {
        Some(reason) => ("incomplete", json!({ "reason": reason })),
        None => ("completed", Value::Null),
    };
    let mut out = json!({
        "id": "resp_67ccd3a9da748190baa7f1570fe91ac604becb25c9dc6ea4", "object": "response",
        "created_at": 1741476777, "status": status, "error": null,
        "incomplete_details": details, "instructions": null, "max_output_tokens": 4096,
        "model": "gpt-4.1-mini-2025-04-14", "output": output, "parallel_tool_calls": true,
        "store": false, "temperature": 1.0, "tool_choice": "auto", "tools": [], "top_p": 1.0,
        "truncation": "disabled", "usage": null
    });
    if let Some((input, output)) = turn.usage {
        out["usage"] = json!({ "input_tokens": input,
            "input_tokens_details": { "cached_tokens": 0 }, "output_tokens": output,
            "output_tokens_details": { "reasoning_tokens": 0 },
            "total_tokens": input + output });
    }
    out
}

/// The object the Responses API returns for `turn` without streaming.
pub fn responses_object(turn: &Turn) -> Value {
    responses_response(turn, responses_output(turn))
}

/// The events the Responses API streams for `turn`: `response.created`, each item added, its
/// text or arguments in deltas, its `done` events, then `response.completed` (or
/// `response.incomplete`) with the whole response.
pub fn responses_events(turn: &Turn) -> Vec<String> {
    let mut seq = 0;
    let mut ev = |data: Value| {
        let mut data = data;
        data["sequence_number"] = json!(seq);
        seq += 1;
        let name = data["type"].as_str().unwrap_or_default().to_owned();
        event(&name, data)
    };
    let mut start = responses_response(turn, Vec::new());
    start["status"] = json!("in_progress");
    start["usage"] = Value::Null;
    start["incomplete_details"] = Value::Null;
    let mut out = vec![
        ev(json!({ "type": "response.created", "response": start })),
        ev(json!({ "type": "response.in_progress", "response": start })),
    ];
    let items = responses_output(turn);
    for (index, item) in items.iter().enumerate() {
        let id = item["id"].clone();
        let mut added = item.clone();
        added["status"] = json!("in_progress");
        if item["type"] == "message" {
            added["content"] = json!([]);
            out.push(ev(
                json!({ "type": "response.output_item.added", "output_index": index,
                                "item": added }),
            ));
            out.push(ev(
                json!({ "type": "response.content_part.added", "item_id": id,
                "output_index": index, "content_index": 0,
                "part": { "type": "output_text", "text": "", "annotations": [] } }),
            ));
            for piece in pieces(&turn.text, 7) {
                out.push(ev(
                    json!({ "type": "response.output_text.delta", "item_id": id,
                    "output_index": index, "content_index": 0, "delta": piece }),
                ));
            }
            out.push(ev(
                json!({ "type": "response.output_text.done", "item_id": id,
                "output_index": index, "content_index": 0, "text": turn.text }),
            ));
        } else {
            let args = item["arguments"].as_str().unwrap_or_default().to_owned();
            added["arguments"] = json!("");
            out.push(ev(
                json!({ "type": "response.output_item.added", "output_index": index,
                                "item": added }),
            ));
            for piece in pieces(&args, 5) {
                out.push(ev(
                    json!({ "type": "response.function_call_arguments.delta",
                    "item_id": id, "output_index": index, "delta": piece }),
                ));
            }
            out.push(ev(json!({ "type": "response.function_call_arguments.done",
                "item_id": id, "output_index": index, "arguments": args })));
        }
        out.push(ev(
            json!({ "type": "response.output_item.done", "output_index": index,
                            "item": item }),
        ));
    }
    let end = if turn.finish.is_some() {
        "response.incomplete"
    } else {
        "response.completed"
    };
    out.push(ev(
        json!({ "type": end, "response": responses_object(turn) }),
    ));
    out
}

/// `text` in pieces of `n` characters (at least one piece when empty: none).
fn pieces(text: &str, n: usize) -> Vec<String> {
    let chars: Vec<char> = text.chars().collect();
    chars.chunks(n).map(|c| c.iter().collect()).collect()
}
