//! One wire behaviour per test, against the fixture server speaking each provider's documented
//! shapes: what the adapter sends, and what each kind of reply or failure becomes.

mod common;

use common::{Turn, call, model, model_with, raw_call, say};
use serde_json::json;
use std::time::Duration;
use terminus_fixture::{Fixture, Response};
use terminus_kernel::{Finish, ModelErrorKind, ToolCall, Usage};
use terminus_llm::{Provider, Reply};
use terminus_runtime::{
    Message, ModelFailure, ModelRequest, Purpose, ToolSpec, Transcript, WriteTodos,
};

const ALL: [Provider; 3] = Provider::ALL;

fn tools() -> Vec<ToolSpec> {
    vec![ToolSpec {
        name: "read_file".into(),
        description: "Read a file.".into(),
        parameters: json!({ "type": "object", "properties": { "path": { "type": "string" } } }),
    }]
}

async fn ask(fixture: &Fixture, provider: Provider, stream: bool) -> Result<Reply, ModelFailure> {
    let messages = [Message::user("Read src/lib.rs")];
    let tools = tools();
    model(fixture, provider, stream)
        .reply(ModelRequest {
            messages: &messages,
            tools: &tools,
            tools_enabled: true,
            purpose: Purpose::Verify,
        })
        .await
}

async fn serve(responses: Vec<Response>) -> Fixture {
    Fixture::start(responses).await.expect("a loopback port")
}

async fn fixture_file(name: &str, split: usize) -> Fixture {
    let body = std::fs::read(format!(
        "{}/tests/fixtures/{name}",
        env!("CARGO_MANIFEST_DIR")
    ))
    .expect("the fixture file");
    serve(vec![Response::sse(body.chunks(split).map(<[u8]>::to_vec))]).await
}

#[tokio::test]
async fn a_streamed_text_reply_with_usage_in_its_final_chunk() {
    for provider in ALL {
        let fixture = serve(vec![say("Hello — there.").response(provider, true)]).await;
        let reply = ask(&fixture, provider, true).await.expect("a reply");
        assert_eq!(reply.turn.text, "Hello — there.");
        assert_eq!(
            reply.turn.usage,
            Some(Usage {
                input_tokens: 100,
                output_tokens: 10
            })
        );
        assert_eq!(reply.turn.finish, Finish::Stop);
        let expected = match provider {
            Provider::OpenAi => "stop",
            Provider::Anthropic => "end_turn",
            Provider::OpenAiResponses => "completed",
        };
        assert_eq!(reply.finish_reason.as_deref(), Some(expected));
        assert!(reply.turn.tool_calls.is_empty());
    }
}

#[tokio::test]
async fn streamed_and_not_streamed_give_the_same_turn() {
    let turns = [
        say("Plan written."),
        call(&[
            ("call_a", "read_file", json!({ "path": "a.rs" })),
            ("call_b", "read_file", json!({ "path": "b \"quoted\".rs" })),
        ]),
    ];
    for provider in ALL {
        for turn in &turns {
            let streamed = serve(vec![turn.response(provider, true)]).await;
            let whole = serve(vec![turn.response(provider, false)]).await;
            let a = ask(&streamed, provider, true).await.expect("a reply");
            let b = ask(&whole, provider, false).await.expect("a reply");
            assert_eq!(a.turn, b.turn, "{provider:?}");
            assert_eq!(a.finish_reason, b.finish_reason);
        }
    }
}

#[tokio::test]
async fn parallel_tool_calls_are_assembled_by_index() {
    let fixture = fixture_file("openai-parallel-tools.sse", 37).await;
    let reply = ask(&fixture, Provider::OpenAi, true)
        .await
        .expect("a reply");
    assert_eq!(
        reply.turn.tool_calls,
        [
            ToolCall {
                id: "call_sdg0h3k2aVcl9WYp4k6gUeqW".into(),
                name: "read_file".into(),
                arguments: json!({ "path": "src/lib.rs" }).into(),
            },
            ToolCall {
                id: "call_Xk2pQ8rT4mNb7vLz1cYwHe3a".into(),
                name: "write_todos".into(),
                arguments: json!({ "todos": [{ "content": "write plan — ünïcode",
                                              "status": "in_progress" }] })
                .into(),
            },
        ]
    );
    assert_eq!(reply.turn.finish, Finish::ToolCalls);
    assert_eq!(
        reply.turn.usage,
        Some(Usage {
            input_tokens: 412,
            output_tokens: 58
        })
    );
    assert_eq!(reply.id.as_deref(), Some("chatcmpl-AbC1"));
}

