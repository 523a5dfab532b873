//! Tool calls a model wrote as text instead of through the tool interface.
//!
//! Small and local models often answer a tool turn with the call in their reply's text: a JSON
//! object (bare or in a fenced block) with `name` and `arguments`, or a family's own syntax
//! (Hermes/Qwen `<tool_call>{...}</tool_call>`, Qwen3-Coder's and GLM's XML, Mistral
//! `[TOOL_CALLS]`, Llama 3 `<|python_tag|>`, Kimi K2, DeepSeek, gpt-oss Harmony, Gemma 4; see
//! `textcall/families.rs` and `docs/design.md`, "Written tool calls, family by family"). A
//! reasoning block before the call (`<think>`, `[THINK]`, Harmony's analysis channel) is skipped.
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
//! answer), nor is a fenced block in another language, nor a call followed by more prose (but
//! for a last line that is only a courteous closing).

mod families;

pub use crate::event::TextCalls;
use crate::event::{ModelTurn, ToolCall};
pub use families::typed;
use serde::{Deserialize, Serialize};
use serde_json::Value;

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
    /// `<function=NAME><parameter=K>V</parameter></function>` (Qwen3-Coder; Llama 3.1's
    /// `<function=NAME>{...}</function>`).
    Xml,
    /// `<tool_call>NAME<arg_key>K</arg_key><arg_value>V</arg_value></tool_call>` (GLM 4.5+).
    Glm,
    /// `<|tool_calls_section_begin|><|tool_call_begin|>functions.NAME:0...` (Kimi K2).
    Kimi,
    /// `<|channel|>commentary to=functions.NAME ...<|message|>{...}<|call|>` (gpt-oss Harmony).
    Harmony,
    /// `<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>...` (DeepSeek V3, V3.1, R1).
    DeepSeek,
    /// `<|tool_call>call:NAME{...}<tool_call|>` (Gemma 4).
    Gemma,
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
            Format::Xml => "xml",
            Format::Glm => "glm",
            Format::Kimi => "kimi",
            Format::Harmony => "harmony",
            Format::DeepSeek => "deepseek",
            Format::Gemma => "gemma",
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
    /// Whether the format wrote its argument values as text (XML parameters, GLM's values):
    /// [`typed`] reads them by the tool's schema.
    pub text_values: bool,
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
    /// The calls, in order (at least one, unless `broken`).
    pub calls: Vec<WrittenCall>,
    /// A call begun in a family's own tokens that was cut off or cannot be read: `calls` holds
    /// the names read (with no arguments), and nothing runs. Never an answer.
    pub broken: bool,
}

