//! The JSON wire types of the embedding contract: the events a host sends ([`EventIn`] and its
//! parts), the commands it is given ([`CommandOut`] and its parts), what handling an event did
//! ([`Handle`]), and the errors that name the JSON path at fault ([`InputError`]). Serde types
//! and their readers, no logic of the run.

use serde::{Deserialize, Deserializer, Serialize};
use serde_json::Value;
use std::fmt;
use terminus_kernel::{Finish, ModelErrorKind, Policy, PolicyError, Todo, ToolErrorKind, Usage};

/// An input the host gave that is not a valid event, policy or snapshot, with the JSON path at
/// fault (`event.model_turn.tool_calls[0].name`, `policy.max_stpes`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InputError {
    /// Where: the root's name (`event`, `policy`, `snapshot`) then the path inside it.
    pub path: String,
    /// What is wrong.
    pub message: String,
}

impl fmt::Display for InputError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.path, self.message)
    }
}

impl std::error::Error for InputError {}

impl InputError {
    /// The error `serde_path_to_error` gives, under `root`: `root.a.b[2]: message`. An unknown
    /// field reads `root.a.field: unknown field, expected one of ...`.
    pub fn from_serde<E: fmt::Display>(root: &str, error: &serde_path_to_error::Error<E>) -> Self {
        let inner = error.inner().to_string();
        let path = error.path().to_string();
        let path = if path == "." {
            root.to_owned()
        } else {
            format!("{root}.{path}")
        };
        // serde says "unknown field `x`, expected ...": the path already names the field.
        let message = match inner.strip_prefix("unknown field `") {
            Some(rest) => match rest.split_once('`') {
                Some((_, tail)) => format!("unknown field{tail}"),
                None => inner,
            },
            None => inner,
        };
        InputError { path, message }
    }

    /// The error `message` at `path`.
    pub fn at(path: impl Into<String>, message: impl Into<String>) -> Self {
        InputError {
            path: path.into(),
            message: message.into(),
        }
    }
}

impl From<PolicyError> for InputError {
    fn from(e: PolicyError) -> Self {
        InputError {
            path: format!("policy.{}", e.field),
            message: e.problem,
        }
    }
}

/// Reads a policy from JSON text, every error naming its field (`policy.max_stpes: unknown
/// field, ...`), and checks that the kernel can run it.
pub fn policy_from_json(json: &str) -> Result<Policy, InputError> {
    let de = &mut serde_json::Deserializer::from_str(json);
    let policy: Policy =
        serde_path_to_error::deserialize(de).map_err(|e| InputError::from_serde("policy", &e))?;
    policy.validate()?;
    Ok(policy)
}

/// One event, as the host sends it.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
pub enum EventIn {
    /// The model answered.
    ModelTurn(TurnIn),
    /// The model call failed.
    ModelError(ModelErrorIn),
    /// The results of the calls of the last `run_tools`, any order.
    ToolResults(Vec<ResultIn>),
    /// The verifier's verdict on the last `verify`.
    Verdict(VerdictIn),
    /// A clock reading: milliseconds since the run started.
    Tick(u64),
    /// The host's kill switch (`true`).
    Cancel(bool),
}

/// A model turn.
#[derive(Debug, Clone, PartialEq, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TurnIn {
    /// The visible content.
    #[serde(default)]
    pub text: Option<String>,
    /// Tool calls.
    #[serde(default)]
    pub tool_calls: Option<Vec<CallIn>>,
    /// Tri-state: true, false or absent (`None` is absent).
    #[serde(default)]
    pub needs_more_work: Option<bool>,
    /// Reported usage; absent means unknown, not zero.
    #[serde(default)]
    pub usage: Option<Usage>,
    /// Why generation stopped (`stop`, `length`, `content_filter`, `tool_calls`, `repetition`).
    #[serde(default)]
    pub finish: Option<Finish>,
    /// The model produced reasoning output.
    #[serde(default)]
    pub reasoning: Option<bool>,
    /// The tools offered with the call this turn answers, each a name or `{"name", "parameters"}`
    /// (its arguments' JSON Schema): a tool call the model wrote in its text runs when it names
    /// one of them (`policy.text_tool_calls`), its values a format writes as text (XML
    /// parameters) typed by that schema. Absent: the host did not say, and a written call of any
    /// name runs, its values as written.
    #[serde(default)]
    pub tools: Option<Vec<Offered>>,
}

/// A tool offered with a model call: its name and, when the host has it, the JSON Schema of its
/// arguments. On the wire a name alone (`"read_file"`) or `{"name": ..., "parameters": {...}}`.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Offered {
    /// The tool's name.
    pub name: String,
    /// The JSON Schema of its arguments (`None`: not given; values stay as written).
    pub parameters: Option<Value>,
}

