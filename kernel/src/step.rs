//! What one event did to the machine: a step (with its record), an observation, or nothing
//! (a leaf module below the machine, the desk and the journal).

use crate::input::Input;
use crate::phase::{Ignored, Phase};
use crate::rule::Rule;
use serde::{Deserialize, Serialize};
use std::fmt;

/// What one [`crate::Machine::handle`] call did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "kind")]
pub enum Handled {
    /// A transition (one step).
    Step(StepRecord),
    /// The event was observed but is not a step (a clock reading before the deadline).
    Observed,
    /// The event was not accepted; nothing changed except the `ignored_events` counter.
    Ignored {
        /// Why.
        why: Ignored,
        /// The phase that ignored it.
        phase: Phase,
    },
}

/// One transition, for traces and `terminus inspect`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct StepRecord {
    /// The step number (1-based).
    pub step: u32,
    /// The state before.
    pub from: Phase,
    /// The state after.
    pub to: Phase,
    /// The abstract input, as classified.
    pub input: Input,
    /// The rule that fired.
    pub rule: Rule,
}

impl fmt::Display for StepRecord {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "step {:>3}: {} --{}--> {} [{}]",
            self.step,
            self.from.as_str(),
            self.input.label(),
            self.to.as_str(),
            self.rule.name()
        )
    }
}
