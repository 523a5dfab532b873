//! Calls held for a decision from outside the run (`docs/approvals.md`): a tool that needs a
//! person's approval, whose answer comes from outside instead of from running it, or whose run
//! asked a person a question that nobody could answer while it ran (an MCP server's elicitation).
//!
//! The machine needs nothing new for them: a held call is a call whose result has not come, and
//! the machine waits in `Acting` as it waits for any result. What the host does meanwhile (stop,
//! journal the held calls, release its claim, come back when they are decided) and how each
//! decision becomes the call's result are defined here, so every host answers the model the same.

use crate::event::{ToolErrorKind, ToolOutcome};
use crate::name::CallId;
use serde::{Deserialize, Serialize};

/// Why a call is held.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Hold {
    /// The tool runs only once a person approves the call.
    Approval,
    /// The tool is not run: its result is answered from outside.
    Deferred,
    /// The call ran and asked a person a question ([`Question`]) that nobody could answer while
    /// it ran: the question was cancelled, which ended that run without its effect, and its
    /// result was not kept. Once the person replies (an answer accepts the form with its
    /// content, a denial declines it, an approval accepts it with the form's defaults) the call
    /// runs again, and its question gets that reply. A call is held this way at most once: a
    /// question the second run asks that the reply does not answer is declined.
    Elicitation,
}

impl Hold {
    /// The snake_case name.
    pub const fn as_str(self) -> &'static str {
        match self {
            Hold::Approval => "approval",
            Hold::Deferred => "deferred",
            Hold::Elicitation => "elicitation",
        }
    }
}

/// A decision on a held call.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "kind", deny_unknown_fields)]
pub enum Decision {
    /// Run the call (an approval tool).
    Approve,
    /// Do not run it; the model is told it was denied, with the reason.
    Deny {
        /// Why, for the model.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        reason: Option<String>,
    },
    /// Do not run it; this is its result.
    Answer {
        /// The result the model gets.
        outcome: ToolOutcome,
    },
    /// Run the call with these arguments instead of the model's (an approval tool): the held
    /// call keeps the model's, this decision the person's, and the model is told the call ran
    /// with edited arguments ([`edited_note`]).
    Edit {
        /// The arguments the call runs with: a JSON object.
        arguments: serde_json::Value,
    },
}

impl Decision {
    /// The snake_case name.
    pub const fn as_str(&self) -> &'static str {
        match self {
            Decision::Approve => "approve",
            Decision::Deny { .. } => "deny",
            Decision::Answer { .. } => "answer",
            Decision::Edit { .. } => "edit",
        }
    }

    /// Whether the call runs: approved, as asked or with edited arguments.
    pub const fn runs(&self) -> bool {
        matches!(self, Decision::Approve | Decision::Edit { .. })
    }

    /// The arguments a person gave the call instead of the model's, if any.
    pub const fn edited(&self) -> Option<&serde_json::Value> {
        match self {
            Decision::Edit { arguments } => Some(arguments),
            _ => None,
        }
    }

    /// The result the model gets for a call decided this way without running it: `None` for an
    /// approval, edited or not (the call runs and its result is the tool's). A denial is a `permission_denied`
    /// tool error, so it counts as any tool failure and a model that keeps asking is bounded
    /// (rule 7).
    pub fn outcome(&self, tool: &str) -> Option<ToolOutcome> {
        match self {
            Decision::Approve | Decision::Edit { .. } => None,
            Decision::Deny { reason } => Some(ToolOutcome::Error {
                kind: ToolErrorKind::PermissionDenied,
                message: match reason {
                    Some(reason) => format!("denied: this call of `{tool}` was not run: {reason}"),
                    None => format!("denied: this call of `{tool}` was not run"),
                },
            }),
            Decision::Answer { outcome } => Some(outcome.clone()),
        }
    }
}

/// What the model is told before the result of a call that ran with the arguments a person
/// edited: what it ran with, so the model does not take the result for one of its own arguments.
pub fn edited_note(arguments: &serde_json::Value) -> String {
    format!("A person edited this call's arguments before approving it; it ran with {arguments}.")
}

/// A held call of the pending batch, as the journal knows it.
#[derive(Debug, Clone, PartialEq)]
pub struct HeldCall {
    /// The call's id.
    pub call_id: CallId,
    /// Why it is held.
    pub hold: Hold,
    /// The decision, once one is journaled.
    pub decision: Option<Decision>,
    /// The question the call asked ([`Hold::Elicitation`] only).
    pub question: Option<Question>,
}

/// A question a tool's call asked a person while it ran: an MCP server's form elicitation.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Question {
    /// What the person is asked.
    pub message: String,
    /// The JSON Schema of the form the answer fills (an object of flat fields).
    pub schema: serde_json::Value,
}
