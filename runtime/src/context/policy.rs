//! The context policy: how large the model's window is, when pruning starts, how far it goes,
//! and how long one tool result may be in the model's view.

use serde::{Deserialize, Serialize};
use std::fmt;

/// How the runtime keeps the model's view of the conversation inside its context window.
///
/// Counts are tokens. The view is pruned when it would exceed [`ContextPolicy::prune_at`], down to
/// [`ContextPolicy::prune_to`] where the invariants allow (the gap is hysteresis: after a prune,
/// turns append to the same view until `prune_at` again, so the prompt's prefix stays stable).
/// A view that cannot be brought under [`ContextPolicy::limit`] ends the run with
/// `context_exhausted`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ContextPolicy {
    /// The model's context window.
    pub window: u32,
    /// Tokens kept free for the model's reply; a request never exceeds `window - reserve`.
    pub reserve: u32,
    /// The view is pruned when it would exceed this (the safety margin: two thirds of the
    /// window by default).
    pub prune_at: u32,
    /// How far a prune brings the view down, where the invariants allow (half the window by
    /// default).
    pub prune_to: u32,
    /// The longest a tool result may be in the model's view; a longer one is cut with a marker
    /// that says how much was cut and how to get the rest. `None`: no limit.
    pub max_tool_result_tokens: Option<u32>,
    /// The model turns at the end of the conversation that are never pruned (each with its tool
    /// results and the messages after it).
    pub keep_recent_turns: u32,
    /// The longest the system prompt may be in the model's view, in tokens of its text; a
    /// longer one is cut to fit, with the truncation marker of a long tool result. `None`: no
    /// limit (and then absent from the JSON form).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_system_tokens: Option<u32>,
}

impl ContextPolicy {
    /// The smallest tool-result limit: room for a useful prefix and the truncation marker.
    pub const MIN_TOOL_RESULT_TOKENS: u32 = 128;

    /// The defaults for a window of `window` tokens: reserve an eighth for the reply, prune at
    /// two thirds down to a half, cut a tool result at an eighth, keep the last 2 turns, no
    /// limit on the system prompt.
    pub fn for_window(window: u32) -> ContextPolicy {
        ContextPolicy {
            window,
            reserve: window / 8,
            prune_at: window / 3 * 2,
            prune_to: window / 2,
            max_tool_result_tokens: Some((window / 8).max(Self::MIN_TOOL_RESULT_TOKENS)),
            keep_recent_turns: 2,
            max_system_tokens: None,
        }
    }

    /// The most a request may hold: `window - reserve`.
    pub fn limit(&self) -> u32 {
        self.window.saturating_sub(self.reserve)
    }

    /// Checks the fields against each other; the error names the field at fault.
    pub fn validate(&self) -> Result<(), ContextPolicyError> {
        let err = |field: &'static str, problem: String| Err(ContextPolicyError { field, problem });
        if self.window == 0 {
            return err("window", "must be at least 1".into());
        }
        if self.reserve >= self.window {
            return err(
                "reserve",
                format!(
                    "{} leaves no room in a window of {}",
                    self.reserve, self.window
                ),
            );
        }
        if self.prune_at > self.limit() {
            return err(
                "prune_at",
                format!(
                    "{} is above window - reserve = {}",
                    self.prune_at,
                    self.limit()
                ),
            );
        }
        if self.prune_to > self.prune_at {
            return err(
                "prune_to",
                format!("{} is above prune_at = {}", self.prune_to, self.prune_at),
            );
        }
        if let Some(max) = self.max_tool_result_tokens
            && max < Self::MIN_TOOL_RESULT_TOKENS
        {
            return err(
                "max_tool_result_tokens",
                format!(
                    "{max} is below {} (room for a prefix and the truncation marker)",
                    Self::MIN_TOOL_RESULT_TOKENS
                ),
            );
        }
        if self.max_system_tokens == Some(0) {
            return err(
                "max_system_tokens",
                "must be at least 1 (leave it out for no limit)".into(),
            );
        }
        Ok(())
    }
}

/// A context policy whose fields contradict each other.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ContextPolicyError {
    /// The field at fault, e.g. `prune_at`.
    pub field: &'static str,
    /// What is wrong with it.
    pub problem: String,
}

impl fmt::Display for ContextPolicyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "context.{}: {}", self.field, self.problem)
    }
}

impl std::error::Error for ContextPolicyError {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_valid_for_any_reasonable_window() {
        for window in [512, 4_096, 8_192, 128_000, 1_000_000] {
            let p = ContextPolicy::for_window(window);
            assert_eq!(p.validate(), Ok(()), "window {window}");
            assert!(p.prune_to <= p.prune_at && p.prune_at <= p.limit());
        }
    }

    #[test]
    fn contradictions_name_the_field() {
        let base = ContextPolicy::for_window(8_000);
        let cases = [
            (ContextPolicy { window: 0, ..base }, "window"),
            (
                ContextPolicy {
                    reserve: 8_000,
                    ..base
                },
                "reserve",
            ),
            (
                ContextPolicy {
                    prune_at: 7_500,
                    ..base
                },
                "prune_at",
            ),
            (
                ContextPolicy {
                    prune_to: 6_000,
                    ..base
                },
                "prune_to",
            ),
            (
                ContextPolicy {
                    max_tool_result_tokens: Some(10),
                    ..base
                },
                "max_tool_result_tokens",
            ),
            (
                ContextPolicy {
                    max_system_tokens: Some(0),
                    ..base
                },
                "max_system_tokens",
            ),
        ];
        for (policy, field) in cases {
            let e = policy.validate().expect_err(field);
            assert_eq!(e.field, field);
            assert!(e.to_string().starts_with(&format!("context.{field}: ")));
        }
    }
}
