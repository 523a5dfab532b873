//! Step 1 of every event: what it is. [`Desk::classify`] turns the concrete event and what the
//! desk knows into one abstract [`crate::input::Input`] and the [`Arrival`] it would commit,
//! without changing anything (pure).

use super::{Arrival, Desk, Plan};
use crate::answer;
use crate::catalog;
use crate::command::BudgetWarning;
use crate::event::{Event, Finish, ModelErrorKind, ModelTurn, ToolCall, ToolOutcome, ToolResult};
use crate::fingerprint::result_fingerprint;
use crate::input::{Batch, EmptyKind, ErrorClass, Gate, Input, NoOpKind, TurnKind};
use crate::ledger::{Block, BlockedBy, Exclusion, ToolRecord};
use crate::loops::Repetition;
use crate::policy::Policy;
use crate::textcall::{self, TextToolCalls};
use crate::tool_budget::{MAX_TIERS, Tier};

impl Desk {
    /// The abstract input an event is, with what it would change; `None` for tool results that do
    /// not answer the calls in flight.
    ///
    /// The arrival is written in place, into `arrival` (which is `Arrival::Nothing` before), so
    /// that nothing of it is built on the stack and copied (a copy of a freshly written enum
    /// stalls on store forwarding).
    #[inline(always)]
    pub(crate) fn classify<'e>(
        &self,
        policy: &Policy,
        event: &'e mut Event,
        arrival: &mut Arrival<'e>,
    ) -> Option<Input> {
        Some(match event {
            Event::ModelTurn(turn) => {
                let (input_tokens, output_tokens) = turn
                    .usage
                    .map_or((0, 0), |u| (u.input_tokens, u.output_tokens));
                let text = turn
                    .tool_calls
                    .is_empty()
                    .then(|| self.classify_text_turn(policy, turn));
                *arrival = Arrival::Turn {
                    turn,
                    plan: Plan::default(),
                };
                let kind = match (text, &mut *arrival) {
                    (Some(kind), _) => kind,
                    // A tool turn: its plan is made where the arrival holds it.
                    (None, Arrival::Turn { turn, plan }) => {
                        self.plan(policy, &turn.tool_calls, plan);
                        TurnKind::Tools {
                            runnable: plan.runnable,
                            refused: u32::try_from(plan.refused.len()).unwrap_or(u32::MAX),
                            blocked: plan.blocked,
                        }
                    }
                    (None, _) => return None,
                };
                Input::Turn {
                    kind,
                    input_tokens,
                    output_tokens,
                }
            }
            Event::ModelError {
                kind,
                retry_after_ms,
            } => {
                let class = match kind {
                    ModelErrorKind::RateLimited
                    | ModelErrorKind::Server
                    | ModelErrorKind::Timeout => ErrorClass::Retryable {
                        retry_after_ms: *retry_after_ms,
                    },
                    ModelErrorKind::Auth | ModelErrorKind::BadRequest => ErrorClass::Fatal,
                    ModelErrorKind::ContextOverflow => ErrorClass::ContextOverflow,
                };
                Input::ModelError(class)
            }
            Event::ToolResults(results) => return self.classify_results(policy, results, arrival),
            Event::Verdict(verdict) => {
                *arrival = Arrival::Verdict(verdict);
                Input::Verdict {
                    accepted: verdict.complete,
                }
            }
            Event::Tick { now_ms } => {
                let now_ms = self.now_ms.max(*now_ms);
                let deadline_passed = policy.deadline_ms.is_some_and(|d| now_ms >= d);
                *arrival = Arrival::Tick(now_ms);
                Input::Tick { deadline_passed }
            }
            Event::Cancel => Input::Cancel,
        })
    }

    /// Tool results as an input, their arrival written in place; `None` when they do not answer
    /// the calls in flight.
    #[inline(always)]
    pub(crate) fn classify_results<'e>(
        &self,
        policy: &Policy,
        results: &'e [ToolResult],
        arrival: &mut Arrival<'e>,
    ) -> Option<Input> {
        if !self.answers_pending(results) {
            return None;
        }
        let (batch, fingerprint, new, repetition) = self.summarize_results(policy, results);
        *arrival = Arrival::Results {
            results,
            fingerprint,
            poll: (batch.polls > 0).then_some(batch.polls),
            new,
            repetition,
        };
        Some(Input::ToolResults(batch))
    }

    /// A turn without tool calls.
    fn classify_text_turn(&self, policy: &Policy, turn: &ModelTurn) -> TurnKind {
        let substantive = !turn.text.trim().is_empty();
        let zero_usage = turn.usage.is_some_and(|u| u.is_zero());
        if !substantive {
            match turn.finish {
                Finish::Length => TurnKind::Empty(EmptyKind::Truncated),
                Finish::ContentFilter => TurnKind::Empty(EmptyKind::Filtered),
                _ if turn.reasoning => TurnKind::Empty(EmptyKind::ReasoningOnly),
                _ if zero_usage => TurnKind::Empty(EmptyKind::Blank),
                _ => TurnKind::NoOp(NoOpKind::Silent),
            }
        } else {
            match (turn.finish, turn.needs_more_work) {
                (Finish::Repetition, _) => TurnKind::NoOp(NoOpKind::Repetitive),
                (Finish::Length, _) => TurnKind::NoOp(NoOpKind::Truncated),
                (Finish::ContentFilter, _) => TurnKind::NoOp(NoOpKind::Filtered),
                _ if policy.text_tool_calls != TextToolCalls::Off
                    && textcall::find(&turn.text).is_some() =>
                {
                    TurnKind::NoOp(NoOpKind::TextCall)
                }
                (_, Some(true)) => TurnKind::NoOp(NoOpKind::NeedsMoreWork),
                // What a final answer is: never the kernel's own words, never (when nobody is
                // there to answer) a reply that only hands the task back.
                _ if answer::imagined_result(&turn.text) => {
                    TurnKind::NoOp(NoOpKind::ImaginedResult)
                }
                _ if self.said.echoed_by(&turn.text) => TurnKind::NoOp(NoOpKind::Echo),
                _ if policy.autonomous && answer::hands_back(&turn.text, &self.said) => {
                    TurnKind::NoOp(NoOpKind::NonAnswer)
                }
                (_, needs_more_work) => TurnKind::Claim {
                    explicit: needs_more_work == Some(false),
                    gate: self.gate(policy),
                },
            }
        }
    }

    /// What a completion claim still lacks, from the todo list and the ledger (rules 5, 8).
    pub(crate) fn gate(&self, policy: &Policy) -> Gate {
        Gate {
            open_todos: self.todos.iter().any(|t| t.status.is_open()),
            missing_required: policy
                .completion_requires
                .iter()
                .any(|t| !self.ledger.succeeded(t)),
        }
    }

    /// Decides every call of a tool turn. A call is refused when its tool is excluded, or when it
    /// would reach a bound of its tool's budget ([`crate::catalog::TOOL_BOUNDS`]: `block_at` counting
    /// the calls since the budget's last reset, `hard_block_at` those of the whole run), counting
    /// the earlier calls of this turn; a call at or past `warn_at` carries a warning. Linear in
    /// the calls; allocates only for refusals, warnings and budgeted tools.
    #[inline]
    fn plan(&self, policy: &Policy, calls: &[ToolCall], plan: &mut Plan) {
        // The common case: no tool is excluded and none has a budget, so every call runs.
        if !self.ledger.any_excluded() && policy.tool_budgets.is_empty() {
            plan.runnable = u32::try_from(calls.len()).unwrap_or(u32::MAX);
            return;
        }
        self.plan_each(policy, calls, plan);
    }

    /// [`Desk::plan`], call by call.
    #[inline(never)]
    fn plan_each(&self, policy: &Policy, calls: &[ToolCall], plan: &mut Plan) {
        // Calls of each budgeted tool so far in this turn.
        let mut in_turn: Vec<(&str, u32)> = Vec::new();
        for (i, call) in calls.iter().enumerate() {
            let tool = call.name.as_str();
            if let Some(exclusion) = self.ledger.exclusion(tool) {
                if matches!(exclusion, Exclusion::Budget(_)) {
                    plan.blocked = plan.blocked.saturating_add(1);
                }
                plan.refused.push((i, exclusion));
                continue;
            }
            let Some(budget) = policy.tool_budgets.get(tool) else {
                plan.runnable = plan.runnable.saturating_add(1);
                continue;
            };
            let earlier = match in_turn.iter_mut().find(|(t, _)| *t == tool) {
                Some((_, n)) => n,
                None => {
                    in_turn.push((tool, 0));
                    let last = in_turn.len() - 1;
                    &mut in_turn[last].1
                }
            };
            let record = self.ledger.get(tool).copied().unwrap_or_default();
            if !budget.tiers.is_empty() {
                match tiered(&budget.tiers, &record, *earlier) {
                    Err(block) => {
                        plan.blocked = plan.blocked.saturating_add(1);
                        plan.refused.push((i, Exclusion::Budget(block)));
                    }
                    Ok(warning) => {
                        *earlier += 1;
                        plan.runnable = plan.runnable.saturating_add(1);
                        if let Some(warning) = warning {
                            plan.warnings.push((i, warning));
                        }
                    }
                }
                continue;
            }
            // The call's number as each bound counts (1-based), and the calls left before the
            // first bound it reaches (0: this call is refused).
            let mut left = u32::MAX;
            let mut block = None;
            for bound in catalog::TOOL_BOUNDS {
                let Some(at) = (bound.limit)(budget) else {
                    continue;
                };
                let call_no = bound
                    .count(record.calls, record.budget_calls())
                    .saturating_add(*earlier)
                    .saturating_add(1);
                // A reached bound that nothing lifts is the one to name (a checkpoint would not
                // help); otherwise the first reached.
                if call_no >= at
                    && block.is_none_or(|b: Block| b.lifted_by_reset() && !bound.resets)
                {
                    block = Some(Block::bound(bound, at));
                }
                left = left.min(at.saturating_sub(call_no));
            }
            if let Some(block) = block {
                plan.blocked = plan.blocked.saturating_add(1);
                plan.refused.push((i, Exclusion::Budget(block)));
                continue;
            }
            *earlier += 1;
            plan.runnable = plan.runnable.saturating_add(1);
            // Calls since the budget's last reset (`reset_on`) count for its warning.
            let call_no = record.budget_calls().saturating_add(*earlier);
            if let Some(warn_at) = budget.warn_at
                && call_no >= warn_at
            {
                let bounded = left != u32::MAX;
                let warning = BudgetWarning {
                    call: call_no,
                    // The call, in this count, from which calls are refused.
                    block_at: bounded.then(|| call_no.saturating_add(left)),
                    last: bounded && left == 1,
                    tier: None,
                };
                plan.warnings.push((i, warning));
            }
        }
    }

    #[inline(always)]
    fn answers_pending(&self, results: &[ToolResult]) -> bool {
        let ids = results
            .iter()
            .fold(0u64, |acc, r| acc.wrapping_add(r.call_id.fingerprint()));
        u32::try_from(results.len()).is_ok_and(|n| n == self.pending.executed)
            && ids == self.pending.ids
    }

    // Inlined into the classification: its summary stays in registers (returned through memory,
    // each part is copied, and a copy of freshly written memory stalls on store forwarding).
    #[inline(always)]
    fn summarize_results(
        &self,
        policy: &Policy,
        results: &[ToolResult],
    ) -> (Batch, Option<u64>, bool, Repetition) {
        let mut failed = 0u32;
        let mut unrecoverable = false;
        let mut fingerprint = self.pending.calls;
        for r in results {
            // Results arrive in any order: combine their fingerprints commutatively.
            fingerprint = fingerprint.wrapping_add(result_fingerprint(r).rotate_left(17));
            if let ToolOutcome::Error { kind, .. } = r.outcome {
                failed = failed.saturating_add(1);
                unrecoverable |= kind.is_unrecoverable();
            }
        }
        // Only turns in which every call succeeded feed the repeat detector (issue: a failing
        // call repeated is a broken tool, for the failure counters to name).
        // A turn whose every call was refused (by a budget) ran nothing: it repeats nothing.
        // A poll: every call names a declared poller and succeeded. The same results again are
        // waiting, counted apart (`max_polls`), and never a window of the repeat detector.
        let poll = failed == 0
            && !results.is_empty()
            && !policy.pollers.is_empty()
            && results
                .iter()
                .all(|r| policy.pollers.iter().any(|p| p.as_str() == r.name.as_str()));
        let polls = match self.last_poll {
            _ if !poll => 0,
            Some(last) if last.fingerprint == fingerprint => last.times.saturating_add(1),
            _ => 1,
        };
        let (fingerprint, new, repetition) = if poll {
            (Some(fingerprint), false, Repetition::NONE)
        } else if failed == 0 && !results.is_empty() {
            // The common case: a turn unlike any of the last ones, which repeats nothing.
            let new = !self.loops.may_repeat(fingerprint);
            let seen = if new {
                Repetition::NONE
            } else {
                self.loops.peek(fingerprint, policy.max_loop_period)
            };
            (Some(fingerprint), new, seen)
        } else {
            (None, false, Repetition::NONE)
        };
        let batch = Batch {
            failed,
            all_failed: failed > 0 && usize::try_from(failed).is_ok_and(|f| f == results.len()),
            unrecoverable,
            repeats: repetition.times,
            polls,
            checkpoint: policy.auto_checkpoints > 0 && self.checkpoint_due(policy, results),
        };
        (batch, fingerprint, new, repetition)
    }

    /// Whether a checkpoint is due after `results`: some budget that a checkpoint lifts has
    /// refused calls of its tool in two tool turns since its last reset (the agent was told how
    /// to lift the block and did not), and no tool of its `reset_on` succeeded in `results`.
    #[cold]
    fn checkpoint_due(&self, policy: &Policy, results: &[ToolResult]) -> bool {
        policy.tool_budgets.iter().any(|(tool, budget)| {
            !budget.reset_on.is_empty()
                && self
                    .ledger
                    .get(tool)
                    .is_some_and(|record| record.blocked_turns >= 2)
                && !results.iter().any(|r| {
                    matches!(r.outcome, ToolOutcome::Ok(_))
                        && budget.reset_on.iter().any(|on| r.name.as_str() == on)
                })
        })
    }
}

