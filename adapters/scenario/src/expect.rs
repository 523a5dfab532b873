//! The `expect` block: what a scenario's run must end with (outcome, reason, rule, result,
//! excluded tools, bounds on any counter). The conformance suite and `terminus check` compare a
//! [`Report`] against it.

use serde::de::{self, MapAccess, Visitor};
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use std::fmt;
use terminus_kernel::{AbortReason, CompleteReason, Outcome, Rule, Stats};
use terminus_runtime::{Report, ToolBudgetEvent};

/// `"complete"` or `"aborted"`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OutcomeName {
    /// The run completed.
    Complete,
    /// The run was aborted.
    Aborted,
}

impl OutcomeName {
    /// The JSON name.
    pub const fn as_str(self) -> &'static str {
        match self {
            OutcomeName::Complete => "complete",
            OutcomeName::Aborted => "aborted",
        }
    }
}

/// A canonical stop reason (`verified`, `incomplete`, ...), which also fixes the outcome.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ReasonName(pub Outcome);

impl ReasonName {
    /// The reason of that name.
    pub fn from_name(name: &str) -> Option<ReasonName> {
        CompleteReason::ALL
            .iter()
            .find(|r| r.as_str() == name)
            .map(|r| ReasonName(Outcome::Complete(*r)))
            .or_else(|| {
                AbortReason::ALL
                    .iter()
                    .find(|r| r.as_str() == name)
                    .map(|r| ReasonName(Outcome::Aborted(*r)))
            })
    }

    /// Every reason name, complete ones first.
    pub fn names() -> impl Iterator<Item = &'static str> {
        CompleteReason::ALL
            .iter()
            .map(|r| r.as_str())
            .chain(AbortReason::ALL.iter().map(|r| r.as_str()))
    }
}

impl Serialize for ReasonName {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.0.reason_str())
    }
}

impl<'de> Deserialize<'de> for ReasonName {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let name = String::deserialize(deserializer)?;
        ReasonName::from_name(&name).ok_or_else(|| {
            let expected: Vec<String> = ReasonName::names().map(|n| format!("`{n}`")).collect();
            de::Error::custom(format!(
                "unknown reason `{name}`, expected one of {}",
                expected.join(", ")
            ))
        })
    }
}

/// A bound on a counter: an exact count (`1`) or a range (`{ "min": 1, "max": 4 }`, either
/// end optional).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Bound {
    /// Exactly this many.
    Exact(u64),
    /// Within these limits (inclusive).
    Range {
        /// At least this many.
        min: Option<u64>,
        /// At most this many.
        max: Option<u64>,
    },
}

impl Bound {
    /// Whether `value` satisfies the bound.
    pub fn admits(self, value: u64) -> bool {
        match self {
            Bound::Exact(n) => value == n,
            Bound::Range { min, max } => {
                min.is_none_or(|m| value >= m) && max.is_none_or(|m| value <= m)
            }
        }
    }
}

impl fmt::Display for Bound {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Bound::Exact(n) => write!(f, "exactly {n}"),
            Bound::Range {
                min: Some(a),
                max: Some(b),
            } => write!(f, "between {a} and {b}"),
            Bound::Range { min: Some(a), .. } => write!(f, "at least {a}"),
            Bound::Range { max: Some(b), .. } => write!(f, "at most {b}"),
            Bound::Range { .. } => write!(f, "any number"),
        }
    }
}

impl Serialize for Bound {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        match *self {
            Bound::Exact(n) => serializer.serialize_u64(n),
            Bound::Range { min, max } => {
                let len = usize::from(min.is_some()) + usize::from(max.is_some());
                let mut map = serializer.serialize_map(Some(len))?;
                if let Some(m) = min {
                    map.serialize_entry("min", &m)?;
                }
                if let Some(m) = max {
                    map.serialize_entry("max", &m)?;
                }
                map.end()
            }
        }
    }
}

impl<'de> Deserialize<'de> for Bound {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct BoundVisitor;
        impl<'de> Visitor<'de> for BoundVisitor {
            type Value = Bound;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(r#"a count, or an object { "min": n, "max": n }"#)
            }

