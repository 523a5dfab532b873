//! The call syntaxes of the model families whose written calls are not a JSON object with `name`
//! and `arguments` (`docs/design.md`, "Written tool calls, family by family"). Each reader takes
//! the text from the family's first marker on, and reads calls only if nothing but calls (in
//! that family's syntax) follows: a marker mentioned in prose, or followed by prose or code, is
//! not a call. A call begun in a family's own special tokens that is cut off or cannot be read
//! is [`Miss::Broken`]: never a call with guessed arguments, never an answer.

use super::WrittenCall;
use serde_json::{Map, Value};

/// Why a text, from a family's marker on, is not calls.
#[derive(Debug, Clone, PartialEq)]
pub(super) enum Miss {
    /// Prose, code or anything else follows, or the marker is only mentioned.
    NotCalls,
    /// A call begun in the family's syntax that was cut off or cannot be read; the names read
    /// so far.
    Broken(Vec<String>),
}

pub(super) type Parsed = Result<Vec<WrittenCall>, Miss>;

fn broken(calls: &[WrittenCall], name: Option<&str>) -> Miss {
    let mut names: Vec<String> = calls.iter().map(|c| c.name.clone()).collect();
    names.extend(name.filter(|n| !n.is_empty()).map(str::to_owned));
    Miss::Broken(names)
}

/// A tool name as the families write it: letters, digits, `_`, `-`, `.`, `/`.
pub(super) fn is_name(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 128
        && s.chars()
            .all(|c| c.is_alphanumeric() || matches!(c, '_' | '-' | '.' | '/'))
}

/// How a JSON value at the start of a text failed to read.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Cut {
    /// The text ended inside the value.
    Eof,
    /// Something else.
    Invalid,
}

/// One JSON value at the start of `text` (after white space) and the text after it.
fn json_prefix(text: &str) -> Result<(Value, &str), Cut> {
    let text = text.trim_start();
    if text.is_empty() {
        return Err(Cut::Eof);
    }
    let mut values = serde_json::Deserializer::from_str(text).into_iter::<Value>();
    match values.next() {
        Some(Ok(value)) => Ok((value, &text[values.byte_offset()..])),
        Some(Err(e)) if e.is_eof() => Err(Cut::Eof),
        _ => Err(Cut::Invalid),
    }
}

/// Arguments as a call writes them in JSON: a string holding a JSON object is that object, and
/// `null` is no arguments.
pub(super) fn arguments(value: Value) -> Value {
    match value {
        Value::String(text) => match serde_json::from_str::<Value>(&text) {
            Ok(value @ Value::Object(_)) => value,
            _ => Value::String(text),
        },
        Value::Null => Value::Object(Map::new()),
        other => other,
    }
}

/// A call from a name and arguments written as JSON (an object, or a string holding one).
fn json_call(name: &str, value: Value) -> WrittenCall {
    WrittenCall {
        name: name.to_owned(),
        arguments: arguments(value),
        text_values: false,
    }
}

/// Mistral v11 and later: `[TOOL_CALLS]NAME[ARGS]{...}`, one after another, with an optional
/// `[CALL_ID]id` before `[ARGS]`. `text` starts at the first `[TOOL_CALLS]`.
pub(super) fn mistral_args(text: &str) -> Parsed {
    const CALLS: &str = "[TOOL_CALLS]";
    const ARGS: &str = "[ARGS]";
    const ID: &str = "[CALL_ID]";
    let mut calls = Vec::new();
    let mut rest = text;
    loop {
        rest = rest.trim_start();
        if rest.is_empty() || rest == "</s>" {
            break;
        }
        rest = rest.strip_prefix(CALLS).ok_or(Miss::NotCalls)?;
        let Some(at) = rest.find(ARGS) else {
            // Cut off before its arguments, or prose after the marker.
            let head = rest.split(ID).next().unwrap_or_default().trim();
            return Err(if is_name(head) && !rest.contains(char::is_whitespace) {
                broken(&calls, Some(head))
            } else {
                Miss::NotCalls
            });
        };
        let name = rest[..at].split(ID).next().unwrap_or_default().trim();
        if !is_name(name) {
            return Err(Miss::NotCalls);
        }
        match json_prefix(&rest[at + ARGS.len()..]) {
            Ok((arguments, after)) => {
                calls.push(json_call(name, arguments));
                rest = after;
            }
            Err(_) => return Err(broken(&calls, Some(name))),
        }
    }
    (!calls.is_empty()).then_some(calls).ok_or(Miss::NotCalls)
}