impl Offered {
    /// A tool known by name only.
    pub fn named(name: impl Into<String>) -> Self {
        Offered {
            name: name.into(),
            parameters: None,
        }
    }

    /// The names of `offered`, in order.
    pub fn names(offered: &[Offered]) -> Vec<&str> {
        offered.iter().map(|o| o.name.as_str()).collect()
    }

    /// The `(name, schema)` pairs of the tools of `offered` that have a schema.
    pub fn schemas(offered: &[Offered]) -> Vec<(&str, &Value)> {
        offered
            .iter()
            .filter_map(|o| Some((o.name.as_str(), o.parameters.as_ref()?)))
            .collect()
    }
}

impl<'de> Deserialize<'de> for Offered {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        /// The object form; unknown keys are refused like everywhere in the vocabulary.
        #[derive(Deserialize)]
        #[serde(deny_unknown_fields)]
        struct Spec {
            name: String,
            #[serde(default)]
            parameters: Option<Value>,
        }
        match Value::deserialize(deserializer)? {
            Value::String(name) => Ok(Offered::named(name)),
            value @ Value::Object(_) => {
                // Inside a `Value` the path ends at the entry: the message names the field.
                let spec = Spec::deserialize(value)
                    .map_err(|e| serde::de::Error::custom(format!("an offered tool: {e}")))?;
                match spec.parameters {
                    None | Some(Value::Object(_)) => Ok(Offered {
                        name: spec.name,
                        parameters: spec.parameters,
                    }),
                    Some(_) => Err(serde::de::Error::custom(
                        "`parameters` is not a JSON Schema object",
                    )),
                }
            }
            _ => Err(serde::de::Error::custom(
                "expected a tool's name or {\"name\", \"parameters\"}",
            )),
        }
    }
}

/// One tool call of a turn.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CallIn {
    /// The provider's call id (default `call-{model call}-{index}`, as the scripted model).
    #[serde(default)]
    pub id: Option<String>,
    /// The tool.
    pub name: String,
    /// The arguments (default `{}`).
    #[serde(default)]
    pub arguments: Option<Value>,
}

/// A failed model call.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ModelErrorIn {
    /// The class.
    pub kind: ModelErrorKind,
    /// The delay the provider asked for.
    #[serde(default)]
    pub retry_after_ms: Option<u64>,
}

/// One tool result: `ok` (any JSON, `null` included) or `error` with a `message`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ResultIn {
    /// The id of the call it answers.
    pub call_id: String,
    /// The tool.
    pub name: String,
    /// A success with this output.
    #[serde(default, deserialize_with = "present")]
    pub ok: Option<Value>,
    /// A failure of this class.
    #[serde(default)]
    pub error: Option<ToolErrorKind>,
    /// With `error`: the message for the model.
    #[serde(default)]
    pub message: Option<String>,
}

/// A field that is present is `Some`, even when its value is `null`.
fn present<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Option<Value>, D::Error> {
    Value::deserialize(deserializer).map(Some)
}

/// A verdict.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct VerdictIn {
    /// Whether the task is complete.
    pub complete: bool,
    /// What is missing, in the verifier's words (one item).
    #[serde(default)]
    pub feedback: Option<String>,
    /// What is missing, item by item (the scenario format's `missing`).
    #[serde(default)]
    pub missing: Option<Vec<String>>,
}

/// A verifier's answer as a framework adapter passes it on, unchanged: `true` or `false` (no
/// feedback), a `[complete, feedback]` pair, or a [`VerdictIn`] object (its errors name their path
/// under `root`). The adapters' verifiers answer in these forms; the core reads them once.
pub fn verdict_of(answer: Value, root: &str) -> Result<VerdictIn, InputError> {
    let verdict = |complete, feedback: &str| VerdictIn {
        complete,
        feedback: Some(feedback.to_owned()),
        missing: None,
    };
    match answer {
        Value::Bool(complete) => Ok(verdict(complete, "")),
        Value::Array(pair) => match pair.as_slice() {
            [Value::Bool(complete), Value::String(feedback)] => Ok(verdict(*complete, feedback)),
            _ => Err(InputError::at(
                root,
                format!(
                    "expected a boolean, a [boolean, string] pair or a verdict object, got {}",
                    Value::Array(pair)
                ),
            )),
        },
        object @ Value::Object(_) => {
            serde_path_to_error::deserialize(object).map_err(|e| InputError::from_serde(root, &e))
        }
        other => Err(InputError::at(
            root,
            format!(
                "expected a boolean, a [boolean, string] pair or a verdict object, got {other}"
            ),
        )),
    }
}

impl EventIn {
    /// Reads an event from JSON text; errors name the JSON path (`event.model_turn.text: ...`).
    pub fn from_json(json: &str) -> Result<EventIn, InputError> {
        let de = &mut serde_json::Deserializer::from_str(json);
        serde_path_to_error::deserialize(de).map_err(|e| InputError::from_serde("event", &e))
    }
}