impl Written {
    /// The names the calls give, in order, each once.
    pub fn names(&self) -> Vec<String> {
        let mut names: Vec<String> = Vec::new();
        for call in &self.calls {
            if !call.name.is_empty() && !names.contains(&call.name) {
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
const MARKERS: [(&str, Format); 11] = [
    ("<tool_call>", Format::Hermes),
    ("[TOOL_CALLS]", Format::Mistral),
    ("<|python_tag|>", Format::PythonTag),
    ("<function=", Format::Xml),
    ("<|tool_calls_section_begin|>", Format::Kimi),
    ("<|tool_call_begin|>", Format::Kimi),
    ("<|channel|>", Format::Harmony),
    ("<|start|>", Format::Harmony),
    ("<｜tool▁calls▁begin｜>", Format::DeepSeek),
    ("<｜tool▁call▁begin｜>", Format::DeepSeek),
    ("<|tool_call>", Format::Gemma),
];

/// The ends of the reasoning blocks a call may follow (`<think>...</think>`, Mistral's
/// `[THINK]...[/THINK]`): a marker inside one is the model thinking, not calling.
const REASONING_ENDS: [&str; 2] = ["</think>", "[/THINK]"];

/// How many candidate starts of a bare JSON value are tried (from the end): bounds the work on
/// a long reply full of braces.
const MAX_CANDIDATES: usize = 16;

/// The calls `text` is, or ends with; `None` when it holds none. Linear in the text, but for at
/// most 16 parses of its tail (the candidate starts nearest its end).
pub fn find(text: &str) -> Option<Written> {
    let body = text.trim_end();
    if !body.contains(['{', '[', '<']) {
        return None;
    }
    // After a reasoning block, only what follows it can be calls.
    // (`contains` is a vectorised search, `rfind` is not: most replies have no reasoning.)
    if let Some(after) = REASONING_ENDS
        .iter()
        .filter(|end| body.contains(**end))
        .filter_map(|end| body.rfind(end).map(|at| at + end.len()))
        .max()
    {
        return after_reasoning(&body[after..]).map(|mut found| {
            found.start += after;
            found
        });
    }
    after_reasoning(body)
}

/// [`find`] on a text with no reasoning block.
fn after_reasoning(body: &str) -> Option<Written> {
    // A call followed by the tool's answer as the model imagines it (`<tool_response>...`, the
    // template's own tag): the call is what the reply ends with.
    if let Some(at) = body.find(IMAGINED)
        && at > 0
        && let Some(found) = ends_with_calls(body[..at].trim_end())
    {
        return Some(found);
    }
    ends_with_calls(body).or_else(|| {
        // A call followed only by a courteous closing ("Let me know if you need anything
        // else!", as seed 002's task asks every reply to end): the closing says nothing, the
        // call is what the reply does.
        let (before, last) = body.rsplit_once('\n')?;
        if !crate::answer::only_courtesy(last) {
            return None;
        }
        let before = before.trim_end();
        ends_with_calls(before).filter(|found| !found.broken)
    })
}

/// The tag of a tool's answer in Hermes/Qwen chat templates, which a small model sometimes
/// writes itself after its call.
const IMAGINED: &str = "<tool_response>";

/// [`find`] on a text without trailing white space: calls in a family's syntax, in Qwen's
/// `<tools>` tags, in fenced blocks or as bare JSON; else a broken call in a family's syntax.
fn ends_with_calls(body: &str) -> Option<Written> {
    let marked = marked(body);
    if let Some(Ok(found)) = marked {
        return Some(found);
    }
    let plain = in_tools_tags(body).or_else(|| {
        if body.ends_with("```") {
            fenced(body)
        } else if body.ends_with('}') || body.ends_with(']') {
            bare(body)
        } else {
            None
        }
    });
    plain.or_else(|| marked.and_then(Result::err))
}

/// Calls after a model's call marker: everything from the marker on must be calls. The first
/// and last place of each marker are tried, earliest first (a marker mentioned in prose before
/// a real call does not hide it); the first that reads as calls wins. `Err`: none did, and one
/// began a call in a family's own tokens that was cut off or cannot be read.
fn marked(body: &str) -> Option<Result<Written, Written>> {
    // One pass over the text: every marker opens with `<` or `[`, so only those bytes are tried.
    let mut first: [Option<usize>; MARKERS.len()] = [None; MARKERS.len()];
    let mut last: [Option<usize>; MARKERS.len()] = [None; MARKERS.len()];
    // (A single byte is searched with `memchr`, far faster than a set of characters.)
    for opening in ['<', '['] {
        for (at, _) in body.match_indices(opening) {
            let rest = &body[at..];
            // Most `<` and `[` of prose and code open no marker: their next byte tells.
            if !MARKERS
                .iter()
                .any(|(m, _)| rest.as_bytes().get(1) == m.as_bytes().get(1))
            {
                continue;
            }
            for (i, (marker, _)) in MARKERS.iter().enumerate() {
                if rest.starts_with(marker) {
                    first[i].get_or_insert(at);
                    last[i] = Some(at);
                }
            }
        }
    }
    let mut starts: Vec<(usize, Format)> = MARKERS
        .iter()
        .enumerate()
        .flat_map(|(i, &(_, format))| {
            [first[i], last[i]]
                .into_iter()
                .flatten()
                .map(move |at| (at, format))
        })
        .collect();
    if starts.is_empty() {
        return None;
    }
    starts.sort_by_key(|&(at, _)| at);
    starts.dedup_by_key(|&mut (at, _)| at);
    let mut broken = None;
    for (start, format) in starts {
        match read_marked(&body[start..], format) {
            Ok((format, calls)) => {
                return Some(Ok(Written {
                    start,
                    format,
                    calls,
                    broken: false,
                }));
            }
            // A broken call is one the reply ends on; a reply that ends with a sentence is
            // prose about the format (a truncated reply is already a no-op of its own).
            Err(families::Miss::Broken(names))
                if broken.is_none() && !body.ends_with(['.', '!', '?']) =>
            {
                broken = Some(Written {
                    start,
                    format,
                    calls: names
                        .into_iter()
                        .map(|name| WrittenCall {
                            name,
                            arguments: Value::Null,
                            text_values: false,
                        })
                        .collect(),
                    broken: true,
                });
            }
            Err(_) => {}
        }
    }
    broken.map(Err)
}

/// The calls `text` (which starts with `format`'s marker) is, in that family's syntax.
fn read_marked(text: &str, format: Format) -> Result<(Format, Vec<WrittenCall>), families::Miss> {
    use families::Miss;
    let calls = match format {
        Format::Hermes => return hermes(text),
        Format::Mistral => {
            let after = text
                .strip_prefix("[TOOL_CALLS]")
                .unwrap_or(text)
                .trim_start();
            if after.starts_with(['[', '{']) {
                stream(after).ok_or(Miss::NotCalls)?
            } else {
                families::mistral_args(text)?
            }
        }
        Format::PythonTag => {
            let after = text.strip_prefix("<|python_tag|>").unwrap_or(text);
            stream(after).ok_or(Miss::NotCalls)?
        }
        Format::Xml => {
            let mut calls = Vec::new();
            let mut rest = text;
            while !rest.trim().is_empty() {
                let (call, after) = families::function(rest.trim_start())?;
                calls.push(call);
                rest = after;
            }
            calls
        }
        Format::Kimi => families::kimi(text)?,
        Format::Harmony => families::harmony(text)?,
        Format::DeepSeek => families::deepseek(text)?,
        Format::Gemma => families::gemma(text)?,
        Format::Json | Format::Fenced | Format::Glm => return Err(Miss::NotCalls),
    };
    Ok((format, calls))
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
        broken: false,
    })
}

/// `<tool_call>...</tool_call>` blocks, one after another (the last closing tag may be missing:
/// a stop sequence can eat it). A block holds JSON (Hermes, Qwen2.5), Qwen3-Coder's
/// `<function=...>` XML or GLM's `NAME<arg_key>...`; the format is the first block's. A closing
/// tag inside a JSON string is passed over: the block ends at the first closing tag after which
/// its JSON reads whole.
fn hermes(mut rest: &str) -> Result<(Format, Vec<WrittenCall>), families::Miss> {
    use families::Miss;
    const OPEN: &str = "<tool_call>";
    const CLOSE: &str = "</tool_call>";
    let mut calls = Vec::new();
    let mut format = None;
    loop {
        rest = rest.trim_start();
        if rest.is_empty() {
            break;
        }
        rest = rest.strip_prefix(OPEN).ok_or(Miss::NotCalls)?;
        if rest.trim_start().starts_with(['{', '[']) {
            let mut read = None;
            let mut from = 0;
            while let Some(at) = rest[from..].find(CLOSE).map(|at| from + at) {
                if let Some(found) = stream(&rest[..at]) {
                    read = Some((found, &rest[at + CLOSE.len()..]));
                    break;
                }
                from = at + CLOSE.len();
            }
            let (found, after) = match read {
                Some(read) => read,
                None => match stream(rest) {
                    Some(found) => (found, ""),
                    None if !rest.contains(CLOSE) || rest.trim_end().ends_with(CLOSE) => {
                        let names = calls.iter().map(|c: &WrittenCall| c.name.clone());
                        return Err(Miss::Broken(names.collect()));
                    }
                    None => return Err(Miss::NotCalls),
                },
            };
            format.get_or_insert(Format::Hermes);
            calls.extend(found);
            rest = after;
            continue;
        }
        let (inner, after, closed) = match rest.find(CLOSE) {
            Some(at) => (&rest[..at], &rest[at + CLOSE.len()..], true),
            None => (rest, "", false),
        };
        let call = families::block(inner, closed).map_err(|miss| match miss {
            Miss::Broken(mut names) => {
                let mut all: Vec<String> = calls.iter().map(|c| c.name.clone()).collect();
                all.append(&mut names);
                Miss::Broken(all)
            }
            other => other,
        })?;
        format.get_or_insert(if inner.trim_start().starts_with("<function=") {
            Format::Xml
        } else {
            Format::Glm
        });
        calls.push(call);
        rest = after;
    }
    match format {
        Some(format) if !calls.is_empty() => Ok((format, calls)),
        _ => Err(Miss::NotCalls),
    }
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
            hermes(content).ok().map(|(_, calls)| calls)
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
        broken: false,
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
            broken: false,
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
    let arguments = families::arguments(
        object
            .remove("arguments")
            .or_else(|| object.remove("parameters"))?,
    );
    Some(WrittenCall {
        name,
        arguments,
        text_values: false,
    })
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
/// or under `off`, is left alone. A broken call (cut off, or unreadable in its family's tokens)
/// never runs. Values a format wrote as text stay strings: [`recover_typed`] types them.
pub fn recover(
    turn: &mut ModelTurn,
    offered: Option<&[&str]>,
    mode: TextToolCalls,
    ids: &str,
) -> Option<Recovery> {
    recover_typed(turn, offered, &[], mode, ids)
}

/// [`recover`], with the offered tools' JSON schemas (`(name, schema)`): a recovered call whose
/// format wrote its values as text (XML parameters, GLM) gets them typed by its tool's schema
/// ([`typed`]), as a correct engine would give them.
pub fn recover_typed(
    turn: &mut ModelTurn,
    offered: Option<&[&str]>,
    schemas: &[(&str, &Value)],
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
        && !written.broken
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
            .map(|(i, mut c)| {
                if c.text_values
                    && let Some((_, schema)) = schemas.iter().find(|(name, _)| *name == c.name)
                {
                    typed(&mut c.arguments, schema);
                }
                ToolCall::new(format!("{ids}{i}"), c.name, c.arguments)
            })
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
    fn every_marker_opens_with_a_byte_the_scan_tries() {
        assert!(MARKERS.iter().all(|(m, _)| m.starts_with(['<', '['])));
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