            fn visit_u64<E: de::Error>(self, v: u64) -> Result<Bound, E> {
                Ok(Bound::Exact(v))
            }

            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Bound, A::Error> {
                let (mut min, mut max) = (None, None);
                while let Some(key) = map.next_key::<String>()? {
                    match key.as_str() {
                        "min" if min.is_none() => min = Some(map.next_value::<u64>()?),
                        "max" if max.is_none() => max = Some(map.next_value::<u64>()?),
                        "min" | "max" => return Err(de::Error::duplicate_field("min/max")),
                        other => return Err(de::Error::unknown_field(other, &["min", "max"])),
                    }
                }
                if min.is_none() && max.is_none() {
                    return Err(de::Error::custom(r#"a range needs "min", "max" or both"#));
                }
                if let (Some(a), Some(b)) = (min, max)
                    && a > b
                {
                    return Err(de::Error::custom(format!(
                        "min ({a}) is greater than max ({b})"
                    )));
                }
                Ok(Bound::Range { min, max })
            }
        }
        deserializer.deserialize_any(BoundVisitor)
    }
}

/// What a run must end with. Every field is optional; a field that is present must match.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Expect {
    /// `complete` or `aborted`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub outcome: Option<OutcomeName>,
    /// The canonical stop reason.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<ReasonName>,
    /// The rule that ended the run (snake_case, as in `spec/machine.md`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rule: Option<Rule>,
    /// The report's `result`: a string, or `null` for none.
    #[serde(
        default,
        deserialize_with = "present",
        skip_serializing_if = "Option::is_none"
    )]
    pub result: Option<Option<String>>,
    /// The report's `output` (the parsed result under `policy.output_schema`): a JSON value,
    /// or `null` for none.
    #[serde(
        default,
        deserialize_with = "present_value",
        skip_serializing_if = "Option::is_none"
    )]
    pub output: Option<Option<serde_json::Value>>,
    /// The excluded tools, in any order.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub excluded_tools: Option<Vec<String>>,
    /// Transitions taken.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub steps: Option<Bound>,
    /// Model calls, retries included.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model_calls: Option<Bound>,
    /// Tool executions.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_calls: Option<Bound>,
    /// Tool calls the model wrote in its text that ran (they count in `tool_calls` too).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub text_tool_calls: Option<Bound>,
    /// Calls refused because their tool was excluded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub refused_calls: Option<Bound>,
    /// Checkpoints written for the agent (`policy.auto_checkpoints`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub auto_checkpoints: Option<Bound>,
    /// Tool executions that failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_failures: Option<Bound>,
    /// Tool turns in which every execution failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failed_tool_turns: Option<Bound>,
    /// Completion claims refused with a nudge.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nudges: Option<Bound>,
    /// Continuation prompts after no-op turns.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub continuations: Option<Bound>,
    /// Verdicts received.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub verifications: Option<Bound>,
    /// Verifier rejections.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub verification_failures: Option<Bound>,
    /// Turns that made no progress.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub no_ops: Option<Bound>,
    /// Of the no-op turns, replies that were not answers (the kernel's words, hand-backs).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub non_answers: Option<Bound>,
    /// Empty replies.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub empty_responses: Option<Bound>,
    /// Model errors of any class.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model_errors: Option<Bound>,
    /// Identical tool turns in a row.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub repeats: Option<Bound>,
    /// Tool turns that only polled declared pollers (`policy.pollers`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub polls: Option<Bound>,
    /// Input tokens reported.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub input_tokens: Option<Bound>,
    /// Output tokens reported.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_tokens: Option<Bound>,
    /// Events the kernel ignored.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ignored_events: Option<Bound>,
    /// Journal entries of the execution.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub entries: Option<Bound>,
    /// Appends that found their key already stored.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub duplicates_prevented: Option<Bound>,
    /// Times the context window pruned the model's view (0 without a context policy).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prunes: Option<Bound>,
    /// Tool results cut in the model's view (0 without a context policy).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub truncated_results: Option<Bound>,
    /// The report's `tool_budget_events`, in order (`[]` for none): each per-tool budget's
    /// warning or block (`tool`, `kind`, `call`, `block_at`, `step`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_budget_events: Option<Vec<ToolBudgetEvent>>,
}

/// A value as JSON text, for messages.
fn json<T: Serialize>(value: &T) -> String {
    serde_json::to_string(value).unwrap_or_else(|e| e.to_string())
}

fn present<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Option<Option<String>>, D::Error> {
    Option::<String>::deserialize(deserializer).map(Some)
}

fn present_value<'de, D: Deserializer<'de>>(
    deserializer: D,
) -> Result<Option<Option<serde_json::Value>>, D::Error> {
    Option::<serde_json::Value>::deserialize(deserializer).map(Some)
}

impl Expect {
    /// The bound on the kernel counter `name` (one of [`Stats::FIELDS`]); `None` for a name
    /// that is not a counter of the block (a test holds every field of the list to one).
    fn stat_bound(&self, name: &str) -> Option<Option<Bound>> {
        Some(match name {
            "steps" => self.steps,
            "model_calls" => self.model_calls,
            "tool_calls" => self.tool_calls,
            "text_tool_calls" => self.text_tool_calls,
            "refused_calls" => self.refused_calls,
            "auto_checkpoints" => self.auto_checkpoints,
            "tool_failures" => self.tool_failures,
            "failed_tool_turns" => self.failed_tool_turns,
            "nudges" => self.nudges,
            "continuations" => self.continuations,
            "verifications" => self.verifications,
            "verification_failures" => self.verification_failures,
            "no_ops" => self.no_ops,
            "non_answers" => self.non_answers,
            "empty_responses" => self.empty_responses,
            "model_errors" => self.model_errors,
            "repeats" => self.repeats,
            "polls" => self.polls,
            "input_tokens" => self.input_tokens,
            "output_tokens" => self.output_tokens,
            "ignored_events" => self.ignored_events,
            _ => return None,
        })
    }