#[tokio::test]
async fn anthropic_thinking_text_and_tool_use_blocks() {
    let fixture = fixture_file("anthropic-tool-use.sse", 53).await;
    let reply = ask(&fixture, Provider::Anthropic, true)
        .await
        .expect("a reply");
    assert!(reply.turn.reasoning);
    assert_eq!(reply.turn.text, "Okay, let's read it — \"lib.rs\".");
    assert_eq!(
        reply.turn.tool_calls,
        [
            ToolCall {
                id: "toolu_01T1x1fJ34qAmk2tNTrN7Up6".into(),
                name: "read_file".into(),
                arguments: json!({ "path": "src/lib.rs" }).into(),
            },
            ToolCall {
                id: "toolu_01AbCdEfGhIjKlMnOpQrStUv".into(),
                name: "list_directory".into(),
                arguments: json!({}).into(),
            },
        ]
    );
    // Cached prompt tokens are prompt tokens: 472 + 100 + 50.
    assert_eq!(
        reply.turn.usage,
        Some(Usage {
            input_tokens: 622,
            output_tokens: 89
        })
    );
    assert_eq!(reply.finish_reason.as_deref(), Some("tool_use"));
}

#[tokio::test]
async fn openrouter_comment_lines_and_reasoning_deltas() {
    let fixture = fixture_file("openrouter-reasoning.sse", 11).await;
    let reply = ask(&fixture, Provider::OpenAi, true)
        .await
        .expect("a reply");
    assert_eq!(reply.turn.text, "Old pond —\nfrog jumps in,\n\"splash\" 🐸");
    assert!(reply.turn.reasoning);
    assert_eq!(reply.turn.finish, Finish::Stop);
}

#[tokio::test]
async fn a_reasoning_only_reply_is_reasoning_only() {
    let body = json!({ "id": "x", "object": "chat.completion", "choices": [{ "index": 0,
        "message": { "role": "assistant", "content": "", "reasoning_content": "Let me think..." },
        "finish_reason": "stop" }], "usage": { "prompt_tokens": 10, "completion_tokens": 30 } });
    let fixture = serve(vec![Response::json(200, body.to_string())]).await;
    let reply = ask(&fixture, Provider::OpenAi, false)
        .await
        .expect("a reply");
    assert!(reply.turn.reasoning);
    assert!(reply.turn.text.is_empty());
}