/// A tool call to run, or refused, as the host is given it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CallOut {
    /// The call id (answer with it as `call_id`).
    pub id: String,
    /// The tool.
    pub name: String,
    /// The arguments.
    pub arguments: Value,
}

/// A call the kernel refused: the host gives the model `text` as its result and does not send
/// it back in `tool_results`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RefusedOut {
    /// The call id.
    pub id: String,
    /// The tool.
    pub name: String,
    /// The arguments.
    pub arguments: Value,
    /// What the model is told instead of a result.
    pub text: String,
}

/// A budget warning to append to the result of call `id` as the model sees it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct WarningOut {
    /// The call id.
    pub id: String,
    /// The text to append.
    pub text: String,
}

/// One command for the host, in the contract's JSON (`{"command": "call_model", ...}`).
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "command", rename_all = "snake_case")]
pub enum CommandOut {
    /// Call the model after `delay_ms` (backoff); `tools: false` is the final-answer call.
    CallModel {
        /// Wait this long first.
        delay_ms: u64,
        /// Whether the model may call tools.
        tools: bool,
    },
    /// Run these calls; answer with `tool_results`.
    RunTools {
        /// The calls to run, in order.
        calls: Vec<CallOut>,
        /// Calls not to run (their tool is excluded), each with the text the model gets.
        #[serde(skip_serializing_if = "Vec::is_empty")]
        refused: Vec<RefusedOut>,
        /// Budget warnings for the model, appended to the named calls' results.
        #[serde(skip_serializing_if = "Vec::is_empty")]
        warnings: Vec<WarningOut>,
        /// Present when the model wrote these calls in its reply's text (recovered, see
        /// `policy.text_tool_calls`): the reply without them. A framework that runs the calls
        /// of the reply message gives that message this text and these calls.
        #[serde(skip_serializing_if = "Option::is_none")]
        written: Option<String>,
    },
    /// Ask the verifier; answer with `verdict`.
    Verify {
        /// The model's completion claim.
        claim: String,
        /// The todo list the kernel tracks.
        todos: Vec<Todo>,
        /// What the rules say is still missing (open todos, required tools that never
        /// succeeded, the output schema's first error): the rule verifier's verdict is
        /// `complete` when it is empty.
        missing: Vec<String>,
    },
    /// Add `text` to the conversation (a user message) before the next model call.
    Nudge {
        /// The kernel's guidance.
        text: String,
    },
    /// Add `text` to the conversation before the next model call.
    Notice {
        /// The kernel's message.
        text: String,
    },
    /// Write a checkpoint for the agent (`policy.auto_checkpoints`) before the next model call:
    /// ask the model with `prompt` (no tools) for a summary of the findings so far, then add
    /// `note`, a blank line and that summary to the conversation (a user message). The kernel has
    /// counted it and reset the budgets it `lifted`; nothing answers it.
    Checkpoint {
        /// What to ask the model.
        prompt: String,
        /// The kernel's words before the summary.
        note: String,
        /// The tools whose budgets blocked them in two turns since their last reset.
        blocked: Vec<String>,
        /// The budgets it reset.
        lifted: Vec<String>,
    },
    /// The run ended.
    Stop {
        /// The report (the fields of `terminus run --json`, without the execution id).
        report: Value,
    },
}

/// What [`Host::handle`](super::Host::handle) did with an event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Handle {
    /// A transition: commands are waiting.
    Step,
    /// Observed, not a step (a clock reading before the deadline).
    Observed,
    /// The kernel ignored it in its state (counted in `ignored_events`).
    Ignored,
}

impl Handle {
    /// `step`, `observed` or `ignored`.
    pub const fn as_str(self) -> &'static str {
        match self {
            Handle::Step => "step",
            Handle::Observed => "observed",
            Handle::Ignored => "ignored",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_name_the_json_path() {
        let e = policy_from_json(r#"{"max_stpes": 3}"#).expect_err("unknown field");
        assert!(
            e.to_string()
                .starts_with("policy.max_stpes: unknown field, expected one of")
        );
        let e = policy_from_json(r#"{"max_steps": 0}"#).expect_err("zero steps");
        assert_eq!(e.to_string(), "policy.max_steps: must be at least 1, got 0");
        let e = EventIn::from_json(r#"{"model_turn": {"tool_calls": [{"id": "a"}]}}"#)
            .expect_err("no name");
        assert!(
            e.to_string()
                .starts_with("event.model_turn.tool_calls[0]: missing field `name`"),
            "{e}"
        );
        let e = EventIn::from_json(r#"{"verdict": {"complete": "yes"}}"#).expect_err("a string");
        assert!(
            e.to_string()
                .starts_with("event.verdict.complete: invalid type")
        );
    }
}
