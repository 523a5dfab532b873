//! The circuit breaker of one agent id: closed, open, half-open, as an explicit state machine
//! with the clock injected (`now_ms`, Unix milliseconds: breakers live in the journal store and
//! every process on it reads the same clock). Each input is answered by exactly one
//! [`BreakerRule`]; `spec/breaker.md` is that table, generated from this code.

use serde::{Deserialize, Serialize};
use std::fmt;

/// A breaker's state.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(tag = "state", rename_all = "snake_case")]
pub enum Breaker {
    /// Runs are admitted; `failures` in a row so far.
    Closed {
        /// Failures since the last success.
        failures: u32,
    },
    /// Runs are refused until `since_ms` + the timeout.
    Open {
        /// When it opened.
        since_ms: u64,
    },
    /// One probe run was admitted at `probe_ms`; others wait for its result (or for the
    /// timeout, if the probe's process died and never reported).
    HalfOpen {
        /// When the probe was admitted.
        probe_ms: u64,
    },
}

impl Default for Breaker {
    fn default() -> Breaker {
        Breaker::Closed { failures: 0 }
    }
}

impl Breaker {
    /// The state's name: `closed`, `open`, `half_open`.
    pub fn name(self) -> &'static str {
        match self {
            Breaker::Closed { .. } => "closed",
            Breaker::Open { .. } => "open",
            Breaker::HalfOpen { .. } => "half_open",
        }
    }
}

impl fmt::Display for Breaker {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A breaker's two limits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BreakerConfig {
    /// Failures in a row that open it (at least 1).
    pub threshold: u32,
    /// How long it stays open before a probe, and how long a probe may stay unanswered.
    pub timeout_ms: u64,
}

/// What a breaker is told.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum BreakerInput {
    /// May a run of this agent id start now?
    Admit,
    /// A run it admitted completed.
    Success,
    /// A run it admitted failed.
    Failure,
}

/// The answer to [`BreakerInput::Admit`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Admission {
    /// Run.
    Run,
    /// Run, as the one probe of a half-open breaker.
    Probe,
    /// Do not run; the breaker may admit a probe at `until_ms`.
    Refused {
        /// When the breaker admits again.
        until_ms: u64,
    },
}

