//! Which tool results the agent used: a result is *referred to* when a later assistant message
//! (its text or its tool calls' arguments) names one of the result's salient tokens.
//!
//! A salient token is what a model copies from a result it relies on: a file path (`src/a.rs`,
//! `main.rs`), an identifier with letters and digits (`a3f9c21e`, a UUID, `key-4037`) or a number
//! of at least three digits. Common words are never salient, so prose that merely sounds alike
//! refers to nothing. Both sides are bounded ([`MAX_SCAN_BYTES`] of each message,
//! [`MAX_TOKENS`] salient tokens a result), so the cost is linear in the conversation whatever
//! its results hold. The answer is a function of the messages alone: the same conversation is
//! always scored the same.

use crate::message::{Author, Message, Role};
use serde_json::Value;
use std::borrow::Cow;
use std::collections::HashSet;

/// Bytes of a message scanned for tokens: a result's head names what it is about, and a long
/// output (a log, a dump) must not make scoring cost more than counting it.
pub const MAX_SCAN_BYTES: usize = 8 * 1024;
/// Salient tokens taken from one result, the first ones in its text.
pub const MAX_TOKENS: usize = 32;
/// A longer run of token characters (base64, a minified blob) is not a name anyone quotes.
const MAX_TOKEN_BYTES: usize = 128;

/// Whether `c` can be part of a token: paths, identifiers and numbers are made of these.
fn token_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.' | '/')
}

/// The tokens of the first [`MAX_SCAN_BYTES`] of `text`, with sentence punctuation and
/// leading or trailing separators trimmed (`(src/a.rs).` is `src/a.rs`).
fn tokens(text: &str) -> impl Iterator<Item = &str> {
    text[..floor(text, text.len().min(MAX_SCAN_BYTES))]
        .split(|c: char| !token_char(c))
        .map(|t| t.trim_matches(|c: char| matches!(c, '.' | '-' | '/')))
        .filter(|t| !t.is_empty() && t.len() <= MAX_TOKEN_BYTES)
}

/// Whether a token is worth matching: a path, a file name with an extension, an identifier
/// mixing letters and digits, or a number of three digits or more.
pub fn salient(token: &str) -> bool {
    let digits = token.bytes().filter(u8::is_ascii_digit).count();
    let letters = token.bytes().filter(u8::is_ascii_alphabetic).count();
    if token.contains('/') {
        return digits + letters >= 2;
    }
    if let Some((stem, ext)) = token.rsplit_once('.')
        && !stem.is_empty()
        && (1..=8).contains(&ext.len())
        && ext.bytes().all(|b| b.is_ascii_alphanumeric())
        && ext.bytes().any(|b| b.is_ascii_alphabetic())
        && token.len() >= 4
    {
        return true;
    }
    if letters == 0 {
        return digits >= 3;
    }
    digits > 0 && token.len() >= 6
}

/// The salient tokens of a tool result's evidence (a kernel warning appended to it is not the
/// tool's), at most [`MAX_TOKENS`], first first.
pub fn salient_tokens(result: &Message) -> Vec<&str> {
    let mut out: Vec<&str> = Vec::new();
    for t in tokens(result.evidence()).filter(|t| salient(t)) {
        if out.len() == MAX_TOKENS {
            break;
        }
        if !out.contains(&t) {
            out.push(t);
        }
    }
    out
}

/// For each message, whether it is a tool result (the tool's own, not a kernel refusal) one of
/// whose salient tokens a later assistant message names.
pub fn referred(messages: &[Message]) -> Vec<bool> {
    let mut out = vec![false; messages.len()];
    // The tokens of every assistant message after the one being looked at, built from the end.
    let mut later: HashSet<Cow<'_, str>> = HashSet::new();
    for (i, m) in messages.iter().enumerate().rev() {
        match (m.role, m.author) {
            (Role::Assistant, _) => {
                later.extend(tokens(&m.content).map(Cow::Borrowed));
                let mut budget = MAX_SCAN_BYTES;
                for call in &m.tool_calls {
                    argument_tokens(call.arguments.value(), &mut budget, &mut later);
                }
            }
            (Role::Tool, Author::Tool) if !later.is_empty() => {
                out[i] = salient_tokens(m).iter().any(|t| later.contains(*t));
            }
            _ => {}
        }
    }
    out
}

/// The tokens of the strings and numbers in a call's arguments, until `budget` bytes of them
/// were scanned (shared by the calls of one message).
fn argument_tokens<'a>(value: &'a Value, budget: &mut usize, out: &mut HashSet<Cow<'a, str>>) {
    if *budget == 0 {
        return;
    }
    match value {
        Value::String(s) => {
            let text = &s[..floor(s, (*budget).min(s.len()))];
            *budget -= text.len();
            out.extend(tokens(text).map(Cow::Borrowed));
        }
        Value::Number(n) => {
            let n = n.to_string();
            *budget = budget.saturating_sub(n.len());
            out.extend(tokens(&n).map(|t| Cow::Owned(t.to_owned())));
        }
        Value::Array(items) => {
            for v in items {
                argument_tokens(v, budget, out);
            }
        }
        Value::Object(fields) => {
            for v in fields.values() {
                argument_tokens(v, budget, out);
            }
        }
        Value::Null | Value::Bool(_) => {}
    }
}

/// The largest char boundary of `s` at or below `at`.
fn floor(s: &str, mut at: usize) -> usize {
    while !s.is_char_boundary(at) {
        at -= 1;
    }
    at
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
            Message::tool_result("3", "read_file", "fn helper() {}".into(), None),
        ];
        // The first result names src/util.rs, which the third call reads; nothing after the
        // second names its files; nothing comes after the third.
        assert_eq!(
            referred(&messages),
            vec![false, false, true, false, false, false, false]
        );
    }
}
