//! Invariants every run must keep, shared by the property tests, the model check, the fuzz
//! targets and the runtime's simulation: a check here fails the same way everywhere.

use crate::machine::Machine;
use crate::reason::{AbortReason, CompleteReason, Outcome};
use crate::stats::Stats;

/// Checks that the machine's counters respect its limits and agree with its state.
pub fn check_machine(m: &Machine) -> Result<(), String> {
    let p = m.policy();
    let s = m.stats();
    let k = m.streaks();
    let extra = u32::from(p.final_answer_on_budget);
    let le = |name: &str, v: u64, max: u64| -> Result<(), String> {
        if v > max {
            Err(format!("{name} = {v} exceeds its bound {max}"))
        } else {
            Ok(())
        }
    };
    le("steps", s.steps.into(), p.step_bound())?;
    le(
        "steps",
        s.steps.into(),
        u64::from(p.max_steps) + u64::from(extra),
    )?;
    le(
        "model_calls",
        s.model_calls.into(),
        u64::from(p.max_model_calls) + u64::from(extra),
    )?;
    le("nudges", s.nudges.into(), p.max_nudges.into())?;
    le(
        "verification_failures",
        s.verification_failures.into(),
        p.max_verification_failures.into(),
    )?;
    le("streaks.no_ops", k.no_ops.into(), p.max_no_ops.into())?;
    le(
        "streaks.empty_responses",
        k.empty_responses.into(),
        p.max_empty_responses.into(),
    )?;
    le(
        "streaks.model_retries",
        k.model_retries.into(),
        u64::from(p.max_model_retries) + 1,
    )?;
    le(
        "streaks.failed_tool_turns",
        k.failed_tool_turns.into(),
        p.max_consecutive_tool_failures.into(),
    )?;
    le("streaks.repeats", k.repeats.into(), p.max_repeats.into())?;
    if let Some(outcome) = m.outcome() {
        check_reason(outcome, &s, m)?;
    }
    Ok(())
}

/// Checks that a stop reason agrees with the counters that name it.
fn check_reason(outcome: Outcome, s: &Stats, m: &Machine) -> Result<(), String> {
    let p = m.policy();
    let k = m.streaks();
    let ok = match outcome {
        Outcome::Complete(CompleteReason::Verified) => s.verifications > s.verification_failures,
        Outcome::Complete(CompleteReason::Explicit | CompleteReason::Answered) => {
            !p.verify_completion
        }
        Outcome::Complete(CompleteReason::Forced)
        | Outcome::Aborted(AbortReason::VerificationLoop) => {
            s.verification_failures == p.max_verification_failures
        }
        Outcome::Aborted(AbortReason::MaxSteps) => s.steps >= p.max_steps,
        Outcome::Aborted(AbortReason::MaxModelCalls) => s.model_calls >= p.max_model_calls,
        Outcome::Aborted(AbortReason::NoProgress) => {
            k.no_ops == p.max_no_ops || k.repeats == p.max_repeats
        }
        Outcome::Aborted(AbortReason::Incomplete) => s.nudges == p.max_nudges,
        Outcome::Aborted(AbortReason::EmptyResponses) => k.empty_responses == p.max_empty_responses,
        Outcome::Aborted(AbortReason::ToolFailures) => {
            k.failed_tool_turns == p.max_consecutive_tool_failures || s.refused_calls > 0
        }
        Outcome::Aborted(AbortReason::UnrecoverableToolError) => s.tool_failures > 0,
        Outcome::Aborted(AbortReason::ModelError | AbortReason::ContextExhausted) => {
            s.model_errors > 0
        }
        Outcome::Aborted(AbortReason::TokenBudget) => {
            p.token_budget.is_some_and(|b| s.tokens() >= b)
        }
        Outcome::Aborted(AbortReason::Deadline) => p.deadline_ms.is_some(),
        Outcome::Aborted(AbortReason::Cancelled) => true,
    };
    if ok {
        Ok(())
    } else {
        Err(format!(
            "reason {outcome} disagrees with the counters {s:?} {k:?}"
        ))
    }
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
