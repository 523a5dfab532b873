//! The scenario file format (`docs/design.md`, "Scenario files"; `spec/scenarios/README.md`).
//!
//! Every object rejects unknown fields. These types are what a file deserializes into;
//! [`crate::Scenario::parse`] then checks what serde cannot (a turn that is both a reply and an
//! error, an empty script that is meant to repeat, a policy the kernel refuses).

use crate::expect::Expect;
use serde::{Deserialize, Deserializer, Serialize};
use serde_json::Value;
use std::collections::BTreeMap;
use terminus_kernel::{Finish, ModelErrorKind, Policy, ToolErrorKind, Usage};

/// What happens when a script runs out.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Repeat {
    /// Running out is a scenario error (exit code 2, the message names the script).
    #[default]
    None,
    /// The last entry repeats forever.
    Last,
    /// The script starts over.
    Cycle,
}

impl Repeat {
    /// The JSON name.
    pub const fn as_str(self) -> &'static str {
        match self {
            Repeat::None => "none",
            Repeat::Last => "last",
            Repeat::Cycle => "cycle",
        }
    }
}

/// A whole scenario file.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ScenarioFile {
    /// The scenario's name (default: the file name without `.json`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// What the scenario shows, for people.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// The task given to the model.
    pub task: String,
    /// A system message before the task (a recording of a live agent keeps its prompt).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub system_prompt: Option<String>,
    /// The kernel policy; every field optional (defaults in `terminus_kernel::Policy`).
    #[serde(default)]
    pub policy: Policy,
    /// The task's size in units (the files in scope, say), for the policy's `budget_scale`:
    /// the run is created under the policy scaled for it. Absent: the policy as written (a
    /// `budget_scale` then runs at its base).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scale: Option<u64>,
    /// The model's script.
    pub model: ModelScript,
    /// The tools' scripts, by tool name. `write_todos` is built in and cannot be scripted.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub tools: BTreeMap<String, ToolScript>,
    /// The verifier's script. Without it, a policy with `verify_completion` uses the rule
    /// verifier (todos closed, `completion_requires` met).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub verifier: Option<VerifierScript>,
    /// How the model's view is kept inside its context window. Absent: the model is sent the
    /// whole conversation.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub context: Option<ContextSpec>,
    /// The host pulls the kill switch this many milliseconds after the run starts (the run
    /// ends `aborted (cancelled)` unless it stopped earlier). Absent: never.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cancel_after_ms: Option<u64>,
    /// What the run must end with, for the conformance suite and `terminus check`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expect: Option<Expect>,
}

impl ScenarioFile {
    /// Whether a scripted model turn or tool result pulls the run's kill switch (`"cancelled":
    /// true`): a host that keeps a switch of its own watches the scenario's only then.
    pub fn pulls_kill_switch(&self) -> bool {
        self.model.turns.iter().any(|t| t.cancelled == Some(true))
            || self
                .tools
                .values()
                .any(|t| t.results.iter().any(|r| r.cancelled == Some(true)))
    }
}

/// The scenario's context policy (`terminus_runtime::ContextPolicy`); every field but `window`
/// optional, with the defaults of `ContextPolicy::for_window`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ContextSpec {
    /// The model's context window, in tokens.
    pub window: u32,
    /// Tokens kept free for the reply (default an eighth of the window).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reserve: Option<u32>,
    /// Prune when the view would exceed this (default two thirds of the window).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prune_at: Option<u32>,
    /// Prune down to this where the rules allow (default half the window).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prune_to: Option<u32>,
    /// The longest a tool result may be in the view (default an eighth of the window, at
    /// least 128).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_tool_result_tokens: Option<u32>,
    /// Model turns at the end never pruned (default 2).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub keep_recent_turns: Option<u32>,
    /// The longest the system prompt may be in the view, in tokens; a longer one is cut to fit
    /// with the truncation marker (default: no limit).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_system_tokens: Option<u32>,
    /// `heuristic` (default: four characters a token), `o200k_base`, `cl100k_base`, or an
    /// OpenAI model name that selects one of them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tokenizer: Option<String>,
    /// Tools whose results stay in the view while it can hold them (the agent needs them
    /// whole: a spec, a plan). Each must name one of the run's tools.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub keep: Vec<String>,
    /// How a checkpoint is written for the agent when the kernel asks for one
    /// (`policy.auto_checkpoints` says how many a run may get). Default: the run's model, a reply
    /// of at most 400 tokens.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub auto_checkpoint: Option<AutoCheckpointSpec>,
}

