//! Recorded-shape streams of 1,000 SSE chunks for each provider, shared by the parse bench and
//! the allocation test.

#![allow(dead_code, unreachable_pub)]

pub const CHUNKS: usize = 1_000;

/// An OpenAI stream of `CHUNKS` events: role, 400 text deltas, two tool calls whose arguments
/// come in 298 deltas each, the finish chunk, the usage chunk and `[DONE]`.
pub fn openai_stream() -> Vec<Vec<u8>> {
    let head = r#"{"id":"chatcmpl-B9MHDbslfkBeAs8l4bebGdFOJ6PeG","object":"chat.completion.chunk","created":1741570283,"model":"gpt-4o-2024-08-06","system_fingerprint":"fp_eb9dce56a8","choices":[{"index":0,"delta":"#;
    let mut out = Vec::with_capacity(CHUNKS);
    let mut push = |delta: String, finish: &str| {
        out.push(
            format!("data: {head}{delta},\"logprobs\":null,\"finish_reason\":{finish}}}]}}\n\n")
                .into_bytes(),
        );
    };
    push(
        r#"{"role":"assistant","content":"","refusal":null}"#.into(),
        "null",
    );
    for i in 0..400 {
        push(
            format!(r#"{{"content":"word{i} and \"quoted\"\n"}}"#),
            "null",
        );
    }
    for call in 0..2 {
        push(
            format!(
                r#"{{"tool_calls":[{{"index":{call},"id":"call_{call}abcdefghijklmnop","type":"function","function":{{"name":"write_file","arguments":""}}}}]}}"#
            ),
            "null",
        );
        for i in 0..297 {
            push(
                format!(
                    r#"{{"tool_calls":[{{"index":{call},"function":{{"arguments":"{{\"k{i}\": \"v\\n\"}}"}}}}]}}"#
                ),
                "null",
            );
        }
    }
    push("{}".into(), "\"tool_calls\"");
    out.push(b"data: {\"id\":\"chatcmpl-B9MHDbslfkBeAs8l4bebGdFOJ6PeG\",\"object\":\"chat.completion.chunk\",\"created\":1741570283,\"model\":\"gpt-4o-2024-08-06\",\"choices\":[],\"usage\":{\"prompt_tokens\":812,\"completion_tokens\":1200,\"total_tokens\":2012}}\n\n".to_vec());
    out.push(b"data: [DONE]\n\n".to_vec());
    assert_eq!(out.len(), CHUNKS);
    out
}

/// An Anthropic stream of `CHUNKS` events of the same shape.
pub fn anthropic_stream() -> Vec<Vec<u8>> {
    let mut out = Vec::with_capacity(CHUNKS);
    let mut event = |name: &str, data: String| {
        out.push(format!("event: {name}\ndata: {data}\n\n").into_bytes());
    };
    event("message_start", r#"{"type":"message_start","message":{"id":"msg_01XFDUDYJgAACzvnptvVoYEL","type":"message","role":"assistant","content":[],"model":"claude-sonnet-4-5","stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":812,"output_tokens":1}}}"#.into());
    event(
        "content_block_start",
        r#"{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}"#
            .into(),
    );
    for i in 0..397 {
        event(
            "content_block_delta",
            format!(
                r#"{{"type":"content_block_delta","index":0,"delta":{{"type":"text_delta","text":"word{i} and \"quoted\"\n"}}}}"#
            ),
        );
    }
    event(
        "content_block_stop",
        r#"{"type":"content_block_stop","index":0}"#.into(),
    );
    for block in 1..=2 {
        event(
            "content_block_start",
            format!(
                r#"{{"type":"content_block_start","index":{block},"content_block":{{"type":"tool_use","id":"toolu_0{block}T1x1fJ34qAmk2tNTrN7Up6","name":"write_file","input":{{}}}}}}"#
            ),
        );
        for i in 0..297 {
            event(
                "content_block_delta",
                format!(
                    r#"{{"type":"content_block_delta","index":{block},"delta":{{"type":"input_json_delta","partial_json":"{{\"k{i}\": \"v\\n\"}}"}}}}"#
                ),
            );
        }
        event(
            "content_block_stop",
            format!(r#"{{"type":"content_block_stop","index":{block}}}"#),
        );
    }
    event("message_delta", r#"{"type":"message_delta","delta":{"stop_reason":"tool_use","stop_sequence":null},"usage":{"output_tokens":1200}}"#.into());
    event("message_stop", r#"{"type":"message_stop"}"#.into());
    assert_eq!(out.len(), CHUNKS);
    out
}