/// The inside of one `<tool_call>` block that is not JSON: Qwen3-Coder's
/// `<function=NAME><parameter=K>V</parameter>...</function>`, or GLM 4.5's
/// `NAME<arg_key>K</arg_key><arg_value>V</arg_value>...` (older GLM: `NAME` then a JSON object).
/// `closed`: whether the block's closing tag was found (else the text ended inside it).
pub(super) fn block(inner: &str, closed: bool) -> Result<WrittenCall, Miss> {
    let inner = inner.trim();
    if inner.starts_with("<function=") {
        return match function(inner)? {
            (call, "") => Ok(call),
            (call, _) if !closed => Err(broken(&[], Some(&call.name))),
            _ => Err(Miss::NotCalls),
        };
    }
    glm(inner, closed)
}

/// `<function=NAME>` then parameters (or a JSON object, Llama 3.1's shape) and `</function>`;
/// returns the call and the text after it.
pub(super) fn function(text: &str) -> Result<(WrittenCall, &str), Miss> {
    const CLOSE: &str = "</function>";
    let rest = text.strip_prefix("<function=").ok_or(Miss::NotCalls)?;
    let Some((name, mut rest)) = rest.split_once('>') else {
        return Err(Miss::NotCalls);
    };
    let name = name.trim();
    if !is_name(name) {
        return Err(Miss::NotCalls);
    }
    let cut = || Miss::Broken(vec![name.to_owned()]);
    if rest.trim_start().starts_with('{') {
        let (arguments, after) = json_prefix(rest).map_err(|_| cut())?;
        let after = after.trim_start();
        let after = match after.strip_prefix(CLOSE) {
            Some(after) => after,
            None if after.is_empty() => after,
            None => return Err(Miss::NotCalls),
        };
        return Ok((json_call(name, arguments), after));
    }
    let mut arguments = Map::new();
    loop {
        rest = rest.trim_start();
        if let Some(after) = rest.strip_prefix(CLOSE) {
            let call = WrittenCall {
                name: name.to_owned(),
                arguments: Value::Object(arguments),
                text_values: true,
            };
            return Ok((call, after));
        }
        if rest.is_empty() {
            return Err(cut());
        }
        let Some(param) = rest.strip_prefix("<parameter=") else {
            return Err(Miss::NotCalls);
        };
        let Some((key, value)) = param.split_once('>') else {
            return Err(cut());
        };
        let Some(end) = value.find("</parameter>") else {
            return Err(cut());
        };
        arguments.insert(
            key.trim().to_owned(),
            Value::String(one_line_break_off(&value[..end]).to_owned()),
        );
        rest = &value[end + "</parameter>".len()..];
    }
}

/// A value as the XML families write it: on lines of its own, so one line break is dropped on
/// each side (and nothing more: the value's own white space is kept).
fn one_line_break_off(value: &str) -> &str {
    let value = value
        .strip_prefix("\r\n")
        .or_else(|| value.strip_prefix('\n'))
        .unwrap_or(value);
    value
        .strip_suffix("\r\n")
        .or_else(|| value.strip_suffix('\n'))
        .unwrap_or(value)
}

