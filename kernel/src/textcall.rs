//! Tool calls a model wrote as text instead of through the tool interface.
//!
//! Small and local models often answer a tool turn with the call in their reply's text: a JSON
//! object (bare or in a fenced block) with `name` and `arguments`, Hermes/Qwen
//! `<tool_call>{...}</tool_call>`, Mistral `[TOOL_CALLS][...]`, Llama 3 `<|python_tag|>{...}`.
//! The server did not turn it into a call, so nothing ran; taken at its word, the reply would be
//! a completion claim whose result is an unexecuted call. This module reads such a reply:
//!
//! - [`find`] (pure): whether a text is, or ends with, calls written as text, and which.
//! - [`recover`]: what a host does with a turn before the machine sees it. Under
//!   [`TextToolCalls::Run`] a call that names an offered tool with an object of arguments becomes
//!   a real call (an id, journaled with the turn, counted in `stats.text_tool_calls`); otherwise
//!   the turn keeps its text, with the offered names closest to what it wrote for the nudge.
//! - The machine classifies a text turn that still holds a written call as a no-op
//!   ([`crate::NoOpKind::TextCall`]): never a claim, never an answer, bounded by `max_no_ops`.
//!
//! A JSON object without `arguments` or `parameters` is not a call (a JSON answer stays an
//! answer), nor is a fenced block in another language, nor a call followed by more prose.

pub use crate::event::TextCalls;
use crate::event::{ModelTurn, ToolCall};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// What the kernel does with a tool call written in a reply's text (`policy.text_tool_calls`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TextToolCalls {
    /// A call naming an offered tool with an object of arguments runs as a real call; any other
    /// is nudged (default).
    #[default]
    Run,
    /// Every written call is nudged: the model is told to use the tool interface.
    Nudge,
    /// The text is read as it always was (a written call can be taken for an answer).
    Off,
}

impl TextToolCalls {
    /// Whether this is the default (`run`).
    pub fn is_default(&self) -> bool {
        *self == TextToolCalls::Run
    }
}

/// How the calls were written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Format {
    /// A bare JSON object or list of objects.
    Json,
    /// JSON in a fenced code block.
    Fenced,
    /// `<tool_call>{...}</tool_call>` (Hermes, Qwen).
    Hermes,
    /// `[TOOL_CALLS][...]` (Mistral).
    Mistral,
    /// `<|python_tag|>{...}` (Llama 3).
    PythonTag,
}

impl Format {
    /// The snake_case name.
    pub const fn as_str(self) -> &'static str {
        match self {
            Format::Json => "json",
            Format::Fenced => "fenced",
            Format::Hermes => "hermes",
            Format::Mistral => "mistral",
            Format::PythonTag => "python_tag",
        }
    }
}

/// One call written in the text.
#[derive(Debug, Clone, PartialEq)]
pub struct WrittenCall {
    /// The tool name it gives.
    pub name: String,
    /// Its arguments (`arguments` or `parameters`; a string holding JSON is read as that JSON).
    pub arguments: Value,
}

impl WrittenCall {
    /// Whether the arguments are a JSON object (only then can the call run).
    pub fn runnable(&self) -> bool {
        self.arguments.is_object()
    }
}

/// The calls a text ends with.
#[derive(Debug, Clone, PartialEq)]
pub struct Written {
    /// Where the calls start, in bytes: the text before it is the reply's prose.
    pub start: usize,
    /// How they were written.
    pub format: Format,
    /// The calls, in order (at least one).
    pub calls: Vec<WrittenCall>,
}

impl Written {
    /// The names the calls give, in order, each once.
    pub fn names(&self) -> Vec<String> {
        let mut names: Vec<String> = Vec::new();
        for call in &self.calls {
            if !names.contains(&call.name) {
                names.push(call.name.clone());
            }
        }
        names
    }
}