/// `context.auto_checkpoint`: the model that writes a checkpoint for the agent and how long it
/// may be.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AutoCheckpointSpec {
    /// The model to ask, by name, on the run's model endpoint (default: the run's model).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    /// The longest reply, in tokens (default 400).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_tokens: Option<u32>,
}

impl ContextSpec {
    /// How the runtime writes a checkpoint for the agent.
    pub fn auto_checkpoint(&self) -> terminus_runtime::AutoCheckpoint {
        let d = terminus_runtime::AutoCheckpoint::default();
        match &self.auto_checkpoint {
            None => d,
            Some(spec) => terminus_runtime::AutoCheckpoint {
                model: spec.model.clone(),
                max_tokens: spec.max_tokens.unwrap_or(d.max_tokens),
            },
        }
    }

    /// Checks `auto_checkpoint` against the policy: the field at fault (below `context.`) and
    /// the problem.
    pub fn check_auto_checkpoint(
        &self,
        policy: &terminus_kernel::Policy,
    ) -> Result<(), (&'static str, String)> {
        let Some(spec) = &self.auto_checkpoint else {
            return Ok(());
        };
        if policy.auto_checkpoints == 0 {
            return Err((
                "auto_checkpoint",
                "policy.auto_checkpoints is 0, so no checkpoint is ever written: set it to the \
                 most checkpoints a run may get"
                    .into(),
            ));
        }
        if spec.model.as_deref().is_some_and(|m| m.trim().is_empty()) {
            return Err(("auto_checkpoint.model", "the model name is empty".into()));
        }
        if spec.max_tokens == Some(0) {
            return Err(("auto_checkpoint.max_tokens", "must be at least 1".into()));
        }
        Ok(())
    }

    /// The runtime's policy: the given fields over the defaults for the window.
    pub fn policy(&self) -> terminus_runtime::ContextPolicy {
        let d = terminus_runtime::ContextPolicy::for_window(self.window);
        terminus_runtime::ContextPolicy {
            window: self.window,
            reserve: self.reserve.unwrap_or(d.reserve),
            prune_at: self.prune_at.unwrap_or(d.prune_at),
            prune_to: self.prune_to.unwrap_or(d.prune_to),
            max_tool_result_tokens: self.max_tool_result_tokens.or(d.max_tool_result_tokens),
            keep_recent_turns: self.keep_recent_turns.unwrap_or(d.keep_recent_turns),
            max_system_tokens: self.max_system_tokens.or(d.max_system_tokens),
        }
    }

    /// The tokenizer's name (default `heuristic`).
    pub fn tokenizer_name(&self) -> &str {
        self.tokenizer.as_deref().unwrap_or("heuristic")
    }

    /// The first name of `keep` that is not one of `tools` (or is empty), with its index.
    pub fn unknown_kept<'a>(&'a self, tools: &[&str]) -> Option<(usize, &'a str)> {
        self.keep
            .iter()
            .enumerate()
            .find(|(_, k)| k.is_empty() || !tools.contains(&k.as_str()))
            .map(|(i, k)| (i, k.as_str()))
    }
}

/// The model's turns, in call order.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ModelScript {
    /// One entry per model call.
    pub turns: Vec<TurnSpec>,
    /// What happens when the turns run out.
    #[serde(default)]
    pub repeat: Repeat,
}

/// One model turn: a reply (`text`, `tool_calls`, `needs_more_work`, `usage`, `finish`,
/// `reasoning`) or a failure (`error`, `retry_after_ms`, `message`), never both.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TurnSpec {
    /// The visible content.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub text: Option<String>,
    /// Tool calls.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_calls: Option<Vec<CallSpec>>,
    /// The model's opinion on whether it is done: true, false, or absent (null is absent).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub needs_more_work: Option<bool>,
    /// Reported usage; absent means unknown, not zero.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage: Option<Usage>,
    /// Why generation stopped (`stop`, `length`, `content_filter`, `tool_calls`, `repetition`).
    /// Default `stop`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub finish: Option<Finish>,
    /// The model produced reasoning output. Default false.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reasoning: Option<bool>,
    /// Instead of a reply: the call fails with this class.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<ModelErrorKind>,
    /// With `error`: the delay the provider asks for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry_after_ms: Option<u64>,
    /// With `error`: the provider's words (default `scripted <kind> error`). A recording keeps
    /// them, so its replay prints the same progress lines.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// Text the model must be shown in this call's request (in any message): the scripted
    /// model stops the run with an internal fault (exit 3) naming the turn if one is missing.
    /// It is how a scenario proves what survived pruning.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub sees: Vec<String>,
    /// Text the model must not be shown in this call's request (what pruning removed).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub not_sees: Vec<String>,
    /// Instead of a reply: the host's kill switch was pulled while the model answered this
    /// call (a recording of a run cancelled by Ctrl-C ends so). The replay pulls it here, so
    /// the run ends `cancelled` at the same step. Nothing else goes with it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cancelled: Option<bool>,
}