/// A call of a tool whose budget has tiers, after `earlier` calls of it in this turn: refused by
/// a tier whose block it reaches (one nothing lifts named first, else the first), or run, with
/// the warning of the warning tier whose block is nearest (else the first warning one).
fn tiered(
    tiers: &[Tier],
    record: &ToolRecord,
    earlier: u32,
) -> Result<Option<BudgetWarning>, Block> {
    let made = record.calls.saturating_add(earlier);
    let mut block: Option<(Block, bool)> = None;
    let mut warning: Option<(BudgetWarning, u32)> = None;
    for (index, tier) in tiers.iter().enumerate().take(MAX_TIERS) {
        let Some(counted) = tier.count(made, record.tier_marks.get(index)) else {
            continue; // passed: counted over the run and lifted
        };
        let call = counted.saturating_add(1);
        let index = u8::try_from(index).unwrap_or(u8::MAX);
        if let Some(at) = tier.block_at
            && call >= at
        {
            let hard = tier.reset_on.is_empty();
            if block.is_none_or(|(_, was_hard)| hard && !was_hard) {
                let by = BlockedBy::Tier { index, call };
                block = Some((Block { by, at }, hard));
            }
            continue;
        }
        if tier.warn_at.is_none_or(|w| call < w) {
            continue;
        }
        let left = tier.block_at.map_or(u32::MAX, |at| at.saturating_sub(call));
        if warning.is_none_or(|(_, nearest)| left < nearest) {
            let w = BudgetWarning {
                call,
                block_at: tier.block_at,
                last: left == 1,
                tier: Some(index),
            };
            warning = Some((w, left));
        }
    }
    match block {
        Some((block, _)) => Err(block),
        None => Ok(warning.map(|(w, _)| w)),
    }
}
