//! Request bodies written from each message's encoded bytes, kept between calls.
//!
//! A conversation grows by a few messages a turn and is sent whole every turn. Encoding it whole
//! each time made the adapter's cost per step grow with the conversation; instead a [`Bodies`]
//! keeps, for each of the last few conversations it encoded, their messages' stamps
//! ([`Message::stamp`]) and their encoded bytes. A request whose messages start with a kept
//! conversation's messages (the same stamps, so a pruned or cut message, a new one, is encoded
//! again) reuses their bytes and encodes only the new ones; the body is then the head, the kept
//! bytes and the tail, copied once. Comparing stamps, not messages, keeps the cost of a step
//! from growing with the conversation (a few nanoseconds a message).
//!
//! Each wire format's pieces (a message, the `tools` array) are written by `chat` (Chat
//! Completions) and `responses` (the Responses API), below this module; the dialects'
//! `request_body` ([`crate::openai::request_body`], [`crate::responses::request_body`]) is
//! [`value`].

mod chat;
mod responses;

use crate::reply::Options;
use serde_json::Value;
use std::io::Write as _;
use std::sync::Mutex;
use terminus_runtime::{Message, ModelRequest, ToolSpec};

/// The wire formats whose bodies are written from kept bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Wire {
    /// Chat Completions: `messages`.
    Chat,
    /// Responses: `input`.
    Responses,
}

impl Wire {
    fn write_message(self, m: &Message, out: &mut Vec<u8>) {
        match self {
            Wire::Chat => chat::write_message(m, out),
            Wire::Responses => responses::write_item(m, out),
        }
    }

    fn write_tools(self, tools: &[ToolSpec], out: &mut Vec<u8>) {
        match self {
            Wire::Chat => chat::write_tools(tools, out),
            Wire::Responses => responses::write_tools(tools, out),
        }
    }
}

/// The body of `request` in `wire`'s format, as a value: what a client with nothing kept sends.
pub(crate) fn value(wire: Wire, options: Options<'_>, request: &ModelRequest<'_>) -> Value {
    let body = Bodies::default().write(wire, options, request);
    serde_json::from_slice(&body).unwrap_or(Value::Null)
}

/// The conversations kept: the agent's, and a verifier's or another run's on the same model.
const KEPT: usize = 4;

/// One conversation's messages as last sent, and their encoding.
#[derive(Debug, Default)]
struct Memo {
    /// The messages encoded, in order: their stamps, with their content's length and tool-call
    /// count as a guard against a message changed in place.
    messages: Vec<Key>,
    /// `items.len()` after each message's items.
    ends: Vec<usize>,
    /// The messages' items, each after a comma.
    items: Vec<u8>,
    /// The tools last sent, and their encoding.
    tools: Vec<ToolSpec>,
    tools_json: Vec<u8>,
}

/// What a memo knows a message by.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Key {
    stamp: u64,
    len: usize,
    calls: usize,
}

impl Key {
    fn of(m: &Message) -> Key {
        Key {
            stamp: m.stamp(),
            len: m.content.len(),
            calls: m.tool_calls.len(),
        }
    }
}

impl Memo {
    /// How many of `messages` this memo holds, from the first.
    fn prefix(&self, messages: &[Message]) -> usize {
        self.messages
            .iter()
            .zip(messages)
            .take_while(|(kept, m)| **kept == Key::of(m))
            .count()
    }
}

/// The kept encodings of one model client.
#[derive(Debug, Default)]
pub(crate) struct Bodies {
    /// Least recently used first.
    memos: Mutex<Vec<Memo>>,
}

impl Bodies {
    /// The body of `request` in `wire`'s format.
    pub(crate) fn write(
        &self,
        wire: Wire,
        options: Options<'_>,
        request: &ModelRequest<'_>,
    ) -> Vec<u8> {
        let (mut memo, keep) = self.take(request.messages);
        memo.messages.truncate(keep);
        memo.ends.truncate(keep);
        memo.items.truncate(memo.ends.last().copied().unwrap_or(0));
        for m in &request.messages[keep..] {
            wire.write_message(m, &mut memo.items);
            memo.ends.push(memo.items.len());
            memo.messages.push(Key::of(m));
        }
        if memo.tools.as_slice() != request.tools || memo.tools_json.is_empty() {
            memo.tools = request.tools.to_vec();
            memo.tools_json.clear();
            wire.write_tools(request.tools, &mut memo.tools_json);
        }
        let mut out = Vec::with_capacity(memo.items.len() + memo.tools_json.len() + 256);
        out.extend_from_slice(b"{\"model\":");
        chat::write_json(&mut out, options.model);
        out.extend_from_slice(match wire {
            Wire::Chat => b",\"messages\":[",
            Wire::Responses => b",\"input\":[",
        });
        out.extend_from_slice(memo.items.get(1..).unwrap_or_default());
        out.push(b']');
        if !request.tools.is_empty() {
            out.extend_from_slice(b",\"tools\":");
            out.extend_from_slice(&memo.tools_json);
            if !request.tools_enabled {
                out.extend_from_slice(b",\"tool_choice\":\"none\"");
            }
        }
        // Always a cap: a model that rambles must not run until the call's timeout. Chat
        // Completions' field is `max_completion_tokens`, which OpenAI takes for every model (its
        // reasoning models refuse `max_tokens`) and llama.cpp, vLLM, LiteLLM and OpenRouter
        // take too.
        out.extend_from_slice(match wire {
            Wire::Chat => b",\"max_completion_tokens\":",
            Wire::Responses => b",\"max_output_tokens\":",
        });
        let cap = options
            .max_output_tokens
            .unwrap_or(crate::DEFAULT_MAX_OUTPUT_TOKENS);
        let _ = write!(out, "{cap}");
        if let Some(t) = options.temperature {
            let _ = write!(out, ",\"temperature\":{t}");
        }
        if let (Wire::Chat, Some(seed)) = (wire, options.seed) {
            let _ = write!(out, ",\"seed\":{seed}");
        }
        out.extend_from_slice(match (wire, options.stream) {
            (Wire::Chat, false) => &b"}"[..],
            (Wire::Chat, true) => b",\"stream\":true,\"stream_options\":{\"include_usage\":true}}",
            // Nothing is kept on the server: every request carries the whole conversation.
            (Wire::Responses, false) => b",\"store\":false}",
            (Wire::Responses, true) => b",\"store\":false,\"stream\":true}",
        });
        self.put(memo);
        out
    }