/// GLM: `NAME` then `<arg_key>K</arg_key><arg_value>V</arg_value>` pairs, or a JSON object.
fn glm(inner: &str, closed: bool) -> Result<WrittenCall, Miss> {
    let end = inner.find(['<', '{', '\n']).unwrap_or(inner.len());
    let name = inner[..end].trim();
    if !is_name(name) {
        return Err(Miss::NotCalls);
    }
    let mut rest = inner[end..].trim_start();
    if rest.starts_with('{') {
        return match json_prefix(rest) {
            Ok((arguments, "")) => Ok(json_call(name, arguments)),
            Ok(_) => Err(Miss::NotCalls),
            Err(_) => Err(Miss::Broken(vec![name.to_owned()])),
        };
    }
    if rest.is_empty() && !closed {
        // A bare word cut off in a block that never closed: a call begun.
        return Err(Miss::Broken(vec![name.to_owned()]));
    }
    let mut arguments = Map::new();
    let cut = || Miss::Broken(vec![name.to_owned()]);
    // The text ended part-way into a tag: cut off.
    let cut_in = |rest: &str, tag: &str| {
        if tag.starts_with(rest) {
            cut()
        } else {
            Miss::NotCalls
        }
    };
    while !rest.is_empty() {
        let Some(key) = rest.strip_prefix("<arg_key>") else {
            return Err(cut_in(rest, "<arg_key>"));
        };
        let (key, after) = key.split_once("</arg_key>").ok_or_else(cut)?;
        let value = after.trim_start();
        let Some(value) = value.strip_prefix("<arg_value>") else {
            return Err(cut_in(value, "<arg_value>"));
        };
        let (value, after) = value.split_once("</arg_value>").ok_or_else(cut)?;
        arguments.insert(key.trim().to_owned(), Value::String(value.to_owned()));
        rest = after.trim_start();
    }
    Ok(WrittenCall {
        name: name.to_owned(),
        arguments: Value::Object(arguments),
        text_values: true,
    })
}

/// Kimi K2: `<|tool_calls_section_begin|>` then `<|tool_call_begin|>functions.NAME:0
/// <|tool_call_argument_begin|>{...}<|tool_call_end|>` blocks, then
/// `<|tool_calls_section_end|>` (either end may be missing: a stop token can eat it).
pub(super) fn kimi(text: &str) -> Parsed {
    const SECTION: &str = "<|tool_calls_section_begin|>";
    const SECTION_END: &str = "<|tool_calls_section_end|>";
    const BEGIN: &str = "<|tool_call_begin|>";
    const ARGUMENTS: &str = "<|tool_call_argument_begin|>";
    const END: &str = "<|tool_call_end|>";
    let mut rest = text.strip_prefix(SECTION).unwrap_or(text);
    let mut calls = Vec::new();
    loop {
        rest = rest.trim_start();
        if rest.is_empty() {
            break;
        }
        if let Some(after) = rest.strip_prefix(SECTION_END) {
            if !after.trim().is_empty() {
                return Err(Miss::NotCalls);
            }
            break;
        }
        rest = rest.strip_prefix(BEGIN).ok_or(Miss::NotCalls)?;
        let Some((id, arguments)) = rest.split_once(ARGUMENTS) else {
            return Err(broken(&calls, None));
        };
        let id = id.trim();
        let id = id.strip_prefix("functions.").unwrap_or(id);
        let name = id
            .rsplit_once(':')
            .filter(|(_, n)| n.chars().all(|c| c.is_ascii_digit()))
            .map_or(id, |(name, _)| name);
        if !is_name(name) {
            return Err(broken(&calls, None));
        }
        let (value, after) = json_prefix(arguments).map_err(|_| broken(&calls, Some(name)))?;
        calls.push(json_call(name, value));
        let after = after.trim_start();
        rest = after.strip_prefix(END).unwrap_or(after);
    }
    (!calls.is_empty()).then_some(calls).ok_or(Miss::NotCalls)
}