    /// Every counter bound with its name and the report's value: the kernel's counters in
    /// [`Stats::FIELDS`] order, then the journal's and the context window's.
    fn counters(&self, report: &Report) -> Vec<(&'static str, Option<Bound>, u64)> {
        let s = &report.stats;
        let context = report.context.unwrap_or_default();
        let mut out: Vec<(&'static str, Option<Bound>, u64)> = Stats::FIELDS
            .iter()
            .map(|f| (f.name, self.stat_bound(f.name).flatten(), (f.get)(s)))
            .collect();
        out.extend([
            ("entries", self.entries, report.entries),
            (
                "duplicates_prevented",
                self.duplicates_prevented,
                report.duplicates_prevented,
            ),
            ("prunes", self.prunes, context.prunes.into()),
            (
                "truncated_results",
                self.truncated_results,
                context.truncated_results.into(),
            ),
        ]);
        out
    }

    /// A contradiction inside the block itself (an outcome that the reason contradicts).
    pub(crate) fn contradiction(&self) -> Option<String> {
        match (self.outcome, self.reason) {
            (Some(outcome), Some(ReasonName(reason)))
                if outcome.as_str() != reason.outcome_str() =>
            {
                Some(format!(
                    "reason `{}` means outcome `{}`, but outcome says `{}`",
                    reason.reason_str(),
                    reason.outcome_str(),
                    outcome.as_str()
                ))
            }
            _ => None,
        }
    }

    /// Compares `report` with the expectations: one line per mismatch, each starting with the
    /// field's path (`$.expect.steps: ...`). Empty when the report meets them all.
    pub fn check(&self, report: &Report) -> Vec<String> {
        let mut out = Vec::new();
        if let Some(outcome) = self.outcome
            && outcome.as_str() != report.outcome.outcome_str()
        {
            out.push(format!(
                "$.expect.outcome: expected `{}`, got `{}`",
                outcome.as_str(),
                report.outcome.outcome_str()
            ));
        }
        if let Some(ReasonName(reason)) = self.reason
            && reason != report.outcome
        {
            out.push(format!(
                "$.expect.reason: expected `{}`, got `{}`",
                reason.reason_str(),
                report.outcome.reason_str()
            ));
        }
        if let Some(rule) = self.rule
            && rule != report.rule
        {
            out.push(format!(
                "$.expect.rule: expected `{}`, got `{}`",
                rule.name(),
                report.rule.name()
            ));
        }
        if let Some(result) = &self.result
            && *result != report.result
        {
            out.push(format!(
                "$.expect.result: expected {}, got {}",
                json(result),
                json(&report.result)
            ));
        }
        if let Some(output) = &self.output
            && *output != report.output
        {
            out.push(format!(
                "$.expect.output: expected {}, got {}",
                json(output),
                json(&report.output)
            ));
        }
        if let Some(tools) = &self.excluded_tools {
            let mut want = tools.clone();
            want.sort();
            let mut got = report.excluded_tools.clone();
            got.sort();
            if want != got {
                out.push(format!(
                    "$.expect.excluded_tools: expected {}, got {}",
                    json(&want),
                    json(&got)
                ));
            }
        }
        if let Some(events) = &self.tool_budget_events
            && *events != report.tool_budget_events
        {
            out.push(format!(
                "$.expect.tool_budget_events: expected {}, got {}",
                json(events),
                json(&report.tool_budget_events)
            ));
        }
        for (name, bound, value) in self.counters(report) {
            if let Some(bound) = bound
                && !bound.admits(value)
            {
                out.push(format!("$.expect.{name}: expected {bound}, got {value}"));
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The block bounds every counter of the kernel's one list: a counter added to
    /// [`Stats::FIELDS`] without its `expect` field fails here, naming it.
    #[test]
    fn every_kernel_counter_has_a_bound() {
        let block = Expect::default();
        for (i, field) in Stats::FIELDS.iter().enumerate() {
            assert!(
                block.stat_bound(field.name).is_some(),
                "`expect` has no bound for the counter `{}`",
                field.name
            );
            let n = i as u64 + 1;
            let json = format!("{{\"{}\": {n}}}", field.name);
            let parsed: Expect = serde_json::from_str(&json)
                .unwrap_or_else(|e| panic!("`expect.{}` does not parse: {e}", field.name));
            for other in &Stats::FIELDS {
                let want = (other.name == field.name).then_some(Bound::Exact(n));
                assert_eq!(
                    parsed.stat_bound(other.name).flatten(),
                    want,
                    "`expect.{}` read as `{}`",
                    field.name,
                    other.name
                );
            }
        }
    }
}
