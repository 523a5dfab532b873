//! The plan's limits: each from the plan, else from the environment variable the seed system
//! used, else the seed's default. A value out of range, or an environment value that is not a
//! number, is an error naming where it came from; none is ignored.

use serde::{Deserialize, Serialize};
use std::fmt;

/// The `limits` block of a plan file: every field optional.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LimitsSpec {
    /// Dependency levels the plan may run (a deeper plan stops with `max_phases`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_phases: Option<u64>,
    /// The whole plan's wall-clock limit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub execution_timeout_ms: Option<u64>,
    /// Agents running at once.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_concurrency: Option<u64>,
    /// An agent's timeout is `estimated_duration_ms` times this, clamped to 30 s..10 min.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent_timeout_multiplier: Option<u64>,
    /// Retries of a failed `retryable` agent (2 allows 3 runs).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent_max_retries: Option<u64>,
    /// The first retry's delay; each next one doubles, capped at 30 s.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent_retry_base_delay_ms: Option<u64>,
    /// Failures in a row that open an agent id's circuit breaker.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub circuit_breaker_failure_threshold: Option<u64>,
    /// How long an open breaker refuses before it lets one probe through (half-open).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub circuit_breaker_timeout_ms: Option<u64>,
    /// Model calls all agents together may make (none: no plan-wide limit).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_model_calls: Option<u64>,
    /// Tokens all agents together may spend (none: no plan-wide limit).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token_budget: Option<u64>,
}

/// The limits a plan runs under.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
pub struct Limits {
    /// Dependency levels the plan may run.
    pub max_phases: u32,
    /// The whole plan's wall-clock limit.
    pub execution_timeout_ms: u64,
    /// Agents running at once.
    pub max_concurrency: u32,
    /// Timeout multiplier of `estimated_duration_ms`.
    pub agent_timeout_multiplier: u32,
    /// Retries of a failed `retryable` agent.
    pub agent_max_retries: u32,
    /// The first retry's delay.
    pub agent_retry_base_delay_ms: u64,
    /// Failures in a row that open a breaker.
    pub circuit_breaker_failure_threshold: u32,
    /// How long an open breaker refuses.
    pub circuit_breaker_timeout_ms: u64,
    /// Model calls of all agents together.
    pub max_model_calls: Option<u64>,
    /// Tokens of all agents together.
    pub token_budget: Option<u64>,
}

/// The shortest per-agent timeout.
pub const AGENT_TIMEOUT_MIN_MS: u64 = 30_000;
/// The longest per-agent timeout.
pub const AGENT_TIMEOUT_MAX_MS: u64 = 600_000;
/// The longest retry delay.
pub const RETRY_DELAY_MAX_MS: u64 = 30_000;
/// An agent without `estimated_duration_ms` is estimated at a minute.
pub const DEFAULT_ESTIMATE_MS: u64 = 60_000;

impl Default for Limits {
    /// The seed system's defaults.
    fn default() -> Limits {
        Limits {
            max_phases: 20,
            execution_timeout_ms: 840_000,
            max_concurrency: 4,
            agent_timeout_multiplier: 5,
            agent_max_retries: 3,
            agent_retry_base_delay_ms: 2_000,
            circuit_breaker_failure_threshold: 3,
            circuit_breaker_timeout_ms: 300_000,
            max_model_calls: None,
            token_budget: None,
        }
    }
}

impl Limits {
    /// An agent's timeout: its estimate times the multiplier, clamped to 30 s..10 min.
    pub fn agent_timeout_ms(&self, estimated_ms: Option<u64>) -> u64 {
        estimated_ms
            .unwrap_or(DEFAULT_ESTIMATE_MS)
            .saturating_mul(u64::from(self.agent_timeout_multiplier))
            .clamp(AGENT_TIMEOUT_MIN_MS, AGENT_TIMEOUT_MAX_MS)
    }

    /// The delay before retry `retry` (1 for the first): the base delay doubling, capped at 30 s.
    pub fn retry_delay_ms(&self, retry: u32) -> u64 {
        let doublings = retry.saturating_sub(1).min(32);
        self.agent_retry_base_delay_ms
            .saturating_mul(1u64 << doublings)
            .min(RETRY_DELAY_MAX_MS)
    }
}

/// Where a limit's value came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Source {
    /// The plan's `limits` block.
    Plan,
    /// An environment variable.
    Env(&'static str),
    /// The default.
    Default,
}

/// A limit that cannot be used: which one, where its value came from, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LimitError {
    /// The field of `limits`.
    pub field: &'static str,
    /// Where the value came from.
    pub source: Source,
    /// What is wrong.
    pub problem: String,
}

impl fmt::Display for LimitError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.source {
            Source::Plan => write!(f, "$.limits.{}: {}", self.field, self.problem),
            Source::Env(var) => write!(
                f,
                "environment variable {var} (for limits.{}): {}",
                self.field, self.problem
            ),
            Source::Default => write!(f, "limits.{}: {}", self.field, self.problem),
        }
    }
}