/// What [`recover`] did.
#[derive(Debug, Clone, PartialEq)]
pub enum Recovery {
    /// The calls became real calls.
    Ran {
        /// How they were written.
        format: Format,
        /// How many.
        calls: u32,
    },
    /// The calls stay in the text; the machine nudges.
    Nudged {
        /// How they were written.
        format: Format,
        /// The names they gave.
        names: Vec<String>,
        /// The names no offered tool has.
        unknown: Vec<String>,
    },
}

/// The markers that open a call written in a model's own call syntax.
const MARKERS: [(&str, Format); 3] = [
    ("<tool_call>", Format::Hermes),
    ("[TOOL_CALLS]", Format::Mistral),
    ("<|python_tag|>", Format::PythonTag),
];

/// How many candidate starts of a bare JSON value are tried (from the end): bounds the work on
/// a long reply full of braces.
const MAX_CANDIDATES: usize = 16;

/// The calls `text` is, or ends with; `None` when it holds none. Linear in the text, but for at
/// most 16 parses of its tail (the candidate starts nearest its end).
pub fn find(text: &str) -> Option<Written> {
    let body = text.trim_end();
    if !body.contains('{') {
        return None;
    }
    // A call followed by the tool's answer as the model imagines it (`<tool_response>...`, the
    // template's own tag): the call is what the reply ends with.
    if let Some(at) = body.find(IMAGINED)
        && at > 0
        && let Some(found) = ends_with_calls(body[..at].trim_end())
    {
        return Some(found);
    }
    ends_with_calls(body)
}

/// The tag of a tool's answer in Hermes/Qwen chat templates, which a small model sometimes
/// writes itself after its call.
const IMAGINED: &str = "<tool_response>";

/// [`find`] on a text without trailing white space.
fn ends_with_calls(body: &str) -> Option<Written> {
    if let Some(found) = marked(body) {
        return Some(found);
    }
    if let Some(found) = in_tools_tags(body) {
        return Some(found);
    }
    if body.ends_with("```") {
        return fenced(body);
    }
    if body.ends_with('}') || body.ends_with(']') {
        return bare(body);
    }
    None
}

/// Calls after a model's call marker: everything from the first marker on must be calls.
fn marked(body: &str) -> Option<Written> {
    let (start, marker, format) = MARKERS
        .iter()
        .filter_map(|&(marker, format)| body.find(marker).map(|at| (at, marker, format)))
        .min_by_key(|&(at, _, _)| at)?;
    let calls = match format {
        Format::Hermes => hermes(&body[start..])?,
        _ => stream(&body[start + marker.len()..])?,
    };
    Some(Written {
        start,
        format,
        calls,
    })
}

/// Calls in the tags Qwen's chat template lists the tools in (`<tools>{...}</tools>`), which a
/// small model sometimes writes its call in (Qwen2.5-Coder-1.5B on `terminus eval`'s MCP task):
/// the text must end with `</tools>` and hold nothing but calls since its `<tools>`.
fn in_tools_tags(body: &str) -> Option<Written> {
    const OPEN: &str = "<tools>";
    let inner = body.strip_suffix("</tools>")?;
    let start = inner.rfind(OPEN)?;
    let calls = stream(inner[start + OPEN.len()..].trim())?;
    Some(Written {
        start,
        format: Format::Hermes,
        calls,
    })
}

/// `<tool_call>JSON</tool_call>` blocks, one after another (the last closing tag may be missing:
/// a stop sequence can eat it).
fn hermes(mut rest: &str) -> Option<Vec<WrittenCall>> {
    const OPEN: &str = "<tool_call>";
    const CLOSE: &str = "</tool_call>";
    let mut calls = Vec::new();
    loop {
        rest = rest.trim_start();
        if rest.is_empty() {
            break;
        }
        rest = rest.strip_prefix(OPEN)?;
        let (inner, after) = match rest.find(CLOSE) {
            Some(at) => (&rest[..at], &rest[at + CLOSE.len()..]),
            None => (rest, ""),
        };
        calls.extend(stream(inner)?);
        rest = after;
    }
    (!calls.is_empty()).then_some(calls)
}

