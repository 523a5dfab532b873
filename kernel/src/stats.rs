//! Counters: one plain struct of monotone totals, and the streaks that reset on progress.

use serde::{Deserialize, Serialize};

/// Monotone counters of a run. Every field only ever grows; the report is built from these.
#[non_exhaustive]
#[derive(Default, Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Stats {
    /// Transitions taken (every accepted event is one step).
    pub steps: u32,
    /// Model calls issued, retries and the final-answer call included.
    pub model_calls: u32,
    /// Tool executions issued (calls refused because their tool is excluded are not counted).
    pub tool_calls: u32,
    /// Tool calls refused because their tool was excluded.
    pub refused_calls: u32,
    /// Tool executions that returned an error.
    pub tool_failures: u32,
    /// Tool turns in which every execution failed.
    pub failed_tool_turns: u32,
    /// Completion claims refused with a nudge (rule 5); bounded by `max_nudges`.
    pub nudges: u32,
    /// Continuation prompts sent after a no-op turn.
    pub continuations: u32,
    /// Verifier verdicts received.
    pub verifications: u32,
    /// Verifier rejections (rule 3); bounded by `max_verification_failures`.
    pub verification_failures: u32,
    /// Turns that made no progress (no tool call and no usable content).
    pub no_ops: u32,
    /// Empty replies (rule 6), whatever their finish reason.
    pub empty_responses: u32,
    /// Model errors of any class.
    pub model_errors: u32,
    /// Tool turns whose calls and results repeated the previous turn's exactly.
    pub repeats: u32,
    /// Input tokens reported by the model.
    pub input_tokens: u64,
    /// Output tokens reported by the model.
    pub output_tokens: u64,
    /// Events that arrived in a state that does not expect them (terminal states included).
    pub ignored_events: u32,
}

impl Stats {
    /// Tokens spent so far (input plus output).
    pub const fn tokens(&self) -> u64 {
        self.input_tokens.saturating_add(self.output_tokens)
    }

    /// Whether every counter of `self` is at least the one in `earlier` (counters never decrease).
    pub fn dominates(&self, earlier: &Stats) -> bool {
        let a = self.as_array();
        let b = earlier.as_array();
        a.iter().zip(b.iter()).all(|(x, y)| x >= y)
    }

    fn as_array(&self) -> [u64; 17] {
        [
            self.steps.into(),
            self.model_calls.into(),
            self.tool_calls.into(),
            self.refused_calls.into(),
            self.tool_failures.into(),
            self.failed_tool_turns.into(),
            self.nudges.into(),
            self.continuations.into(),
            self.verifications.into(),
            self.verification_failures.into(),
            self.no_ops.into(),
            self.empty_responses.into(),
            self.model_errors.into(),
            self.repeats.into(),
            self.input_tokens,
            self.output_tokens,
            self.ignored_events.into(),
        ]
    }
}

/// Things that happened "in a row": each resets when the run makes the matching kind of progress.
#[non_exhaustive]
#[derive(Default, Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Streaks {
    /// No-op turns in a row (reset by a tool turn or a completion claim).
    pub no_ops: u32,
    /// Empty replies in a row (reset by any non-empty turn).
    pub empty_responses: u32,
    /// Retryable model errors in a row (reset by any turn).
    pub model_retries: u32,
    /// Tool turns in a row in which every execution failed (reset by a turn with a success).
    pub failed_tool_turns: u32,
    /// How many times in a row the latest window of successful tool turns has occurred, counting
    /// the first (1 when the last turn repeats nothing; any period up to `max_loop_period`).
    pub repeats: u32,
}
