//! For tests, fuzz targets and simulations (cargo feature `testing`): the exhaustive model check
//! and the invariant checkers to run after every event. Not part of the kernel's API.

use crate::machine::Machine;

pub use crate::explore::{Edge, Exploration, Observed, alphabet, explore};

/// Checks every invariant of the machine (the same checker [`Machine::restore`] runs).
pub fn check_machine(m: &Machine) -> Result<(), String> {
    m.check()
}

/// Checks one step of a run: counters never decrease, and a step strictly decreases the variant.
pub fn check_step(before: &Machine, after: &Machine, stepped: bool) -> Result<(), String> {
    let (a, b) = (before.stats(), after.stats());
    if !b.dominates(&a) {
        return Err(format!("a counter decreased: {a:?} -> {b:?}"));
    }
    if before.phase().is_terminal() && after.phase() != before.phase() {
        return Err(format!(
            "terminal {:?} was left for {:?}",
            before.phase(),
            after.phase()
        ));
    }
    if before.outcome().is_some() && after.outcome() != before.outcome() {
        return Err("a terminal outcome changed".into());
    }
    if stepped {
        if b.steps != a.steps + 1 {
            return Err(format!(
                "a step must add exactly one to steps: {} -> {}",
                a.steps, b.steps
            ));
        }
        if !after.phase().is_terminal() && after.variant() >= before.variant() {
            return Err(format!(
                "variant did not decrease: {} -> {}",
                before.variant(),
                after.variant()
            ));
        }
    } else if b.steps != a.steps {
        return Err("an event that was not a step changed steps".into());
    }
    Ok(())
}