/// DeepSeek V3 and R1 (`<｜tool▁call▁begin｜>function<｜tool▁sep｜>NAME` then a fenced JSON
/// block) and V3.1 (`<｜tool▁call▁begin｜>NAME<｜tool▁sep｜>{...}`), inside
/// `<｜tool▁calls▁begin｜>` ... `<｜tool▁calls▁end｜>`.
pub(super) fn deepseek(text: &str) -> Parsed {
    const CALLS: &str = "<｜tool▁calls▁begin｜>";
    const CALLS_END: &str = "<｜tool▁calls▁end｜>";
    const BEGIN: &str = "<｜tool▁call▁begin｜>";
    const SEP: &str = "<｜tool▁sep｜>";
    const END: &str = "<｜tool▁call▁end｜>";
    let mut rest = text.strip_prefix(CALLS).unwrap_or(text);
    let mut calls = Vec::new();
    loop {
        rest = rest.trim_start();
        if rest.is_empty() {
            break;
        }
        if let Some(after) = rest.strip_prefix(CALLS_END) {
            if !after.trim().is_empty() && after.trim() != "<｜end▁of▁sentence｜>" {
                return Err(Miss::NotCalls);
            }
            break;
        }
        rest = rest.strip_prefix(BEGIN).ok_or(Miss::NotCalls)?;
        let Some((kind, body)) = rest.split_once(SEP) else {
            return Err(broken(&calls, None));
        };
        let (name, read) = if kind.trim() == "function" {
            // V3/R1: the name on the separator's line, the arguments in a fenced block.
            let (name, fenced) = body.split_once('\n').unwrap_or((body, ""));
            let fenced = fenced.trim_start();
            let inner = fenced
                .strip_prefix("```json")
                .or_else(|| fenced.strip_prefix("```"))
                .unwrap_or(fenced);
            let read = json_prefix(inner).and_then(|(value, after)| {
                let after = after.trim_start();
                match after.strip_prefix("```") {
                    Some(after) => Ok((value, after)),
                    None if after.is_empty() => Ok((value, after)),
                    None => Err(Cut::Invalid),
                }
            });
            (name.trim(), read)
        } else {
            (kind.trim(), json_prefix(body))
        };
        if !is_name(name) {
            return Err(broken(&calls, None));
        }
        let (value, after) = read.map_err(|_| broken(&calls, Some(name)))?;
        calls.push(json_call(name, value));
        let after = after.trim_start();
        rest = match after.strip_prefix(END) {
            Some(after) => after,
            None if after.is_empty() || after.starts_with(CALLS_END) => after,
            None => return Err(Miss::NotCalls),
        };
    }
    (!calls.is_empty()).then_some(calls).ok_or(Miss::NotCalls)
}

/// gpt-oss Harmony: messages `<|start|>ROLE HEADER<|message|>BODY` ended by `<|end|>`,
/// `<|call|>` or `<|return|>`; a call is a message whose header names a recipient
/// (`to=functions.NAME`, after the channel or in the role header) with JSON for its body.
/// Messages on the `analysis` channel are reasoning; any other message (a `final` answer) makes
/// the text not calls.
pub(super) fn harmony(text: &str) -> Parsed {
    const MESSAGE: &str = "<|message|>";
    let mut rest = text;
    let mut calls = Vec::new();
    loop {
        rest = rest.trim_start();
        if rest.is_empty() {
            break;
        }
        let header_start = rest.strip_prefix("<|start|>").unwrap_or(rest);
        let Some((header, body)) = header_start.split_once(MESSAGE) else {
            return Err(match recipient(header_start) {
                Some(name) => broken(&calls, Some(name)),
                None => Miss::NotCalls,
            });
        };
        if !header.contains("<|channel|>") && !header.contains("to=") {
            return Err(Miss::NotCalls);
        }
        const ENDS: [&str; 3] = ["<|end|>", "<|call|>", "<|return|>"];
        let after = match recipient(header) {
            Some(name) => {
                // The JSON is read first: an end token inside one of its strings is text.
                let (arguments, tail) =
                    json_prefix(body).map_err(|_| broken(&calls, Some(name)))?;
                let tail = tail.trim_start();
                let after = ENDS.iter().find_map(|t| tail.strip_prefix(t));
                let after = match after {
                    Some(after) => after,
                    None if tail.is_empty() => tail,
                    None => return Err(broken(&calls, Some(name))),
                };
                calls.push(json_call(name, arguments));
                after
            }
            None if channel(header) == Some("analysis") => {
                match ENDS
                    .iter()
                    .filter_map(|t| body.find(t).map(|at| at + t.len()))
                    .min()
                {
                    Some(end) => &body[end..],
                    // Reasoning that never ended: no call after it.
                    None => return Err(Miss::NotCalls),
                }
            }
            None => return Err(Miss::NotCalls),
        };
        rest = after;
    }
    (!calls.is_empty()).then_some(calls).ok_or(Miss::NotCalls)
}

