//! The invariants every machine keeps, in one checker. [`crate::Machine::restore`] runs it on
//! bytes from outside the process; the property tests, the model check, the fuzz targets and the
//! runtime's simulation run it after every event (through `testing::check_machine`), so a check
//! here fails the same way everywhere.
//!
//! The bounds come from the table in [`crate::catalog`]: a live run is below every limit (the step
//! that reaches a limit ends the run), an ended one at most at its bound.

use crate::catalog;
use crate::command::Command;
use crate::core::{Core, State};
use crate::desk::Desk;
use crate::phase::Phase;
use crate::reason::{AbortReason, CompleteReason, Outcome};
use crate::stats::{Stats, Streaks};

/// Checks the machine made of `state`, `core` and `desk`.
pub(crate) fn check(state: &State, core: &Core, desk: &Desk) -> Result<(), String> {
    let (p, s, k) = (&core.policy, &core.stats, &core.streaks);
    let phase = state.phase();
    let inconsistent = |what: String| Err(format!("{what} in {}", phase.as_str()));
    let finalizing = state.finalizing();
    // The one final-answer call: only under `final_answer_on_budget`, for a spent budget.
    if let Some(budget) = finalizing {
        let spent = catalog::ALL.iter().any(|l| {
            l.final_answer
                && l.outcome(p) == Outcome::Aborted(budget)
                && l.spent_before_final(p, s, k)
        });
        if !p.final_answer_on_budget || !spent {
            return inconsistent(format!(
                "a final-answer call for {budget:?} that is not due"
            ));
        }
    }
    for limit in &catalog::ALL {
        let count = limit.count(s, k);
        let max = if phase.is_terminal() {
            limit.bound(p)
        } else {
            limit.live_max(p, finalizing.is_some())
        };
        if let Some(max) = max
            && count > max
        {
            return inconsistent(format!(
                "{} = {count} is past its bound {max} ({} = {:?})",
                limit.counter,
                limit.field,
                limit.value(p)
            ));
        }
    }
    // What the limits allow together (`Policy::step_bound`): no run takes more steps, ended or
    // not, though a saved machine can claim more under a policy of lower limits.
    // A raise takes one step past the bound of the policy before it.
    let bound = p.step_bound().saturating_add(u64::from(desk.raises));
    if u64::from(s.steps) > bound {
        return inconsistent(format!("{} steps are past the step bound {bound}", s.steps));
    }
    if s.verifications < s.verification_failures {
        return inconsistent("more verification failures than verifications".into());
    }
    if k.repeats > 1 && s.repeats == 0 {
        return inconsistent("a repeat streak without repeats".into());
    }
    if k.polls > s.polls {
        return inconsistent("a poll streak longer than the polls".into());
    }
    // The last poll's count is the poll streak: both are set by the step that accepts a poll.
    if desk.last_poll.is_some_and(|p| p.times != k.polls) {
        return inconsistent("the last poll's count is not the poll streak".into());
    }
    // A tier's mark is the tool's calls at a lift: never more than it made.
    if let Some((tool, _)) = desk
        .ledger
        .iter()
        .find(|(_, r)| r.tier_marks.0.iter().any(|&m| m > r.calls))
    {
        return inconsistent(format!("a tier of `{tool}` lifted past its calls"));
    }
    if !desk.loops.is_consistent(k.repeats, p.max_loop_period) {
        return inconsistent("a repeat detector out of range".into());
    }
    // A token warning was given only at one of its shares, and only once the tokens passed it.
    if desk.told_tokens != 0 {
        let used = u128::from(s.input_tokens.saturating_add(s.output_tokens));
        let passed = p
            .token_budget
            .is_some_and(|budget| used * 100 >= u128::from(budget) * u128::from(desk.told_tokens));
        if !crate::desk::TOKEN_WARNINGS.contains(&desk.told_tokens) || !passed {
            return inconsistent(format!(
                "a token warning at {} % the tokens used do not reach",
                desk.told_tokens
            ));
        }
    }
    // Every step answers an event, and every event but cancel and the deadline answers a model
    // call (a turn or error) or a turn (results or verdict): at most two steps per model call,
    // and a live machine waiting for the model has not taken the step of its answer yet.
    let awaiting_model = matches!(phase, Phase::Exploring | Phase::Nudged);
    let pending_answer = if phase.is_terminal() {
        0
    } else if awaiting_model {
        2
    } else {
        1
    };
    // A budget stop and the raise after it are two steps for the one event (counted once).
    let raised = u64::from(desk.raises);
    if u64::from(s.steps) + pending_answer > 2 * u64::from(s.model_calls) + raised {
        return inconsistent(format!(
            "{} steps for {} model calls",
            s.steps, s.model_calls
        ));
    }
    // Queued commands: a Stop comes last, only in a terminal state, and agrees with it.
    for (i, command) in desk.out.iter().enumerate() {
        let Command::Stop(stop) = command else {
            continue;
        };
        let mut stats = stop.stats;
        stats.ignored_events = desk.ignored;
        let mut now = *s;
        now.ignored_events = desk.ignored;
        if i + 1 != desk.out.len()
            || Some(stop.outcome) != state.outcome()
            || stats != now
            || stop.stats.ignored_events > desk.ignored
            || stop.result != desk.result
        {
            return inconsistent("a queued Stop that disagrees with the machine".into());
        }
    }
    // A pre-empted step is kept only by a run a raisable budget stopped.
    if desk.preempted.is_some() {
        let raisable = state.outcome().is_some_and(|outcome| {
            catalog::RAISABLE
                .iter()
                .any(|l| l.outcome(p) == outcome && l.value(p).is_some())
        });
        if !raisable {
            return inconsistent("a pre-empted step kept by a run no budget stopped".into());
        }
    }
    if let Some(outcome) = state.outcome() {
        return check_reason(outcome, core);
    }
    // Counters a live run still adds to must have room, far beyond any real run, so that
    // continuing cannot overflow them.
    let narrow = Stats::FIELDS
        .iter()
        .filter(|f| !f.wide)
        .map(|f| (f.get)(s))
        .chain(Streaks::FIELDS.iter().map(|f| (f.get)(k)));
    if narrow.into_iter().any(|c| c > u64::from(u32::MAX / 2)) {
        return inconsistent(format!("a counter past 2^31 ({s:?}, {k:?})"));
    }
    Ok(())
}