#[tokio::test]
async fn empty_content_with_zero_usage_in_every_shape() {
    let zero = json!({ "prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0 });
    // OpenRouter's `content: []`, DeepSeek's `content: ""`, a `null` content, `choices: null`.
    let bodies = [
        json!({ "id": "gen-1", "choices": [{ "index": 0, "message": { "role": "assistant",
                "content": [] }, "finish_reason": "stop" }], "usage": zero }),
        json!({ "id": "x", "choices": [{ "index": 0, "message": { "role": "assistant",
                "content": "" }, "finish_reason": "stop" }], "usage": zero }),
        json!({ "id": "x", "choices": [{ "index": 0, "message": { "role": "assistant",
                "content": null }, "finish_reason": null }], "usage": zero }),
        json!({ "id": "x", "choices": null, "usage": zero }),
    ];
    for body in bodies {
        let fixture = serve(vec![Response::json(200, body.to_string())]).await;
        let reply = ask(&fixture, Provider::OpenAi, false)
            .await
            .expect("a reply");
        assert_eq!(reply.turn.text, "", "{body}");
        assert!(reply.turn.tool_calls.is_empty());
        assert_eq!(reply.turn.usage, Some(Usage::default()), "{body}");
    }
    let streamed = Response::sse([
        "data: {\"id\":\"gen-2\",\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":[]},\"finish_reason\":null}]}\n\n",
        "data: {\"id\":\"gen-2\",\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}],\"usage\":{\"prompt_tokens\":0,\"completion_tokens\":0}}\n\n",
        "data: [DONE]\n\n",
    ]);
    let fixture = serve(vec![streamed]).await;
    let reply = ask(&fixture, Provider::OpenAi, true)
        .await
        .expect("a reply");
    assert_eq!(
        (reply.turn.text.as_str(), reply.turn.usage),
        ("", Some(Usage::default()))
    );
}

#[tokio::test]
async fn finish_reasons_map_onto_the_kernel_classes_and_are_kept() {
    let cases = [
        (Provider::OpenAi, "length", Finish::Length),
        (Provider::OpenAi, "content_filter", Finish::ContentFilter),
        (Provider::OpenAi, "eos_token_from_some_server", Finish::Stop),
        (Provider::Anthropic, "max_tokens", Finish::Length),
        (Provider::Anthropic, "pause_turn", Finish::Length),
        (Provider::Anthropic, "refusal", Finish::ContentFilter),
        (Provider::Anthropic, "stop_sequence", Finish::Stop),
        (
            Provider::OpenAiResponses,
            "max_output_tokens",
            Finish::Length,
        ),
        (
            Provider::OpenAiResponses,
            "content_filter",
            Finish::ContentFilter,
        ),
        (
            Provider::OpenAiResponses,
            "a_reason_of_some_server",
            Finish::Length,
        ),
    ];
    for (provider, reason, class) in cases {
        for stream in [true, false] {
            let turn = Turn {
                finish: Some(reason.into()),
                ..say("Partial answer")
            };
            let fixture = serve(vec![turn.response(provider, stream)]).await;
            let reply = ask(&fixture, provider, stream).await.expect("a reply");
            assert_eq!(reply.turn.finish, class, "{reason}");
            assert_eq!(reply.finish_reason.as_deref(), Some(reason));
        }
    }
}

#[tokio::test]
async fn model_context_window_exceeded_is_context_overflow() {
    for stream in [true, false] {
        let turn = Turn {
            finish: Some("model_context_window_exceeded".into()),
            ..say("cut")
        };
        let fixture = serve(vec![turn.response(Provider::Anthropic, stream)]).await;
        let failure = ask(&fixture, Provider::Anthropic, stream)
            .await
            .expect_err("a failure");
        assert_eq!(failure.kind, ModelErrorKind::ContextOverflow);
    }
}

#[tokio::test]
async fn an_openai_refusal_is_filtered_never_an_answer() {
    let body = json!({ "id": "x", "choices": [{ "index": 0, "message": { "role": "assistant",
        "content": null, "refusal": "I can't help with that." }, "finish_reason": "stop" }] });
    let fixture = serve(vec![Response::json(200, body.to_string())]).await;
    let reply = ask(&fixture, Provider::OpenAi, false)
        .await
        .expect("a reply");
    assert_eq!(reply.turn.finish, Finish::ContentFilter);
    assert_eq!(reply.turn.text, "I can't help with that.");
}

#[tokio::test]
async fn a_stream_cut_mid_way_is_a_server_failure_not_a_short_answer() {
    for provider in ALL {
        let whole = say("A long answer that will be cut off.").response(provider, true);
        let cut = whole.clone().cut_after(3);
        let fixture = serve(vec![cut]).await;
        let failure = ask(&fixture, provider, true).await.expect_err("cut");
        assert_eq!(failure.kind, ModelErrorKind::Server, "{failure}");
        // A body that ends cleanly but without its terminator is cut too.
        let mut clean = whole;
        clean.body.truncate(3);
        let fixture = serve(vec![clean]).await;
        let failure = ask(&fixture, provider, true).await.expect_err("no end");
        assert_eq!(failure.kind, ModelErrorKind::Server, "{failure}");
        assert!(
            failure.message.contains("ended before its end"),
            "{failure}"
        );
    }
}

#[tokio::test]
async fn a_slow_reply_past_timeout_ms_is_a_timeout() {
    for provider in ALL {
        // Slow to start, and slow in the middle of the body.
        let late = say("late")
            .response(provider, true)
            .wait(Duration::from_millis(800));
        let stalled = say("stalled")
            .response(provider, true)
            .pause_before(2, Duration::from_millis(800));
        for response in [late, stalled] {
            let fixture = serve(vec![response]).await;
            let messages = [Message::user("hi")];
            let failure = model_with(&fixture, provider, true, |c| {
                c.timeout = Duration::from_millis(200);
            })
            .reply(ModelRequest {
                messages: &messages,
                tools: &[],
                tools_enabled: true,
                purpose: Purpose::Verify,
            })
            .await
            .expect_err("too slow");
            assert_eq!(failure.kind, ModelErrorKind::Timeout, "{failure}");
            assert!(failure.message.contains("200 ms"), "{failure}");
        }
    }
}

/// `idle_timeout`: a stream that stalls between two chunks is given up when the idle time
/// passes, long before the whole-answer timeout; a stream whose pauses stay under it completes.
#[tokio::test]
async fn a_stream_that_stalls_past_idle_timeout_is_a_timeout_at_once() {
    for provider in ALL {
        let stalled = say("stalled")
            .response(provider, true)
            .pause_before(2, Duration::from_millis(1500));
        let fixture = serve(vec![stalled.clone(), stalled]).await;
        let messages = [Message::user("hi")];
        let request = || ModelRequest {
            messages: &messages,
            tools: &[],
            tools_enabled: true,
            purpose: Purpose::Verify,
        };
        let started = std::time::Instant::now();
        let failure = model_with(&fixture, provider, true, |c| {
            c.timeout = Duration::from_secs(30);
            c.idle_timeout = Some(Duration::from_millis(200));
        })
        .reply(request())
        .await
        .expect_err("stalled");
        assert_eq!(failure.kind, ModelErrorKind::Timeout, "{failure}");
        assert!(failure.message.contains("200 ms"), "{failure}");
        assert!(
            started.elapsed() < Duration::from_millis(1400),
            "given up only after {:?}",
            started.elapsed()
        );
        // The same pause under a longer idle time: the reply completes.
        let reply = model_with(&fixture, provider, true, |c| {
            c.idle_timeout = Some(Duration::from_secs(5));
        })
        .reply(request())
        .await
        .expect("a pause under the idle time");
        assert_eq!(reply.turn.text, "stalled");
    }
}

#[tokio::test]
async fn an_error_event_mid_stream_is_mapped() {
    let anthropic = Response::sse([
        "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"msg_1\",\"type\":\"message\",\"role\":\"assistant\",\"content\":[],\"model\":\"claude-sonnet-4-5\",\"usage\":{\"input_tokens\":10,\"output_tokens\":1}}}\n\n",
        "event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\n",
        "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"Half\"}}\n\n",
        "event: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"overloaded_error\",\"message\":\"Overloaded\"}}\n\n",
    ]);
    let fixture = serve(vec![anthropic]).await;
    let failure = ask(&fixture, Provider::Anthropic, true)
        .await
        .expect_err("error event");
    assert_eq!(failure.kind, ModelErrorKind::Server);
    assert!(failure.message.contains("overloaded_error"), "{failure}");

    let openai = Response::sse([
        "data: {\"id\":\"c\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Half\"},\"finish_reason\":null}]}\n\n",
        "data: {\"error\":{\"message\":\"Rate limit reached\",\"type\":\"rate_limit_error\",\"code\":\"rate_limit_exceeded\"}}\n\n",
    ]);
    let fixture = serve(vec![openai]).await;
    let failure = ask(&fixture, Provider::OpenAi, true)
        .await
        .expect_err("error chunk");
    assert_eq!(failure.kind, ModelErrorKind::RateLimited);
}

#[tokio::test]
async fn http_errors_map_through_the_table_with_retry_after() {
    let rate = r#"{"error":{"message":"Rate limit reached","type":"requests","param":null,"code":"rate_limit_exceeded"}}"#;
    let cases = [
        (
            Response::json(
                401,
                r#"{"type":"error","error":{"type":"authentication_error","message":"invalid x-api-key"}}"#,
            ),
            ModelErrorKind::Auth,
            None,
        ),
        (
            Response::json(429, rate).header("retry-after-ms", "1234"),
            ModelErrorKind::RateLimited,
            Some(1234),
        ),
        (
            Response::json(429, rate).header("retry-after", "2"),
            ModelErrorKind::RateLimited,
            Some(2000),
        ),
        (
            Response::json(
                529,
                r#"{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}"#,
            ),
            ModelErrorKind::Server,
            None,
        ),
        (
            Response::json(
                400,
                r#"{"type":"error","error":{"type":"invalid_request_error","message":"prompt is too long: 208310 tokens > 200000 maximum"}}"#,
            ),
            ModelErrorKind::ContextOverflow,
            None,
        ),
        (
            Response::json(
                400,
                r#"{"error":{"message":"bad","type":"invalid_request_error","code":null}}"#,
            ),
            ModelErrorKind::BadRequest,
            None,
        ),
    ];
    for (response, kind, retry_after) in cases {
        let fixture = serve(vec![response]).await;
        let failure = ask(&fixture, Provider::OpenAi, true)
            .await
            .expect_err("an error");
        assert_eq!(
            (failure.kind, failure.retry_after_ms),
            (kind, retry_after),
            "{failure}"
        );
    }
}

#[tokio::test]
async fn an_unreachable_server_is_a_server_failure() {
    let fixture = serve(vec![]).await;
    let url = fixture.url();
    drop(fixture);
    tokio::time::sleep(Duration::from_millis(50)).await;
    let config = terminus_llm::LlmConfig::new(Provider::OpenAi, format!("{url}/v1"), "m");
    let model = terminus_llm::LlmModel::new(config).expect("config");
    let messages = [Message::user("hi")];
    let failure = model
        .reply(ModelRequest {
            messages: &messages,
            tools: &[],
            tools_enabled: true,
            purpose: Purpose::Verify,
        })
        .await
        .expect_err("nobody listens");
    assert_eq!(failure.kind, ModelErrorKind::Server);
    assert!(failure.message.contains("cannot connect"), "{failure}");
}

#[tokio::test]
async fn malformed_tool_call_json_is_kept_as_its_text() {
    for provider in ALL {
        let fixture = serve(vec![
            raw_call("call_1", "read_file", r#"{"path": "a.rs"#).response(provider, true),
        ])
        .await;
        let reply = ask(&fixture, provider, true).await.expect("a reply");
        assert_eq!(
            reply.turn.tool_calls[0].arguments,
            json!(r#"{"path": "a.rs"#)
        );
    }
}

#[tokio::test]
async fn the_key_goes_in_each_providers_header() {
    for provider in ALL {
        let fixture = serve(vec![say("ok").response(provider, true)]).await;
        ask(&fixture, provider, true).await.expect("a reply");
        let request = &fixture.requests()[0];
        assert_eq!(request.method, "POST");
        match provider {
            Provider::OpenAi => {
                assert_eq!(request.path, "/v1/chat/completions");
                assert_eq!(request.header("authorization"), Some("Bearer test-key"));
            }
            Provider::Anthropic => {
                assert_eq!(request.path, "/v1/messages");
                assert_eq!(request.header("x-api-key"), Some("test-key"));
                assert_eq!(request.header("anthropic-version"), Some("2023-06-01"));
                assert_eq!(request.header("authorization"), None);
            }
            Provider::OpenAiResponses => {
                assert_eq!(request.path, "/v1/responses");
                assert_eq!(request.header("authorization"), Some("Bearer test-key"));
            }
        }
    }
}

/// A conversation with every kind of message: system prompt, task, a turn with two calls, their
/// results, a kernel nudge, and a final-answer call (tools off).
fn conversation() -> Vec<Message> {
    let calls = vec![
        ToolCall {
            id: "call_1".into(),
            name: "read_file".into(),
            arguments: json!({ "path": "a" }).into(),
        },
        ToolCall {
            id: "call_2".into(),
            name: "write_todos".into(),
            arguments: json!({ "todos": [] }).into(),
        },
    ];
    vec![
        Message::system("You are careful."),
        Message::user("Write the plan."),
        Message::assistant("", calls),
        Message::tool_result("call_1", "read_file", "fn main() {}".into(), None),
        Message::tool_result(
            "call_2",
            "write_todos",
            "Todo list updated".into(),
            Some("[budget] 1 of 2"),
        ),
        Message::kernel("You tried to finish, but the task is not done yet."),
    ]
}

#[tokio::test]
async fn requests_carry_the_conversation_in_each_format() {
    let messages = conversation();
    let mut specs = tools();
    specs.push(ToolSpec {
        name: "write_todos".into(),
        description: "todos".into(),
        parameters: terminus_runtime::Tool::parameters(&WriteTodos),
    });
    for provider in ALL {
        let fixture = serve(vec![
            say("a").response(provider, true),
            say("b").response(provider, false),
        ])
        .await;
        let streaming = model(&fixture, provider, true);
        for tools_enabled in [true, false] {
            streaming
                .reply(ModelRequest {
                    messages: &messages,
                    tools: &specs,
                    tools_enabled,
                    purpose: Purpose::Verify,
                })
                .await
                .expect("a reply");
        }
        let sent: Vec<_> = fixture.requests().iter().map(|r| r.json()).collect();
        match provider {
            Provider::OpenAi => {
                let m = &sent[0]["messages"];
                assert_eq!(
                    m[0],
                    json!({ "role": "system", "content": "You are careful." })
                );
                assert_eq!(m[2]["content"], json!(null));
                assert_eq!(
                    m[2]["tool_calls"][1]["function"]["arguments"],
                    json!(r#"{"todos":[]}"#)
                );
                assert_eq!(
                    m[3],
                    json!({ "role": "tool", "tool_call_id": "call_1", "content": "fn main() {}" })
                );
                assert_eq!(m[4]["tool_call_id"], "call_2");
                assert_eq!(
                    m[5],
                    json!({ "role": "user", "content": "You tried to finish, but the task is not done yet." })
                );
                assert_eq!(sent[0]["tools"][0]["function"]["name"], "read_file");
                assert_eq!(sent[0]["stream_options"], json!({ "include_usage": true }));
                assert_eq!(sent[0]["model"], common::MODEL_OPENAI);
                // No cap in the config: the default one, on every request.
                assert!(sent.iter().all(|s| s["max_completion_tokens"] == 4096));
                assert!(sent[0].get("max_tokens").is_none());
                assert!(sent[0].get("tool_choice").is_none());
                assert_eq!(sent[1]["tool_choice"], "none", "the final-answer call");
                assert_eq!(sent[1]["tools"].as_array().map(Vec::len), Some(2));
            }
            Provider::Anthropic => {
                assert_eq!(sent[0]["system"], "You are careful.");
                assert_eq!(sent[0]["max_tokens"], 4096);
                let m = &sent[0]["messages"];
                assert_eq!(m.as_array().map(Vec::len), Some(3), "{m}");
                assert_eq!(
                    m[0],
                    json!({ "role": "user", "content": [{ "type": "text", "text": "Write the plan." }] })
                );
                assert_eq!(
                    m[1]["content"][0],
                    json!({ "type": "tool_use", "id": "call_1", "name": "read_file", "input": { "path": "a" } })
                );
                let user = &m[2]["content"];
                assert_eq!(
                    user[0],
                    json!({ "type": "tool_result", "tool_use_id": "call_1", "content": "fn main() {}" })
                );
                assert_eq!(user[1]["tool_use_id"], "call_2");
                assert_eq!(
                    user[2],
                    json!({ "type": "text", "text": "You tried to finish, but the task is not done yet." })
                );
                assert_eq!(sent[0]["tools"][0]["input_schema"]["type"], "object");
                assert_eq!(sent[1]["tool_choice"], json!({ "type": "none" }));
            }
            Provider::OpenAiResponses => {
                let m = &sent[0]["input"];
                assert_eq!(m.as_array().map(Vec::len), Some(7), "{m}");
                assert_eq!(
                    m[0],
                    json!({ "type": "message", "role": "system", "content": "You are careful." })
                );
                assert_eq!(
                    m[1],
                    json!({ "type": "message", "role": "user", "content": "Write the plan." })
                );
                // The turn with no text: only its calls, one item each, paired by call_id.
                assert_eq!(
                    m[2],
                    json!({ "type": "function_call", "call_id": "call_1", "name": "read_file",
                            "arguments": r#"{"path":"a"}"# })
                );
                assert_eq!(m[3]["arguments"], json!(r#"{"todos":[]}"#));
                assert_eq!(
                    m[4],
                    json!({ "type": "function_call_output", "call_id": "call_1",
                            "output": "fn main() {}" })
                );
                assert_eq!(m[5]["call_id"], "call_2");
                assert_eq!(
                    m[6],
                    json!({ "type": "message", "role": "user",
                            "content": "You tried to finish, but the task is not done yet." })
                );
                assert_eq!(
                    sent[0]["tools"][0],
                    json!({ "type": "function", "name": "read_file", "description": "Read a file.",
                            "parameters": specs[0].parameters, "strict": false })
                );
                assert_eq!(sent[0]["model"], common::MODEL_RESPONSES);
                assert_eq!(sent[0]["stream"], true);
                assert_eq!(sent[0]["store"], false);
                // No cap in the config: the default one, on every request.
                assert!(sent.iter().all(|s| s["max_output_tokens"] == 4096));
                assert!(sent[0].get("tool_choice").is_none());
                assert_eq!(sent[1]["tool_choice"], "none", "the final-answer call");
                assert_eq!(sent[1]["tools"].as_array().map(Vec::len), Some(2));
            }
        }
        // The verifier's transcript never holds the nudge the model was sent.
        assert!(!Transcript::new(&messages).render().contains("not done yet"));
    }
}

/// A streamed reply is alive while bytes arrive: a stream longer than `timeout_ms` whose every
/// pause is shorter completes (on a CPU server a long reply streams for minutes, and cutting it
/// would only have it generated again); each gap is bounded by `timeout_ms` when no idle
/// timeout is set.
#[tokio::test]
async fn a_stream_longer_than_timeout_ms_completes_while_bytes_arrive() {
    for provider in ALL {
        let mut slow = say("slow but steady").response(provider, true);
        for part in [4, 3, 2, 1] {
            slow = slow.pause_before(part, Duration::from_millis(150));
        }
        let fixture = serve(vec![slow]).await;
        let messages = [Message::user("hi")];
        let started = std::time::Instant::now();
        let reply = model_with(&fixture, provider, true, |c| {
            c.timeout = Duration::from_millis(300);
        })
        .reply(ModelRequest {
            messages: &messages,
            tools: &[],
            tools_enabled: true,
            purpose: Purpose::Verify,
        })
        .await
        .unwrap_or_else(|f| panic!("{provider:?}: {f}"));
        assert_eq!(reply.turn.text, "slow but steady");
        assert!(
            started.elapsed() > Duration::from_millis(550),
            "{provider:?}: the stream took {:?}, longer than timeout_ms",
            started.elapsed()
        );
    }
}

/// A sink given with `with_text` gets a streamed turn's text piece by piece as it arrives (one
/// piece per chunk here), and the turn is the same as the one streamed without a sink: its text,
/// its calls assembled from their deltas, its usage from the last chunk. A verifier's call gives
/// the sink nothing.
#[tokio::test]
async fn a_streamed_turns_text_goes_to_the_sink_piece_by_piece() {
    let mut turn = call(&[("call_1", "read_file", json!({ "path": "src/lib.rs" }))]);
    turn.text = "Reading the file first, then the plan.".into();
    for provider in ALL {
        let fixture = serve(vec![
            turn.response(provider, true),
            turn.response(provider, true),
            turn.response(provider, true),
        ])
        .await;
        let pieces = std::sync::Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
        let seen = std::sync::Arc::clone(&pieces);
        let streaming =
            model(&fixture, provider, true).with_text(std::sync::Arc::new(move |piece: &str| {
                seen.lock().expect("not poisoned").push(piece.to_owned())
            }));
        let messages = [Message::user("Read src/lib.rs")];
        let tools = tools();
        let request = |purpose| ModelRequest {
            messages: &messages,
            tools: &tools,
            tools_enabled: true,
            purpose,
        };
        let turn_purpose = Purpose::Turn {
            reason: terminus_kernel::CallReason::Start,
            call: 1,
        };
        let streamed = streaming
            .reply(request(turn_purpose))
            .await
            .expect("a reply");
        let got = pieces.lock().expect("not poisoned").clone();
        assert!(got.len() > 1, "{provider:?}: {got:?}");
        assert!(got.iter().all(|p| !p.is_empty()), "{got:?}");
        assert_eq!(got.concat(), turn.text, "{provider:?}");
        let plain = model(&fixture, provider, true)
            .reply(request(turn_purpose))
            .await
            .expect("a reply");
        assert_eq!(streamed.turn, plain.turn, "{provider:?}");
        assert_eq!(streamed.turn.usage.map(|u| u.input_tokens), Some(100));
        assert_eq!(streamed.turn.tool_calls[0].name.as_str(), "read_file");
        streaming
            .reply(request(Purpose::Verify))
            .await
            .expect("a reply");
        assert_eq!(pieces.lock().expect("not poisoned").len(), got.len());
    }
}