impl TurnSpec {
    /// The reply fields that are present, by name.
    pub(crate) fn reply_fields(&self) -> Vec<&'static str> {
        let mut fields = Vec::new();
        let present = [
            ("text", self.text.is_some()),
            ("tool_calls", self.tool_calls.is_some()),
            ("needs_more_work", self.needs_more_work.is_some()),
            ("usage", self.usage.is_some()),
            ("finish", self.finish.is_some()),
            ("reasoning", self.reasoning.is_some()),
        ];
        for (name, is) in present {
            if is {
                fields.push(name);
            }
        }
        fields
    }
}

/// One tool call of a scripted turn.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CallSpec {
    /// The tool name.
    pub name: String,
    /// The arguments (default `{}`).
    #[serde(default = "empty_object")]
    pub arguments: Value,
    /// The call id (default `call-{model call}-{index}`, e.g. `call-1-0`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
}

fn empty_object() -> Value {
    Value::Object(serde_json::Map::new())
}

/// The results of one scripted tool, in call order.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ToolScript {
    /// One entry per execution (default none: a tool answered from outside, `deferred`, or
    /// never called needs none).
    #[serde(default)]
    pub results: Vec<ResultSpec>,
    /// What happens when the results run out.
    #[serde(default)]
    pub repeat: Repeat,
    /// Whether calling the tool twice is harmless (default true), journaled with each call.
    #[serde(default = "yes")]
    pub idempotent: bool,
    /// Each call waits for a person's approval before it runs (`docs/approvals.md`).
    #[serde(default, skip_serializing_if = "is_false")]
    pub approval: bool,
    /// Each call is answered from outside instead of run (`docs/approvals.md`).
    #[serde(default, skip_serializing_if = "is_false")]
    pub deferred: bool,
    /// What the tool does, for the model.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// The JSON Schema of the tool's arguments, as the model is shown it (a recording of a live
    /// run keeps the real tool's). Default `{"type": "object"}`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parameters: Option<Value>,
}

fn yes() -> bool {
    true
}

#[allow(clippy::trivially_copy_pass_by_ref)] // serde's `skip_serializing_if` passes a reference
fn is_false(b: &bool) -> bool {
    !*b
}

impl ToolScript {
    /// Whether, and why, the tool's calls are held for a decision from outside.
    pub fn hold(&self) -> Option<terminus_kernel::Hold> {
        if self.approval {
            Some(terminus_kernel::Hold::Approval)
        } else if self.deferred {
            Some(terminus_kernel::Hold::Deferred)
        } else {
            None
        }
    }
}

/// One tool result: `{ "ok": <any JSON> }` or `{ "error": "<kind>", "message": "..." }`, either
/// with an optional `delay_ms` (a real sleep before the result); or `{ "cancelled": true }`.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ResultSpec {
    /// A success with this output (`null` is a valid output).
    #[serde(
        default,
        deserialize_with = "present",
        skip_serializing_if = "Option::is_none"
    )]
    pub ok: Option<Value>,
    /// A failure of this class.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<ToolErrorKind>,
    /// With `error`: the message for the model.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// Sleep this long before answering (milliseconds).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub delay_ms: Option<u64>,
    /// With `ok`: append this many tokens of filler (`N` times " log", one token each in
    /// `o200k_base`, `cl100k_base` and the heuristic) to the output, which then is a string: a
    /// large result without a large file.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub filler_tokens: Option<u32>,
    /// Instead of a result: the host's kill switch was pulled while the tool ran this call (a
    /// recording of a run cancelled by Ctrl-C during a tool call ends so). The replay pulls it
    /// here, so the run ends `cancelled` at the same step. Nothing else goes with it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cancelled: Option<bool>,
    /// The job the call started and waited for (an MCP task's handle, as a recording keeps it):
    /// the replay journals it as the live run did, before it answers (or is cancelled).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub job: Option<Value>,
}

/// A field that is present is `Some`, even when its value is `null`.
fn present<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Option<Value>, D::Error> {
    Value::deserialize(deserializer).map(Some)
}

/// The verifier's verdicts, in order.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct VerifierScript {
    /// One entry per verification.
    pub verdicts: Vec<VerdictSpec>,
    /// What happens when the verdicts run out.
    #[serde(default)]
    pub repeat: Repeat,
}

/// One verdict.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct VerdictSpec {
    /// Whether the task is complete.
    pub complete: bool,
    /// What is still missing, in the verifier's words.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub missing: Vec<String>,
}