/// The tool a Harmony header addresses (`to=functions.NAME`, or `to=NAME`).
fn recipient(header: &str) -> Option<&str> {
    let at = header.find("to=")?;
    let to = &header[at + 3..];
    let end = to
        .find(|c: char| c.is_whitespace() || c == '<')
        .unwrap_or(to.len());
    let name = &to[..end];
    let name = name.strip_prefix("functions.").unwrap_or(name);
    is_name(name).then_some(name)
}

/// The channel a Harmony header names.
fn channel(header: &str) -> Option<&str> {
    let at = header.find("<|channel|>")?;
    let rest = &header[at + "<|channel|>".len()..];
    rest.split(|c: char| c.is_whitespace() || c == '<').next()
}

/// Gemma 4: `<|tool_call>call:NAME{key:value,...}<tool_call|>`, one after another; keys bare,
/// strings between `<|"|>` quotes (or JSON's), numbers, booleans, lists and objects as written.
pub(super) fn gemma(text: &str) -> Parsed {
    const OPEN: &str = "<|tool_call>";
    const CLOSE: &str = "<tool_call|>";
    let mut rest = text;
    let mut calls = Vec::new();
    loop {
        rest = rest.trim_start();
        if rest.is_empty() {
            break;
        }
        rest = rest.strip_prefix(OPEN).ok_or(Miss::NotCalls)?;
        let Some(call) = rest.trim_start().strip_prefix("call:") else {
            return Err(if rest.trim().is_empty() {
                broken(&calls, None)
            } else {
                Miss::NotCalls
            });
        };
        let Some(open) = call.find('{') else {
            return Err(broken(&calls, Some(call.trim())));
        };
        let name = call[..open].trim();
        if !is_name(name) {
            return Err(Miss::NotCalls);
        }
        let mut reader = Gemma {
            text: &call[open..],
        };
        let arguments = reader.value(0).map_err(|_| broken(&calls, Some(name)))?;
        if !arguments.is_object() {
            return Err(broken(&calls, Some(name)));
        }
        calls.push(WrittenCall {
            name: name.to_owned(),
            arguments,
            text_values: false,
        });
        let after = reader.text.trim_start();
        rest = match after.strip_prefix(CLOSE) {
            Some(after) => after,
            None if after.is_empty() => after,
            None => return Err(Miss::NotCalls),
        };
    }
    (!calls.is_empty()).then_some(calls).ok_or(Miss::NotCalls)
}

/// A reader of Gemma's argument syntax.
struct Gemma<'a> {
    text: &'a str,
}

/// The deepest nesting read (a bound on the recursion).
const MAX_DEPTH: usize = 64;

