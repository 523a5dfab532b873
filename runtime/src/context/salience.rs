//! Which tool results the agent used: a result is *referred to* when a later assistant message
//! (its text or its tool calls' arguments) names one of the result's salient tokens.
//!
//! A salient token is what a model copies from a result it relies on: a file path (`src/a.rs`,
//! `main.rs`), an identifier with letters and digits (`a3f9c21e`, a UUID, `key-4037`) or a number
//! of at least three digits. Common words are never salient, so prose that merely sounds alike
//! refers to nothing. Both sides are bounded ([`MAX_SCAN_BYTES`] of each message,
//! [`MAX_TOKENS`] salient tokens a result), and [`Referrals`] scans each message once, when it
//! joins the conversation, so the cost is linear in the conversation whatever its results hold.
//! The answer is a function of the messages alone: the same conversation is always scored the
//! same.

use crate::message::{Author, Message, Role};
use serde_json::Value;
use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

/// Bytes of a message scanned for tokens: a result's head names what it is about, and a long
/// output (a log, a dump) must not make scoring cost more than counting it.
pub const MAX_SCAN_BYTES: usize = 8 * 1024;
/// Salient tokens taken from one result, the first ones in its text.
pub const MAX_TOKENS: usize = 32;
/// A longer run of token characters (base64, a minified blob) is not a name anyone quotes.
const MAX_TOKEN_BYTES: usize = 128;

/// FNV-1a: the tokens are short and hashed by the thousand on every prune, where SipHash's
/// protection against chosen keys buys nothing (a key only ever costs its own lookup).
#[derive(Default)]
struct Fnv(u64);

impl Hasher for Fnv {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        let mut h = if self.0 == 0 {
            0xcbf2_9ce4_8422_2325
        } else {
            self.0
        };
        for &b in bytes {
            h ^= u64::from(b);
            h = h.wrapping_mul(0x0100_0000_01b3);
        }
        self.0 = h;
    }
}

/// The FNV-1a hash of a token: what [`Referrals`] keys its waiting results by (a collision
/// could only rank a result higher, and the same way every time).
fn hash(token: &[u8]) -> u64 {
    let mut h = Fnv::default();
    h.write(token);
    h.finish()
}

/// Whether `b` can be part of a token: paths, identifiers and numbers are made of these (all
/// ASCII, so a token is valid UTF-8 wherever the text around it is cut).
fn token_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.' | b'/')
}

/// The tokens of the first [`MAX_SCAN_BYTES`] of `text`, with sentence punctuation and
/// leading or trailing separators trimmed (`(src/a.rs).` is `src/a.rs`).
fn tokens(text: &[u8]) -> impl Iterator<Item = &[u8]> {
    let edge = |b: &u8| matches!(b, b'.' | b'-' | b'/');
    text[..text.len().min(MAX_SCAN_BYTES)]
        .split(|&b| !token_byte(b))
        .map(move |mut t| {
            while let [first, rest @ ..] = t
                && edge(first)
            {
                t = rest;
            }
            while let [rest @ .., last] = t
                && edge(last)
            {
                t = rest;
            }
            t
        })
        .filter(|t| !t.is_empty() && t.len() <= MAX_TOKEN_BYTES)
}

/// Whether a token is worth matching: a path, a file name with an extension, an identifier
/// mixing letters and digits, or a number of three digits or more.
pub fn salient(token: &str) -> bool {
    salient_bytes(token.as_bytes())
}

fn salient_bytes(token: &[u8]) -> bool {
    let digits = token.iter().filter(|b| b.is_ascii_digit()).count();
    let letters = token.iter().filter(|b| b.is_ascii_alphabetic()).count();
    if token.contains(&b'/') {
        return digits + letters >= 2;
    }
    if let Some(dot) = token.iter().rposition(|&b| b == b'.') {
        let ext = &token[dot + 1..];
        if dot > 0
            && (1..=8).contains(&ext.len())
            && ext.iter().all(u8::is_ascii_alphanumeric)
            && ext.iter().any(u8::is_ascii_alphabetic)
            && token.len() >= 4
        {
            return true;
        }
    }
    if letters == 0 {
        return digits >= 3;
    }
    digits > 0 && token.len() >= 6
}

/// The salient tokens of a result's text, at most [`MAX_TOKENS`], first first.
fn result_tokens(text: &str) -> Vec<&[u8]> {
    let mut out: Vec<&[u8]> = Vec::new();
    for t in tokens(text.as_bytes()).filter(|t| salient_bytes(t)) {
        if out.len() == MAX_TOKENS {
            break;
        }
        if !out.contains(&t) {
            out.push(t);
        }
    }
    out
}

/// The salient tokens of a tool result's evidence (a kernel warning appended to it is not the
/// tool's), at most [`MAX_TOKENS`], first first.
pub fn salient_tokens(result: &Message) -> Vec<&str> {
    result_tokens(result.evidence())
        .into_iter()
        .filter_map(|t| std::str::from_utf8(t).ok())
        .collect()
}

/// For each message, whether it is a tool result (the tool's own, not a kernel refusal) one of
/// whose salient tokens a later assistant message names.
pub fn referred(messages: &[Message]) -> Vec<bool> {
    let mut referrals = Referrals::default();
    for m in messages {
        referrals.push(m);
    }
    referrals.referred
}