/// Fenced blocks of calls at the end of the text (one or more in a row).
fn fenced(body: &str) -> Option<Written> {
    const FENCE: &str = "```";
    let mut end = body;
    let mut start = None;
    let mut blocks: Vec<Vec<WrittenCall>> = Vec::new();
    while let Some(inner_end) = end.strip_suffix(FENCE).map(str::len) {
        let Some(open) = end[..inner_end].rfind(FENCE) else {
            break;
        };
        let block = &end[open + FENCE.len()..inner_end];
        let (info, content) = block.split_once('\n').unwrap_or(("", block));
        let info = info.trim().to_ascii_lowercase();
        if !matches!(
            info.as_str(),
            "" | "json" | "jsonc" | "tool_call" | "tool_code"
        ) {
            break;
        }
        let content = content.trim();
        let calls = if content.starts_with("<tool_call>") {
            hermes(content)
        } else {
            stream(content)
        };
        let Some(calls) = calls else {
            break;
        };
        blocks.push(calls);
        start = Some(open);
        end = end[..open].trim_end();
    }
    let start = start?;
    let calls = blocks.into_iter().rev().flatten().collect();
    Some(Written {
        start,
        format: Format::Fenced,
        calls,
    })
}

/// A bare JSON value (or several, one after another) that the text ends with. A candidate start
/// is a `{` or `[` that opens its line; the earliest that makes the rest of the text calls wins.
fn bare(body: &str) -> Option<Written> {
    let mut candidates: Vec<usize> = Vec::new();
    let mut line_start = true;
    for (at, c) in body.char_indices() {
        match c {
            '\n' => line_start = true,
            '{' | '[' if line_start => {
                candidates.push(at);
                line_start = false;
            }
            c if c.is_whitespace() => {}
            _ => line_start = false,
        }
    }
    let skip = candidates.len().saturating_sub(MAX_CANDIDATES);
    candidates.into_iter().skip(skip).find_map(|start| {
        stream(&body[start..]).map(|calls| Written {
            start,
            format: Format::Json,
            calls,
        })
    })
}

/// JSON values one after another (separated by white space, `;` or `,`), each a call or a
/// non-empty list of calls; `None` unless the whole text is such. A call in doubled braces
/// (`{{"name": ...}}`, as a chat template's escaping leaks into some replies) is read as the
/// call inside; several such calls in a row are read with every doubled brace made single (and
/// only if all of the text then reads as calls); a call whose opening brace alone is doubled is
/// read without it.
fn stream(text: &str) -> Option<Vec<WrittenCall>> {
    stream_plain(text)
        .or_else(|| {
            let inner = text.trim().strip_prefix('{')?.strip_suffix('}')?;
            if inner.starts_with('{') && inner.ends_with('}') {
                stream_plain(inner)
            } else {
                None
            }
        })
        .or_else(|| {
            let text = text.trim();
            if text.starts_with("{{") && text.ends_with("}}") {
                stream_plain(&text.replace("{{", "{").replace("}}", "}"))
            } else {
                None
            }
        })
        .or_else(|| {
            // Only the opening brace doubled: `{{"name": ..., "arguments": {...}}`.
            let text = text.trim();
            text.starts_with("{{")
                .then(|| stream_plain(&text[1..]))
                .flatten()
        })
}

fn stream_plain(text: &str) -> Option<Vec<WrittenCall>> {
    let mut calls = Vec::new();
    let mut rest = text;
    loop {
        rest = rest.trim_start_matches(|c: char| c.is_whitespace() || c == ';' || c == ',');
        if rest.is_empty() {
            break;
        }
        let mut values = serde_json::Deserializer::from_str(rest).into_iter::<Value>();
        let value = values.next()?.ok()?;
        rest = &rest[values.byte_offset()..];
        match value {
            Value::Array(items) if !items.is_empty() => {
                for item in items {
                    calls.push(call(item)?);
                }
            }
            value => calls.push(call(value)?),
        }
    }
    (!calls.is_empty()).then_some(calls)
}