impl Gemma<'_> {
    const QUOTE: &'static str = "<|\"|>";

    fn skip(&mut self) {
        self.text = self.text.trim_start();
    }

    fn eat(&mut self, c: char) -> bool {
        self.skip();
        match self.text.strip_prefix(c) {
            Some(rest) => {
                self.text = rest;
                true
            }
            None => false,
        }
    }

    fn value(&mut self, depth: usize) -> Result<Value, Cut> {
        if depth > MAX_DEPTH {
            return Err(Cut::Invalid);
        }
        self.skip();
        if self.text.is_empty() {
            return Err(Cut::Eof);
        }
        if let Some(rest) = self.text.strip_prefix(Self::QUOTE) {
            let end = rest.find(Self::QUOTE).ok_or(Cut::Eof)?;
            self.text = &rest[end + Self::QUOTE.len()..];
            return Ok(Value::String(rest[..end].to_owned()));
        }
        if self.eat('{') {
            let mut object = Map::new();
            if self.eat('}') {
                return Ok(Value::Object(object));
            }
            loop {
                let key = self.key()?;
                if !self.eat(':') {
                    return Err(self.cut());
                }
                let value = self.value(depth + 1)?;
                object.insert(key, value);
                if self.eat('}') {
                    return Ok(Value::Object(object));
                }
                if !self.eat(',') {
                    return Err(self.cut());
                }
            }
        }
        if self.eat('[') {
            let mut items = Vec::new();
            if self.eat(']') {
                return Ok(Value::Array(items));
            }
            loop {
                items.push(self.value(depth + 1)?);
                if self.eat(']') {
                    return Ok(Value::Array(items));
                }
                if !self.eat(',') {
                    return Err(self.cut());
                }
            }
        }
        if self.text.starts_with('"') {
            let (value, rest) = json_prefix(self.text)?;
            self.text = rest;
            return Ok(value);
        }
        // A number, `true`, `false` or `null`: up to the next delimiter.
        let end = self
            .text
            .find([',', '}', ']', '<'])
            .unwrap_or(self.text.len());
        let word = self.text[..end].trim();
        self.text = &self.text[end..];
        match serde_json::from_str::<Value>(word) {
            Ok(value @ (Value::Number(_) | Value::Bool(_) | Value::Null)) => Ok(value),
            _ if self.text.is_empty() => Err(Cut::Eof),
            _ => Err(Cut::Invalid),
        }
    }

    fn key(&mut self) -> Result<String, Cut> {
        self.skip();
        if self.text.starts_with(Self::QUOTE) || self.text.starts_with('"') {
            return match self.value(0)? {
                Value::String(key) => Ok(key),
                _ => Err(Cut::Invalid),
            };
        }
        let end = self.text.find(':').ok_or(self.cut())?;
        let key = self.text[..end].trim();
        if !is_name(key) {
            return Err(Cut::Invalid);
        }
        self.text = &self.text[end..];
        Ok(key.to_owned())
    }

    fn cut(&self) -> Cut {
        if self.text.trim().is_empty() {
            Cut::Eof
        } else {
            Cut::Invalid
        }
    }
}

/// Types the values a family wrote as text (XML parameters, GLM's argument values) from the
/// tool's JSON schema, as a correct engine would: a property the schema types as a number,
/// integer, boolean, object, array or null is read as that when its text is one; a string
/// property, a property the schema does not type, and a text that is not the typed value stay
/// strings.
pub fn typed(arguments: &mut Value, schema: &Value) {
    let (Value::Object(arguments), Some(Value::Object(properties))) =
        (arguments, schema.get("properties"))
    else {
        return;
    };
    for (key, value) in arguments.iter_mut() {
        let Value::String(text) = value else {
            continue;
        };
        let types: Vec<&str> = match properties.get(key).and_then(|p| p.get("type")) {
            Some(Value::String(t)) => vec![t.as_str()],
            Some(Value::Array(ts)) => ts.iter().filter_map(Value::as_str).collect(),
            _ => continue,
        };
        let trimmed = text.trim();
        let read = types.iter().find_map(|t| match *t {
            "integer" => serde_json::from_str::<Value>(trimmed)
                .ok()
                .filter(|v| v.is_i64() || v.is_u64()),
            "number" => serde_json::from_str::<Value>(trimmed)
                .ok()
                .filter(Value::is_number),
            "boolean" => match trimmed.to_ascii_lowercase().as_str() {
                "true" => Some(Value::Bool(true)),
                "false" => Some(Value::Bool(false)),
                _ => None,
            },
            "object" => serde_json::from_str::<Value>(trimmed)
                .ok()
                .filter(Value::is_object),
            "array" => serde_json::from_str::<Value>(trimmed)
                .ok()
                .filter(Value::is_array),
            "null" if matches!(trimmed, "null" | "None") => Some(Value::Null),
            _ => None,
        });
        // A schema that also allows a string keeps the text unless it is the null it allows.
        let keeps_string = types.contains(&"string") && !matches!(read, Some(Value::Null));
        if let Some(read) = read.filter(|_| !keeps_string) {
            *value = read;
        }
    }
}