    /// The memo that holds the longest start of `messages` (taken out, so that encoding runs
    /// unlocked), and the length of that start; a new memo when none holds any.
    fn take(&self, messages: &[Message]) -> (Memo, usize) {
        let mut memos = self.memos.lock().unwrap_or_else(|e| e.into_inner());
        let best = memos
            .iter()
            .enumerate()
            .map(|(i, memo)| (memo.prefix(messages), i))
            .max();
        match best {
            Some((keep, i)) if keep > 0 => (memos.remove(i), keep),
            _ => (Memo::default(), 0),
        }
    }

    fn put(&self, memo: Memo) {
        let mut memos = self.memos.lock().unwrap_or_else(|e| e.into_inner());
        if memos.len() >= KEPT {
            memos.remove(0);
        }
        memos.push(memo);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{Value, json};
    use terminus_kernel::ToolCall;
    use terminus_runtime::Purpose;

    fn request<'a>(messages: &'a [Message], tools: &'a [ToolSpec]) -> ModelRequest<'a> {
        ModelRequest {
            messages,
            tools,
            tools_enabled: true,
            purpose: Purpose::Verify,
        }
    }

    const OPTIONS: Options<'static> = Options {
        model: "m",
        max_output_tokens: None,
        stream: true,
        temperature: None,
        seed: None,
    };

    fn turn(i: usize) -> [Message; 2] {
        let id = format!("call_{i}");
        [
            Message::assistant(
                "",
                vec![ToolCall::new(id.as_str(), "read", json!({ "file": i }))],
            ),
            Message::tool_result(id, "read", format!("contents {i}"), None),
        ]
    }

    /// What a fresh client would send: the body written with nothing kept.
    fn fresh(wire: Wire, messages: &[Message], tools: &[ToolSpec]) -> Value {
        let body = Bodies::default().write(wire, OPTIONS, &request(messages, tools));
        serde_json::from_slice(&body).expect("JSON")
    }

    #[test]
    fn kept_bytes_give_the_body_a_fresh_encoding_gives() {
        let tools = vec![ToolSpec {
            name: "read".into(),
            description: "Reads.".into(),
            parameters: json!({ "type": "object" }),
        }];
        for wire in [Wire::Chat, Wire::Responses] {
            let bodies = Bodies::default();
            let mut messages = vec![Message::system("Be brief."), Message::user("Read.")];
            let mut other = vec![Message::user("Judge this.")];
            for i in 0..6 {
                let sent = bodies.write(wire, OPTIONS, &request(&messages, &tools));
                let sent: Value = serde_json::from_slice(&sent).expect("JSON");
                assert_eq!(sent, fresh(wire, &messages, &tools), "{wire:?} turn {i}");
                // Another conversation in between (a verifier's) changes nothing.
                let judged = bodies.write(wire, OPTIONS, &request(&other, &[]));
                let judged: Value = serde_json::from_slice(&judged).expect("JSON");
                assert_eq!(judged, fresh(wire, &other, &[]));
                other.push(Message::user(format!("more {i}")));
                messages.extend(turn(i));
            }
            // A message changed in the middle (a pruned tool result) and one taken away.
            messages[3] = Message::tool_result("call_0", "read", "[elided]".into(), None);
            messages.remove(5);
            let sent = bodies.write(wire, OPTIONS, &request(&messages, &tools));
            let sent: Value = serde_json::from_slice(&sent).expect("JSON");
            assert_eq!(sent, fresh(wire, &messages, &tools));
            assert!(sent.to_string().contains("[elided]"));
            // Other tools: sent as they are now.
            let sent = bodies.write(wire, OPTIONS, &request(&messages, &[]));
            let sent: Value = serde_json::from_slice(&sent).expect("JSON");
            assert_eq!(sent, fresh(wire, &messages, &[]));
            assert!(sent.get("tools").is_none());
        }
    }
}