/// One written call: an object with a non-empty `name` and `arguments` or `parameters` (or the
/// OpenAI shape, `{"type": "function", "function": {...}}`).
fn call(value: Value) -> Option<WrittenCall> {
    let Value::Object(mut object) = value else {
        return None;
    };
    if let Some(Value::Object(function)) = object.remove("function") {
        return call(Value::Object(function));
    }
    let name = match object.remove("name") {
        Some(Value::String(name)) if !name.trim().is_empty() => name.trim().to_owned(),
        _ => return None,
    };
    let arguments = object
        .remove("arguments")
        .or_else(|| object.remove("parameters"))?;
    let arguments = match arguments {
        Value::String(text) => match serde_json::from_str::<Value>(&text) {
            Ok(value @ Value::Object(_)) => value,
            _ => Value::String(text),
        },
        Value::Null => Value::Object(Map::new()),
        other => other,
    };
    Some(WrittenCall { name, arguments })
}

/// What a host does with a model turn before the machine sees it (the runtime, the `Host`,
/// and through it both bindings). `offered`: the names of the tools offered with the call this
/// turn answers (`None`: the host does not know them, any name may run). `ids`: the prefix of
/// the recovered calls' ids (the call's index is appended).
///
/// Under [`TextToolCalls::Run`], when every written call names an offered tool and has an
/// object of arguments, they become the turn's calls and its text keeps only the prose before
/// them. Otherwise (a name not offered, arguments not an object, or `nudge`) the text is left
/// as it is, and [`ModelTurn::suggested_tools`] names the offered tools for the nudge: the closest
/// to each unknown name, or (under `nudge`) every offered tool. A turn with calls of its own,
/// or under `off`, is left alone.
pub fn recover(
    turn: &mut ModelTurn,
    offered: Option<&[&str]>,
    mode: TextToolCalls,
    ids: &str,
) -> Option<Recovery> {
    if mode == TextToolCalls::Off || !turn.tool_calls.is_empty() {
        return None;
    }
    let written = find(&turn.text)?;
    let is_offered = |name: &str| offered.is_none_or(|o| o.contains(&name));
    let unknown: Vec<String> = written
        .names()
        .into_iter()
        .filter(|n| !is_offered(n))
        .collect();
    let runs = mode == TextToolCalls::Run
        && unknown.is_empty()
        && written.calls.iter().all(WrittenCall::runnable);
    if runs {
        let count = u32::try_from(written.calls.len()).unwrap_or(u32::MAX);
        turn.text.truncate(written.start);
        let prose = turn.text.trim_end().len();
        turn.text.truncate(prose);
        turn.tool_calls = written
            .calls
            .into_iter()
            .enumerate()
            .map(|(i, c)| ToolCall::new(format!("{ids}{i}"), c.name, c.arguments))
            .collect();
        turn.text_calls = Some(Box::new(TextCalls {
            recovered: count,
            suggested: Vec::new(),
        }));
        return Some(Recovery::Ran {
            format: written.format,
            calls: count,
        });
    }
    let offered = offered.unwrap_or(&[]);
    let suggested = if unknown.is_empty() {
        offered.iter().map(|s| (*s).to_owned()).collect()
    } else {
        closest(&unknown, offered)
    };
    turn.text_calls = Some(Box::new(TextCalls {
        recovered: 0,
        suggested,
    }));
    Some(Recovery::Nudged {
        format: written.format,
        names: written.names(),
        unknown,
    })
}