/// One limit: its field, its environment variable, its range.
struct Row {
    field: &'static str,
    env: Option<&'static str>,
    min: u64,
    max: u64,
}

const ROWS: [Row; 10] = [
    row("max_phases", Some("ORCHESTRATOR_MAX_PHASES"), 1, 1_000),
    row(
        "execution_timeout_ms",
        Some("ORCHESTRATOR_EXECUTION_TIMEOUT_MS"),
        1,
        7 * 24 * 3_600_000,
    ),
    row("max_concurrency", None, 1, 1_024),
    row(
        "agent_timeout_multiplier",
        Some("AGENT_TIMEOUT_MULTIPLIER"),
        1,
        1_000,
    ),
    row("agent_max_retries", Some("AGENT_MAX_RETRIES"), 0, 100),
    row(
        "agent_retry_base_delay_ms",
        Some("AGENT_RETRY_BASE_DELAY_MS"),
        0,
        RETRY_DELAY_MAX_MS,
    ),
    row(
        "circuit_breaker_failure_threshold",
        Some("CIRCUIT_BREAKER_FAILURE_THRESHOLD"),
        1,
        1_000,
    ),
    row(
        "circuit_breaker_timeout_ms",
        Some("CIRCUIT_BREAKER_TIMEOUT_MS"),
        1,
        7 * 24 * 3_600_000,
    ),
    row("max_model_calls", None, 1, u32::MAX as u64),
    row("token_budget", None, 1, u64::MAX),
];

const fn row(field: &'static str, env: Option<&'static str>, min: u64, max: u64) -> Row {
    Row {
        field,
        env,
        min,
        max,
    }
}

/// One limit, for documentation: its field, environment variable, default and range.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LimitRow {
    /// The field of `limits`.
    pub field: &'static str,
    /// The environment variable that sets it when the plan does not.
    pub env: Option<&'static str>,
    /// The default (none: no limit).
    pub default: Option<u64>,
    /// The smallest value.
    pub min: u64,
    /// The largest value.
    pub max: u64,
}

/// Every limit, in the order of the `limits` block.
pub fn limit_rows() -> Vec<LimitRow> {
    let d = Limits::default();
    let defaults = [
        Some(u64::from(d.max_phases)),
        Some(d.execution_timeout_ms),
        Some(u64::from(d.max_concurrency)),
        Some(u64::from(d.agent_timeout_multiplier)),
        Some(u64::from(d.agent_max_retries)),
        Some(d.agent_retry_base_delay_ms),
        Some(u64::from(d.circuit_breaker_failure_threshold)),
        Some(d.circuit_breaker_timeout_ms),
        d.max_model_calls,
        d.token_budget,
    ];
    ROWS.iter()
        .zip(defaults)
        .map(|(r, default)| LimitRow {
            field: r.field,
            env: r.env,
            default,
            min: r.min,
            max: r.max,
        })
        .collect()
}

impl LimitsSpec {
    fn get(&self, field: &str) -> Option<u64> {
        match field {
            "max_phases" => self.max_phases,
            "execution_timeout_ms" => self.execution_timeout_ms,
            "max_concurrency" => self.max_concurrency,
            "agent_timeout_multiplier" => self.agent_timeout_multiplier,
            "agent_max_retries" => self.agent_max_retries,
            "agent_retry_base_delay_ms" => self.agent_retry_base_delay_ms,
            "circuit_breaker_failure_threshold" => self.circuit_breaker_failure_threshold,
            "circuit_breaker_timeout_ms" => self.circuit_breaker_timeout_ms,
            "max_model_calls" => self.max_model_calls,
            "token_budget" => self.token_budget,
            _ => None,
        }
    }