/// [`referred`] kept up to date as a conversation grows, message by message: each message is
/// scanned once, when it is pushed, so that a prune costs no scanning at all (a result's
/// tokens wait until an assistant message names one of them, or forever).
#[derive(Debug, Clone, Default)]
pub struct Referrals {
    /// Per message pushed: whether a later assistant message named it.
    referred: Vec<bool>,
    /// Per salient token (hashed): the results holding it that nothing has named yet.
    waiting: HashMap<u64, Vec<usize>, BuildHasherDefault<Fnv>>,
}

impl Referrals {
    /// Takes the next message of the conversation into account.
    pub fn push(&mut self, m: &Message) {
        let i = self.referred.len();
        self.referred.push(false);
        match (m.role, m.author) {
            (Role::Assistant, _) => {
                for t in tokens(m.content.as_bytes()).filter(|t| salient_bytes(t)) {
                    self.name(t);
                }
                let mut budget = MAX_SCAN_BYTES;
                for call in &m.tool_calls {
                    self.arguments(call.arguments.value(), &mut budget);
                }
            }
            (Role::Tool, Author::Tool) => {
                for t in result_tokens(m.evidence()) {
                    self.waiting.entry(hash(t)).or_default().push(i);
                }
            }
            _ => {}
        }
    }

    /// Per message pushed: whether it is a tool result a later assistant message referred to.
    pub fn referred(&self) -> &[bool] {
        &self.referred
    }

    /// An assistant message names `token`: every result waiting on it is referred to.
    fn name(&mut self, token: &[u8]) {
        if self.waiting.is_empty() {
            return;
        }
        for r in self.waiting.remove(&hash(token)).unwrap_or_default() {
            self.referred[r] = true;
        }
    }

    /// The salient tokens of the strings in a call's arguments, until `budget` bytes of them
    /// were scanned (shared by the calls of one message), and its whole numbers of three digits
    /// or more, as written in decimal (`"line": 4711` names the `4711` of a result).
    fn arguments(&mut self, value: &Value, budget: &mut usize) {
        if *budget == 0 {
            return;
        }
        match value {
            Value::String(s) => {
                let text = &s.as_bytes()[..s.len().min(*budget)];
                *budget -= text.len();
                for t in tokens(text).filter(|t| salient_bytes(t)) {
                    self.name(t);
                }
            }
            Value::Number(n) => {
                if let Some(n) = n.as_u64().filter(|n| *n >= 100) {
                    self.name(n.to_string().as_bytes());
                }
            }
            Value::Array(items) => {
                for v in items {
                    self.arguments(v, budget);
                }
            }
            Value::Object(fields) => {
                for v in fields.values() {
                    self.arguments(v, budget);
                }
            }
            Value::Null | Value::Bool(_) => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use terminus_kernel::ToolCall;

    #[test]
    fn paths_ids_and_long_numbers_are_salient_words_are_not() {
        for t in [
            "src/lib.rs",
            "main.rs",
            "Cargo.toml",
            "a3f9c21e",
            "550e8400-e29b-41d4-a716-446655440000",
            "key-4037",
            "4711",
            "128",
        ] {
            assert!(salient(t), "{t}");
        }
        for t in [
            "the", "lorem", "ok", "42", "f3", "e.g", "v1", "done.", "1.5",
        ] {
            assert!(!salient(t), "{t}");
        }
    }

    #[test]
    fn tokens_are_trimmed_of_punctuation_and_bounded() {
        let m = Message::tool_result(
            "c",
            "read_file",
            "See (src/a.rs). Then \"b.txt\", id=abc123.".to_owned(),
            Some("[terminus] budget: 999999 tokens left"),
        );
        assert_eq!(salient_tokens(&m), vec!["src/a.rs", "b.txt", "abc123"]);
        let many: String = (0..100).map(|i| format!("id{i:04} ")).collect();
        let m = Message::tool_result("c", "t", many, None);
        let got = salient_tokens(&m);
        assert_eq!(got.len(), MAX_TOKENS);
        assert_eq!(got[0], "id0000");
        // Past the scanned head nothing is salient.
        let late = format!("{} tail9999", "x ".repeat(MAX_SCAN_BYTES));
        assert!(salient_tokens(&Message::tool_result("c", "t", late, None)).is_empty());
    }

    #[test]
    fn a_result_is_referred_to_only_by_a_later_assistant_message() {
        let call = |id: &str, path: &str| ToolCall {
            id: id.into(),
            name: "read_file".into(),
            arguments: json!({ "path": path }).into(),
        };
        let messages = vec![
            Message::user("Fix src/lib.rs."),
            Message::assistant("Reading.", vec![call("1", "src/lib.rs")]),
            Message::tool_result(
                "1",
                "read_file",
                "mod util; // see src/util.rs".into(),
                None,
            ),
            Message::assistant("Listing.", vec![call("2", "docs")]),
            Message::tool_result("2", "read_file", "README.md guide.md".into(), None),
            Message::assistant("Now the helper.", vec![call("3", "src/util.rs")]),
            Message::tool_result("3", "read_file", "line 4711: fn helper() {}".into(), None),
            Message::assistant(
                "Its line.",
                vec![ToolCall {
                    id: "4".into(),
                    name: "read_lines".into(),
                    arguments: json!({ "from": 4711, "path": 7 }).into(),
                }],
            ),
            Message::tool_result("4", "read_lines", "fn helper() {}".into(), None),
        ];
        // The first result names src/util.rs, which the third call reads; nothing after the
        // second names its files; the third's line number is the fourth call's argument;
        // nothing comes after the fourth.
        assert_eq!(
            referred(&messages),
            vec![false, false, true, false, false, false, true, false, false]
        );
    }
}