/// The offered names closest to `unknown` (by edit distance, at most three per name, each once).
pub fn closest(unknown: &[String], offered: &[&str]) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for name in unknown {
        let mut ranked: Vec<(usize, &str)> = offered
            .iter()
            .map(|o| (distance(&name.to_lowercase(), &o.to_lowercase()), *o))
            .collect();
        ranked.sort();
        for (_, o) in ranked.into_iter().take(3) {
            if !out.iter().any(|s| s == o) {
                out.push(o.to_owned());
            }
        }
    }
    out
}

/// Levenshtein distance over characters.
fn distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut diagonal = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let above = row[j + 1];
            row[j + 1] = (diagonal + usize::from(ca != *cb))
                .min(above + 1)
                .min(row[j] + 1);
            diagonal = above;
        }
    }
    row[b.len()]
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn names(text: &str) -> Option<(Format, Vec<String>, String)> {
        find(text).map(|w| {
            (
                w.format,
                w.calls.iter().map(|c| c.name.clone()).collect(),
                text[..w.start].trim_end().to_owned(),
            )
        })
    }

    #[test]
    fn the_real_models_fenced_call_is_found() {
        // Qwen2.5-Coder-1.5B's reply to seed 000's task, as received.
        let text =
            "```json\n{\"name\": \"read_directory\", \"arguments\": {\"path\": \"project\"}}\n```";
        let w = find(text).expect("a call");
        assert_eq!(w.format, Format::Fenced);
        assert_eq!(w.start, 0);
        assert_eq!(w.calls[0].name, "read_directory");
        assert_eq!(w.calls[0].arguments, json!({"path": "project"}));
    }

    #[test]
    fn the_real_models_doubled_braces_are_a_call() {
        // Qwen2.5-Coder-1.5B's reply on the eval's verifier task, as received.
        let text = r#"{{"name": "write_file", "arguments": {"content": "17 * 3 = 51", "path": "answer.txt"}}}"#;
        let w = find(text).expect("a call");
        assert_eq!(w.calls[0].name, "write_file");
        assert_eq!(
            w.calls[0].arguments,
            json!({"content": "17 * 3 = 51", "path": "answer.txt"})
        );
        assert_eq!(find("{{not a call}}"), None);
        // Only the opening brace doubled (the verifier task's fourth kernel trial, as received).
        let text = r#"{{"name": "write_file", "arguments": {"content": "17 * 3 = 51", "path": "answer.txt"}}"#;
        assert_eq!(find(text).expect("a call").names(), ["write_file"]);
        assert_eq!(find("{{\"name\": \"write_file\"} and more"), None);
    }

    #[test]
    fn a_call_in_the_templates_tools_tags_is_a_call() {
        // As Qwen2.5-Coder-1.5B wrote it on `terminus eval`'s MCP task.
        let text = "<tools>\n{\"name\": \"write_file\", \"arguments\": {\"content\": \"The sum of 1234 and 4321 is 5555.\", \"path\": \"sum.txt\"}}\n</tools>";
        let found = find(text).expect("a call");
        assert_eq!(found.names(), ["write_file"]);
        assert_eq!(found.start, 0);
        // Several calls in doubled braces in the tags (the eval's poller, as received).
        let text = "<tools>\n{{\"name\": \"fetch_report\", \"arguments\": {}}}\n{{\"name\": \"write_file\", \"arguments\": {\"content\": \"Units shipped: 1234\", \"path\": \"units.txt\"}}}\n</tools>";
        let found = find(text).expect("two calls");
        assert_eq!(found.names(), ["fetch_report", "write_file"]);
        assert_eq!(
            found.calls[1].arguments,
            serde_json::json!({ "content": "Units shipped: 1234", "path": "units.txt" })
        );
        // Prose that names the tags is not a call, nor are tags around something else.
        assert_eq!(find("The tools are listed in <tools></tools> tags."), None);
        assert_eq!(find("<tools>\n{\"type\": \"function\"}\n</tools>"), None);
    }

    #[test]
    fn a_call_followed_by_an_imagined_tool_response_is_a_call() {
        // Qwen2.5-Coder-1.5B's reply on the eval's loop-prone task, as received.
        let text = "{\"name\": \"fetch_report\", \"arguments\": {}}\n<tool_response>\nnot ready, try again\n</tool_response>";
        let w = find(text).expect("a call");
        assert_eq!(w.calls[0].name, "fetch_report");
        let mut t = turn(text);
        recover(&mut t, Some(&["fetch_report"]), TextToolCalls::Run, "x");
        assert_eq!(t.text, "", "the imagined response is not kept");
        assert_eq!(t.tool_calls.len(), 1);
        // Only a response, no call: not a call.
        assert_eq!(find("<tool_response>\nnot ready\n</tool_response>"), None);
    }

    #[test]
    fn every_format_is_found_with_its_prose() {
        let cases = [
            (
                "{\"name\": \"read_file\", \"arguments\": {\"path\": \"a\"}}",
                Format::Json,
                "",
            ),
            (
                "I will read it.\n{\"name\": \"read_file\", \"parameters\": {\"path\": \"a\"}}\n",
                Format::Json,
                "I will read it.",
            ),
            (
                "First:\n```\n[{\"name\": \"read_file\", \"arguments\": {}}, {\"name\": \"ls\", \"arguments\": {}}]\n```",
                Format::Fenced,
                "First:",
            ),
            (
                "Let me look.\n<tool_call>\n{\"name\": \"read_file\", \"arguments\": {\"path\": \"a\"}}\n</tool_call>\n<tool_call>{\"name\": \"ls\", \"arguments\": {}}</tool_call>",
                Format::Hermes,
                "Let me look.",
            ),
            (
                "<tool_call>\n{\"name\": \"read_file\", \"arguments\": {\"path\": \"a\"}}",
                Format::Hermes,
                "",
            ),
            (
                "[TOOL_CALLS][{\"name\": \"read_file\", \"arguments\": {\"path\": \"a\"}}]",
                Format::Mistral,
                "",
            ),
            (
                "<|python_tag|>{\"name\": \"read_file\", \"parameters\": {\"path\": \"a\"}}",
                Format::PythonTag,
                "",
            ),
            (
                "{\"type\": \"function\", \"function\": {\"name\": \"read_file\", \"arguments\": \"{\\\"path\\\": \\\"a\\\"}\"}}",
                Format::Json,
                "",
            ),
        ];
        for (text, format, prose) in cases {
            let (f, n, p) = names(text).unwrap_or_else(|| panic!("no call in {text:?}"));
            assert_eq!(f, format, "{text}");
            assert_eq!(n[0], "read_file", "{text}");
            assert_eq!(p, prose, "{text}");
        }
    }

    #[test]
    fn two_fenced_calls_in_a_row_are_both_found() {
        let text = "```json\n{\"name\": \"a\", \"arguments\": {}}\n```\n\n```json\n{\"name\": \"b\", \"arguments\": {}}\n```";
        let (_, n, p) = names(text).expect("calls");
        assert_eq!(n, ["a", "b"]);
        assert_eq!(p, "");
    }

    #[test]
    fn answers_and_code_are_not_calls() {
        let not_calls = [
            "The answer is 4.",
            "{\"answer\": 4}",
            "{\"name\": \"Ada\", \"age\": 36}",
            "```python\nprint({\"name\": \"x\", \"arguments\": {}})\n```",
            "```json\n{\"name\": \"read_file\", \"arguments\": {}\n```",
            "{\"name\": \"read_file\", \"arguments\": {}} and then I stopped.",
            "<tool_call>not json</tool_call>",
            "[]",
            "{\"name\": \"\", \"arguments\": {}}",
            "Here is a table:\n| a | b |\n|---|---|\n| {x} | [y] |",
        ];
        for text in not_calls {
            assert_eq!(find(text), None, "{text}");
        }
    }

    #[test]
    fn code_that_ends_the_reply_with_a_brace_is_not_a_call() {
        let text = "Here is the function:\nfn main() {\n    println!(\"hi\");\n}";
        assert_eq!(find(text), None);
    }

    fn turn(text: &str) -> ModelTurn {
        ModelTurn {
            text: text.into(),
            ..ModelTurn::default()
        }
    }

    #[test]
    fn run_makes_real_calls_of_offered_tools() {
        let mut t = turn(
            "Reading.\n<tool_call>{\"name\": \"read_file\", \"arguments\": {\"path\": \"a\"}}</tool_call>",
        );
        let r = recover(&mut t, Some(&["read_file"]), TextToolCalls::Run, "text-1-");
        assert_eq!(
            r,
            Some(Recovery::Ran {
                format: Format::Hermes,
                calls: 1
            })
        );
        assert_eq!(t.text, "Reading.");
        assert_eq!(t.tool_calls.len(), 1);
        assert_eq!(t.tool_calls[0].id.as_str(), "text-1-0");
        assert_eq!(t.tool_calls[0].name.as_str(), "read_file");
        assert_eq!(*t.tool_calls[0].arguments, json!({"path": "a"}));
        assert_eq!(t.recovered_calls(), 1);
    }

    #[test]
    fn a_name_not_offered_is_nudged_with_the_closest_names() {
        let text = "```json\n{\"name\": \"read_directory\", \"arguments\": {\"path\": \"p\"}}\n```";
        let mut t = turn(text);
        let offered = ["read_file", "list_directory", "write_file", "search_files"];
        let r = recover(&mut t, Some(&offered), TextToolCalls::Run, "x");
        assert!(
            matches!(r, Some(Recovery::Nudged { ref unknown, .. }) if unknown == &["read_directory"])
        );
        assert_eq!(t.text, text, "the text is left as it came");
        assert!(t.tool_calls.is_empty());
        assert_eq!(t.suggested_tools()[0], "list_directory");
        assert_eq!(t.suggested_tools().len(), 3);
    }

    #[test]
    fn nudge_mode_names_every_offered_tool_and_off_reads_nothing() {
        let text = "{\"name\": \"read_file\", \"arguments\": {}}";
        let mut t = turn(text);
        let r = recover(
            &mut t,
            Some(&["read_file", "ls"]),
            TextToolCalls::Nudge,
            "x",
        );
        assert!(matches!(r, Some(Recovery::Nudged { .. })));
        assert_eq!(t.suggested_tools(), ["read_file", "ls"]);
        let mut t = turn(text);
        assert_eq!(
            recover(&mut t, Some(&["read_file"]), TextToolCalls::Off, "x"),
            None
        );
        assert!(t.text_calls.is_none());
    }

    #[test]
    fn arguments_that_are_not_an_object_do_not_run() {
        let mut t = turn("{\"name\": \"read_file\", \"arguments\": \"a.txt\"}");
        let r = recover(&mut t, Some(&["read_file"]), TextToolCalls::Run, "x");
        assert!(matches!(r, Some(Recovery::Nudged { .. })));
        assert!(t.tool_calls.is_empty());
    }

    #[test]
    fn a_turn_with_real_calls_is_left_alone() {
        let mut t = turn("{\"name\": \"read_file\", \"arguments\": {}}");
        t.tool_calls
            .push(ToolCall::new("c1", "ls", serde_json::json!({})));
        assert_eq!(recover(&mut t, None, TextToolCalls::Run, "x"), None);
        assert_eq!(t.tool_calls.len(), 1);
    }

    #[test]
    fn distance_is_levenshtein() {
        assert_eq!(distance("kitten", "sitting"), 3);
        assert_eq!(distance("", "abc"), 3);
        assert_eq!(distance("same", "same"), 0);
    }
}
