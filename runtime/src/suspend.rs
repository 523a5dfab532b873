//! A run that stopped to wait for decisions on held calls (`docs/approvals.md`): what it tells
//! its host (the pending calls), and what its journal says of a suspended execution.

use serde::Serialize;
use terminus_kernel::{Command, Decision, Hold, Question, Recovery, Stats, executed};

/// A held call that waits for a decision.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PendingCall {
    /// The call's id: what `terminus approve --call` names.
    pub call_id: String,
    /// The tool.
    pub name: String,
    /// The arguments the model gave.
    pub arguments: serde_json::Value,
    /// Why it is held: a person's approval, an answer from outside, or a question the call
    /// asked while it ran.
    pub kind: Hold,
    /// The question ([`Hold::Elicitation`] only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub question: Option<Question>,
}

/// A held call of a suspended execution and its decision so far.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct HeldState {
    /// The call.
    #[serde(flatten)]
    pub call: PendingCall,
    /// The decision, once one is journaled.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub decision: Option<Decision>,
    /// Where the decision goes in the journal (`cp{n}:e{i}`).
    #[serde(skip)]
    pub key: terminus_kernel::Key,
}

/// A run that stopped, its claim released, until every pending call is decided (exit code 5).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Suspended {
    /// The execution.
    pub execution: String,
    /// Always `"suspended"`.
    pub status: &'static str,
    /// The calls that wait for a decision, in batch order.
    pub pending: Vec<PendingCall>,
    /// Steps taken so far.
    pub steps: u32,
    /// Model calls so far.
    pub model_calls: u32,
    /// Tool executions so far.
    pub tool_calls: u32,
}

impl Suspended {
    /// A suspension of `execution` after `stats`, waiting for `pending`.
    pub fn new(execution: String, pending: Vec<PendingCall>, stats: &Stats) -> Suspended {
        Suspended {
            execution,
            status: "suspended",
            pending,
            steps: stats.steps,
            model_calls: stats.model_calls,
            tool_calls: stats.tool_calls,
        }
    }
}

/// The held calls of the tool batch a replayed journal left outstanding, each with its decision
/// so far and the key its decision goes under (empty when no call is held).
pub fn held_calls(recovery: &Recovery) -> Vec<HeldState> {
    let Some(batch) = recovery.outstanding.iter().find_map(|c| match c {
        Command::RunTools(b) => Some(b),
        _ => None,
    }) else {
        return Vec::new();
    };
    let checkpoint = recovery.machine.stats().steps;
    let k = u32::try_from(recovery.held.len()).unwrap_or(u32::MAX);
    executed(batch)
        .zip(&recovery.held)
        .enumerate()
        .filter_map(|(j, (call, held))| {
            let held = held.as_ref()?;
            let j = u32::try_from(j).unwrap_or(u32::MAX);
            Some(HeldState {
                call: PendingCall {
                    call_id: call.id.to_string(),
                    name: call.name.to_string(),
                    arguments: call.arguments.value().clone(),
                    kind: held.hold,
                    question: held.question.clone(),
                },
                decision: held.decision.clone(),
                key: terminus_kernel::Key::decision(checkpoint, k, j),
            })
        })
        .collect()
}