/// Checks that a stop reason agrees with the counters that name it: a limit's reason needs a
/// limit of that reason at its firing value, or one of the other ways to that reason.
fn check_reason(outcome: Outcome, core: &Core) -> Result<(), String> {
    let (p, s, k) = (&core.policy, &core.stats, &core.streaks);
    let fired = |reason: Outcome| {
        catalog::ALL
            .iter()
            .any(|l| l.outcome(p) == reason && l.ended(p, s, k))
    };
    let ok = match outcome {
        Outcome::Complete(CompleteReason::Verified) => s.verifications > s.verification_failures,
        Outcome::Complete(CompleteReason::Explicit | CompleteReason::Answered) => !p.verifies(),
        Outcome::Aborted(AbortReason::MaxSteps) => s.steps >= p.max_steps,
        Outcome::Aborted(AbortReason::ToolFailures) => fired(outcome) || s.refused_calls > 0,
        Outcome::Aborted(AbortReason::UnrecoverableToolError) => s.tool_failures > 0,
        Outcome::Aborted(AbortReason::ModelError) => s.model_errors > 0,
        Outcome::Aborted(AbortReason::ContextExhausted) => s.model_errors > 0,
        Outcome::Aborted(AbortReason::Deadline) => p.deadline_ms.is_some(),
        Outcome::Aborted(AbortReason::Cancelled) => true,
        _ => fired(outcome),
    };
    if ok {
        Ok(())
    } else {
        Err(format!(
            "reason {outcome} disagrees with the counters {s:?} {k:?}"
        ))
    }
}