    /// The limits: plan, else environment (`env` reads a variable), else default. Every
    /// problem is reported.
    pub fn resolve(&self, env: &dyn Fn(&str) -> Option<String>) -> Result<Limits, Vec<LimitError>> {
        let defaults = Limits::default();
        let mut errors = Vec::new();
        let mut value = |row: &Row, default: Option<u64>| -> Option<u64> {
            let (raw, source) = if let Some(v) = self.get(row.field) {
                (Some(v), Source::Plan)
            } else if let Some((var, text)) = row.env.and_then(|var| env(var).map(|t| (var, t))) {
                match text.trim().parse::<u64>() {
                    Ok(v) => (Some(v), Source::Env(var)),
                    Err(_) => {
                        errors.push(LimitError {
                            field: row.field,
                            source: Source::Env(var),
                            problem: format!("`{text}` is not a whole number"),
                        });
                        return default;
                    }
                }
            } else {
                (default, Source::Default)
            };
            let v = raw?;
            if v < row.min || v > row.max {
                errors.push(LimitError {
                    field: row.field,
                    source,
                    problem: format!("must be in {}..={}, got {v}", row.min, row.max),
                });
                return default;
            }
            Some(v)
        };
        let narrow = |v: Option<u64>, d: u32| v.and_then(|v| u32::try_from(v).ok()).unwrap_or(d);
        let [
            phases,
            timeout,
            concurrency,
            multiplier,
            retries,
            base,
            threshold,
            open,
            calls,
            tokens,
        ] = &ROWS;
        let limits = Limits {
            max_phases: narrow(
                value(phases, Some(defaults.max_phases.into())),
                defaults.max_phases,
            ),
            execution_timeout_ms: value(timeout, Some(defaults.execution_timeout_ms))
                .unwrap_or(defaults.execution_timeout_ms),
            max_concurrency: narrow(
                value(concurrency, Some(defaults.max_concurrency.into())),
                defaults.max_concurrency,
            ),
            agent_timeout_multiplier: narrow(
                value(multiplier, Some(defaults.agent_timeout_multiplier.into())),
                defaults.agent_timeout_multiplier,
            ),
            agent_max_retries: narrow(
                value(retries, Some(defaults.agent_max_retries.into())),
                defaults.agent_max_retries,
            ),
            agent_retry_base_delay_ms: value(base, Some(defaults.agent_retry_base_delay_ms))
                .unwrap_or(defaults.agent_retry_base_delay_ms),
            circuit_breaker_failure_threshold: narrow(
                value(
                    threshold,
                    Some(defaults.circuit_breaker_failure_threshold.into()),
                ),
                defaults.circuit_breaker_failure_threshold,
            ),
            circuit_breaker_timeout_ms: value(open, Some(defaults.circuit_breaker_timeout_ms))
                .unwrap_or(defaults.circuit_breaker_timeout_ms),
            max_model_calls: value(calls, None),
            token_budget: value(tokens, None),
        };
        if errors.is_empty() {
            Ok(limits)
        } else {
            Err(errors)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(pairs: &'static [(&'static str, &'static str)]) -> impl Fn(&str) -> Option<String> {
        move |k| {
            pairs
                .iter()
                .find(|(name, _)| *name == k)
                .map(|(_, v)| (*v).to_owned())
        }
    }

    #[test]
    fn the_seeds_defaults_apply_without_plan_or_environment() {
        let limits = LimitsSpec::default().resolve(&env(&[])).expect("defaults");
        assert_eq!(limits, Limits::default());
        assert_eq!(limits.max_phases, 20);
        assert_eq!(limits.execution_timeout_ms, 840_000);
        assert_eq!(limits.agent_max_retries, 3);
    }

    #[test]
    fn the_plan_wins_over_the_environment_which_wins_over_the_default() {
        let spec = LimitsSpec {
            max_phases: Some(7),
            ..LimitsSpec::default()
        };
        let e = env(&[("ORCHESTRATOR_MAX_PHASES", "9"), ("AGENT_MAX_RETRIES", "1")]);
        let limits = spec.resolve(&e).expect("valid");
        assert_eq!(limits.max_phases, 7, "plan over environment");
        assert_eq!(limits.agent_max_retries, 1, "environment over default");
        assert_eq!(limits.circuit_breaker_failure_threshold, 3, "default");
    }

    #[test]
    fn every_bad_value_is_reported_with_its_source() {
        let spec = LimitsSpec {
            max_concurrency: Some(0),
            ..LimitsSpec::default()
        };
        let e = env(&[
            ("AGENT_MAX_RETRIES", "three"),
            ("CIRCUIT_BREAKER_TIMEOUT_MS", "0"),
        ]);
        let errors = spec.resolve(&e).expect_err("invalid");
        let lines: Vec<String> = errors.iter().map(ToString::to_string).collect();
        assert_eq!(
            lines,
            [
                "$.limits.max_concurrency: must be in 1..=1024, got 0",
                "environment variable AGENT_MAX_RETRIES (for limits.agent_max_retries): \
                 `three` is not a whole number",
                "environment variable CIRCUIT_BREAKER_TIMEOUT_MS (for \
                 limits.circuit_breaker_timeout_ms): must be in 1..=604800000, got 0",
            ]
        );
    }

    #[test]
    fn agent_timeouts_are_the_estimate_times_the_multiplier_clamped() {
        let limits = Limits::default();
        assert_eq!(limits.agent_timeout_ms(Some(20_000)), 100_000);
        assert_eq!(limits.agent_timeout_ms(Some(1_000)), AGENT_TIMEOUT_MIN_MS);
        assert_eq!(limits.agent_timeout_ms(Some(900_000)), AGENT_TIMEOUT_MAX_MS);
        assert_eq!(
            limits.agent_timeout_ms(Some(u64::MAX)),
            AGENT_TIMEOUT_MAX_MS
        );
        assert_eq!(limits.agent_timeout_ms(None), 300_000);
    }

    #[test]
    fn retry_delays_double_from_the_base_and_stop_at_thirty_seconds() {
        let limits = Limits::default();
        let delays: Vec<u64> = (1..=6).map(|r| limits.retry_delay_ms(r)).collect();
        assert_eq!(delays, [2_000, 4_000, 8_000, 16_000, 30_000, 30_000]);
        assert_eq!(limits.retry_delay_ms(u32::MAX), 30_000);
    }
}
