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
    /// Tool calls the model wrote in its text that ran as real calls (see
    /// [`crate::textcall`]); they count in `tool_calls` too.
    pub text_tool_calls: u32,
    /// Tool calls refused because their tool was excluded.
    pub refused_calls: u32,
    /// Checkpoints written for the agent (`policy.auto_checkpoints`): each lifted the blocks of
    /// the budgets a checkpoint resets.
    pub auto_checkpoints: u32,
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
    /// Of the no-op turns, replies with text that is not an answer: the kernel's own words
    /// repeated, or (under `policy.autonomous`) a reply that only hands the task back.
    pub non_answers: u32,
    /// Empty replies (rule 6), whatever their finish reason.
    pub empty_responses: u32,
    /// Model errors of any class.
    pub model_errors: u32,
    /// Tool turns whose calls and results repeated the previous turn's exactly.
    pub repeats: u32,
    /// Tool turns that only polled declared pollers (`policy.pollers`), every call succeeding.
    /// Absent from the JSON form while 0.
    #[serde(skip_serializing_if = "is_zero")]
    pub polls: u32,
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
        Stats::FIELDS
            .iter()
            .all(|f| (f.get)(self) >= (f.get)(earlier))
    }
}

/// One counter of [`Stats`] or [`Streaks`]: its JSON name and how to read it. The one list of
/// the counters: every place that lists them (the invariants, the model check, the scenario
/// `expect` block, the explanation) goes through [`Stats::FIELDS`] and [`Streaks::FIELDS`], and a
/// test checks them against the JSON form.
#[derive(Debug, Clone, Copy)]
pub struct Field<T> {
    /// The counter's name, as in JSON.
    pub name: &'static str,
    /// Its value.
    pub get: fn(&T) -> u64,
    /// Whether it is a 64-bit counter (tokens), which may pass `u32::MAX`.
    pub wide: bool,
}

macro_rules! fields {
    ($t:ty: $($name:ident $(: $wide:ident)?),* $(,)?) => {
        [$(Field::<$t> {
            name: stringify!($name),
            get: |s: &$t| u64::from(s.$name),
            wide: fields!(@wide $($wide)?),
        }),*]
    };
    (@wide wide) => { true };
    (@wide) => { false };
}

impl Stats {
    /// Every counter, in declaration (JSON) order.
    pub const FIELDS: [Field<Stats>; 21] = fields!(Stats:
        steps,
        model_calls,
        tool_calls,
        text_tool_calls,
        refused_calls,
        auto_checkpoints,
        tool_failures,
        failed_tool_turns,
        nudges,
        continuations,
        verifications,
        verification_failures,
        no_ops,
        non_answers,
        empty_responses,
        model_errors,
        repeats,
        polls,
        input_tokens: wide,
        output_tokens: wide,
        ignored_events,
    );
}

impl Streaks {
    /// Every streak, in declaration (JSON) order.
    pub const FIELDS: [Field<Streaks>; 7] = fields!(Streaks:
        no_ops,
        empty_responses,
        model_retries,
        failed_tool_turns,
        repeats,
        blocked_turns,
        polls,
    );
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
    /// Tool turns in a row whose every call a tool budget refused (reset by a turn with a call
    /// that runs). Absent from the JSON form while 0.
    #[serde(skip_serializing_if = "is_zero")]
    pub blocked_turns: u32,
    /// How many polls in a row (tool turns of declared pollers only) got the same results as
    /// the poll before them, counting the first (set by each poll; other turns leave it).
    /// Absent from the JSON form while 0.
    #[serde(skip_serializing_if = "is_zero")]
    pub polls: u32,
}

#[allow(clippy::trivially_copy_pass_by_ref)] // serde's `skip_serializing_if` passes a reference
const fn is_zero(n: &u32) -> bool {
    *n == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The JSON keys of a value, in order.
    fn keys<T: Serialize>(value: &T) -> Vec<String> {
        match serde_json::to_value(value) {
            Ok(serde_json::Value::Object(map)) => map.keys().cloned().collect(),
            other => panic!("not an object: {other:?}"),
        }
    }

    #[test]
    fn the_field_lists_are_every_counter_in_json_order() {
        let stats: Vec<&str> = Stats::FIELDS.iter().map(|f| f.name).collect();
        let mut json = keys(&Stats {
            polls: 1,
            ..Stats::default()
        });
        json.sort_by_key(|k| stats.iter().position(|s| s == k));
        assert_eq!(stats, json);
        let streaks: Vec<&str> = Streaks::FIELDS.iter().map(|f| f.name).collect();
        // Every streak set, so that none is left out of the JSON form for being 0.
        let mut json = keys(&Streaks {
            blocked_turns: 1,
            polls: 1,
            ..Streaks::default()
        });
        json.sort_by_key(|k| streaks.iter().position(|s| s == k));
        assert_eq!(streaks, json);
    }

    #[test]
    fn each_field_reads_its_own_counter() {
        let s = Stats {
            tool_calls: 7,
            output_tokens: 1 << 40,
            ..Stats::default()
        };
        let read: Vec<(&str, u64)> = Stats::FIELDS
            .iter()
            .map(|f| (f.name, (f.get)(&s)))
            .filter(|(_, v)| *v != 0)
            .collect();
        assert_eq!(read, [("tool_calls", 7), ("output_tokens", 1 << 40)]);
        assert!(
            Stats::FIELDS
                .iter()
                .filter(|f| f.wide)
                .all(|f| f.name.ends_with("_tokens"))
        );
    }
}