macro_rules! rules {
    ($( $(#[$doc:meta])* $rule:ident = $name:literal, $from:literal, $input:literal, $guard:literal, $to:literal, $answer:literal; )*) => {
        /// The rule that answered an input: one per row of `spec/breaker.md`.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub enum BreakerRule {
            $( $(#[$doc])* $rule, )*
        }

        impl BreakerRule {
            /// Every rule, in table order.
            pub const ALL: &'static [BreakerRule] = &[$(BreakerRule::$rule),*];

            /// The rule's row: name, from, input, guard, to, answer.
            pub fn row(self) -> [&'static str; 6] {
                match self {
                    $(BreakerRule::$rule => [$name, $from, $input, $guard, $to, $answer],)*
                }
            }

            /// The rule's name (snake_case).
            pub fn name(self) -> &'static str {
                self.row()[0]
            }
        }
    };
}

rules! {
    /// A closed breaker admits.
    AdmitClosed = "admit_closed", "closed", "admit", "-", "closed", "run";
    /// An open breaker refuses before its timeout.
    RefuseOpen = "refuse_open", "open", "admit", "now < since + timeout", "open", "refused until since + timeout";
    /// An open breaker admits one probe once its timeout passed.
    ProbeAfterTimeout = "probe_after_timeout", "open", "admit", "now >= since + timeout", "half_open (probe = now)", "probe";
    /// A half-open breaker refuses while its probe is out.
    RefuseProbing = "refuse_probing", "half_open", "admit", "now < probe + timeout", "half_open", "refused until probe + timeout";
    /// A probe unanswered for the timeout is taken as lost (its process died): another probe.
    ReprobeLost = "reprobe_lost", "half_open", "admit", "now >= probe + timeout", "half_open (probe = now)", "probe";
    /// A success resets the failure count.
    SuccessResets = "success_resets", "closed", "success", "-", "closed (failures = 0)", "-";
    /// The probe succeeded: closed again.
    ProbeSucceeds = "probe_succeeds", "half_open", "success", "-", "closed (failures = 0)", "-";
    /// A success of a run admitted before the breaker opened changes nothing.
    LateSuccess = "late_success", "open", "success", "-", "open", "-";
    /// A failure is counted.
    FailureCounted = "failure_counted", "closed", "failure", "failures + 1 < threshold", "closed (failures + 1)", "-";
    /// The threshold-th failure in a row opens the breaker.
    FailureOpens = "failure_opens", "closed", "failure", "failures + 1 >= threshold", "open (since = now)", "-";
    /// The probe failed: open again, for another timeout.
    ProbeFails = "probe_fails", "half_open", "failure", "-", "open (since = now)", "-";
    /// A failure of a run admitted before the breaker opened changes nothing.
    LateFailure = "late_failure", "open", "failure", "-", "open", "-";
}

/// One step of a breaker.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BreakerStep {
    /// The state after.
    pub next: Breaker,
    /// The answer, for [`BreakerInput::Admit`].
    pub admission: Option<Admission>,
    /// The rule that answered.
    pub rule: BreakerRule,
}

impl Breaker {
    /// The breaker's answer to `input` at `now_ms`. Pure: the same state, input, time and
    /// config give the same step.
    pub fn step(self, input: BreakerInput, now_ms: u64, config: BreakerConfig) -> BreakerStep {
        use BreakerInput::{Admit, Failure, Success};
        let at = |next, admission, rule| BreakerStep {
            next,
            admission,
            rule,
        };
        let closed = Breaker::Closed { failures: 0 };
        match (self, input) {
            (Breaker::Closed { .. }, Admit) => {
                at(self, Some(Admission::Run), BreakerRule::AdmitClosed)
            }
            (Breaker::Open { since_ms }, Admit) => {
                let until_ms = since_ms.saturating_add(config.timeout_ms);
                if now_ms < until_ms {
                    let refused = Admission::Refused { until_ms };
                    at(self, Some(refused), BreakerRule::RefuseOpen)
                } else {
                    let probing = Breaker::HalfOpen { probe_ms: now_ms };
                    at(
                        probing,
                        Some(Admission::Probe),
                        BreakerRule::ProbeAfterTimeout,
                    )
                }
            }
            (Breaker::HalfOpen { probe_ms }, Admit) => {
                let until_ms = probe_ms.saturating_add(config.timeout_ms);
                if now_ms < until_ms {
                    let refused = Admission::Refused { until_ms };
                    at(self, Some(refused), BreakerRule::RefuseProbing)
                } else {
                    let probing = Breaker::HalfOpen { probe_ms: now_ms };
                    at(probing, Some(Admission::Probe), BreakerRule::ReprobeLost)
                }
            }
            (Breaker::Closed { .. }, Success) => at(closed, None, BreakerRule::SuccessResets),
            (Breaker::HalfOpen { .. }, Success) => at(closed, None, BreakerRule::ProbeSucceeds),
            (Breaker::Open { .. }, Success) => at(self, None, BreakerRule::LateSuccess),
            (Breaker::Closed { failures }, Failure) => {
                let failures = failures.saturating_add(1);
                if failures < config.threshold {
                    at(
                        Breaker::Closed { failures },
                        None,
                        BreakerRule::FailureCounted,
                    )
                } else {
                    let open = Breaker::Open { since_ms: now_ms };
                    at(open, None, BreakerRule::FailureOpens)
                }
            }
            (Breaker::HalfOpen { .. }, Failure) => {
                let open = Breaker::Open { since_ms: now_ms };
                at(open, None, BreakerRule::ProbeFails)
            }
            (Breaker::Open { .. }, Failure) => at(self, None, BreakerRule::LateFailure),
        }
    }

    /// Whether a failed run may be retried: only while the breaker is closed.
    pub fn allows_retry(self) -> bool {
        matches!(self, Breaker::Closed { .. })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const CONFIG: BreakerConfig = BreakerConfig {
        threshold: 3,
        timeout_ms: 300_000,
    };

    #[test]
    fn three_failures_open_it_and_five_minutes_later_one_probe_may_run() {
        let mut b = Breaker::default();
        for (n, now) in [(1, 10), (2, 20)] {
            b = b.step(BreakerInput::Failure, now, CONFIG).next;
            assert_eq!(b, Breaker::Closed { failures: n });
        }
        let opened = b.step(BreakerInput::Failure, 30, CONFIG);
        assert_eq!(opened.rule, BreakerRule::FailureOpens);
        let b = opened.next;
        let early = b.step(BreakerInput::Admit, 30 + 299_999, CONFIG);
        assert_eq!(
            early.admission,
            Some(Admission::Refused { until_ms: 300_030 })
        );
        let probe = b.step(BreakerInput::Admit, 300_030, CONFIG);
        assert_eq!(probe.admission, Some(Admission::Probe));
        let b = probe.next;
        assert_eq!(
            b.step(BreakerInput::Admit, 300_031, CONFIG).admission,
            Some(Admission::Refused { until_ms: 600_030 }),
            "one probe at a time"
        );
        let closed = b.step(BreakerInput::Success, 300_040, CONFIG);
        assert_eq!(closed.next, Breaker::Closed { failures: 0 });
        assert_eq!(closed.rule, BreakerRule::ProbeSucceeds);
    }

    #[test]
    fn the_state_round_trips_through_json() {
        for b in [
            Breaker::Closed { failures: 2 },
            Breaker::Open { since_ms: 7 },
            Breaker::HalfOpen { probe_ms: 9 },
        ] {
            let json = serde_json::to_value(b).expect("encode");
            assert_eq!(serde_json::from_value::<Breaker>(json).expect("decode"), b);
        }
    }
}
