//! What the desk keeps of tool calls: the ledger's counts and exclusions as a batch goes out
//! ([`Desk::run_calls`]), and as its results come back (failures, budgets and their resets,
//! the todo list a `write_todos` call staged).

use super::{Desk, POLLER_SAID_CHARS, Pending, Plan, PollerSaid};
use crate::command::{Command, Notice, ToolBatch};
use crate::event::{ToolCall, ToolOutcome, ToolResult};
use crate::fingerprint::calls_fingerprint;
use crate::ledger::Exclusion;
use crate::policy::{OnUnrecoverable, Policy};
use crate::todo::{WRITE_TODOS, parse_todos};

impl Desk {
    /// Commits `calls` to the ledger as `plan` decided each one, and hands them out.
    #[inline(always)]
    pub(crate) fn run_calls(&mut self, calls: Vec<ToolCall>, plan: Plan) {
        let desk = self;
        let mut pending = Pending {
            executed: 0,
            ids: 0,
            calls: calls_fingerprint(&calls),
        };
        desk.staged_todos.clear();
        if plan.refused.is_empty() {
            // The common case: every call runs.
            for call in &calls {
                desk.ledger.update(&call.name, |record| {
                    record.calls = record.calls.saturating_add(1);
                });
                desk.run(call, &mut pending);
            }
        } else {
            let mut refusals = plan.refused.iter().peekable();
            // Tools a lifting block refused in this turn: their `blocked_turns` count once each.
            let mut blocked: Vec<&str> = Vec::new();
            for (i, call) in calls.iter().enumerate() {
                let refusal = refusals.next_if(|(j, _)| *j == i).map(|&(_, e)| e);
                let first_block = matches!(refusal, Some(Exclusion::Budget(b)) if b.lifted_by_reset())
                    && !blocked.contains(&call.name.as_str());
                if first_block {
                    blocked.push(call.name.as_str());
                }
                let runs = desk.ledger.update(&call.name, |record| match refusal {
                    Some(exclusion) => {
                        record.refused = record.refused.saturating_add(1);
                        if first_block {
                            record.blocked_turns = record.blocked_turns.saturating_add(1);
                        }
                        // A budget's block follows from the counts: only an exclusion is kept.
                        if record.excluded.is_none() && !matches!(exclusion, Exclusion::Budget(_)) {
                            record.excluded = Some(exclusion);
                        }
                        false
                    }
                    None => {
                        record.calls = record.calls.saturating_add(1);
                        true
                    }
                });
                if runs {
                    desk.run(call, &mut pending);
                }
            }
        }
        desk.pending = pending;
        desk.out.push_back(Command::RunTools(ToolBatch {
            calls,
            refused: plan.refused,
            warnings: plan.warnings,
        }));
    }
}

impl Desk {
    /// Resets every tool budget whose `reset_on` names a tool that succeeded in `results` (the
    /// agent posted its checkpoint): its count starts again and a block it set is lifted; and
    /// lifts each tier whose `reset_on` names one. After the batch is recorded, so a budgeted
    /// call of the same batch is counted before the reset.
    #[inline(never)]
    pub(super) fn reset_budgets(&mut self, policy: &Policy, results: &[ToolResult]) {
        let succeeded = |on: &String| {
            results
                .iter()
                .any(|r| r.name.as_str() == on && matches!(r.outcome, ToolOutcome::Ok(_)))
        };
        for (tool, budget) in &policy.tool_budgets {
            if !budget.tiers.is_empty() {
                self.ledger.lift_tiers(tool, &budget.tiers, |tier| {
                    tier.reset_on.iter().any(succeeded)
                });
                continue;
            }
            let reset = budget.reset_on.iter().any(succeeded);
            if reset {
                self.ledger.reset_budget(tool);
                self.checkpoint_share = self.told_tokens;
            }
        }
    }

    /// Records tool results in the ledger and the todo list, and returns the notice of the
    /// tools they excluded (see [`Cx::accept_results`]).
    #[inline(never)]
    pub(super) fn record_results(
        &mut self,
        policy: &Policy,
        results: &[ToolResult],
    ) -> Option<Box<Notice>> {
        let mut excluded: Vec<(String, Exclusion)> = Vec::new();
        for r in results {
            match &r.outcome {
                ToolOutcome::Ok(_) => {
                    self.ledger.update(&r.name, |record| {
                        record.successes = record.successes.saturating_add(1);
                    });
                    if r.name == WRITE_TODOS {
                        self.apply_todos(&r.call_id);
                    }
                }
                ToolOutcome::Error { kind, .. } => {
                    let now_excluded = self.ledger.update(&r.name, |record| {
                        record.failures = record.failures.saturating_add(1);
                        if record.excluded.is_some() {
                            return None;
                        }
                        let exclusion = if kind.is_unrecoverable()
                            && policy.on_unrecoverable_tool_error == OnUnrecoverable::Exclude
                        {
                            Exclusion::Unrecoverable { kind: *kind }
                        } else if record.failures >= policy.max_tool_failures {
                            Exclusion::Failures {
                                count: record.failures,
                            }
                        } else {
                            return None;
                        };
                        record.excluded = Some(exclusion);
                        Some(exclusion)
                    });
                    if let Some(exclusion) = now_excluded {
                        excluded.push((r.name.as_str().to_owned(), exclusion));
                    }
                }
            }
        }
        if excluded.is_empty() {
            return None;
        }
        let text = excluded
            .iter()
            .map(|(tool, exclusion)| {
                format!(
                    "The tool `{tool}` is now excluded because {exclusion}; do not call it again."
                )
            })
            .collect::<Vec<_>>()
            .join("\n");
        let notice = Notice::Excluded {
            tools: excluded,
            text,
        };
        Some(Box::new(notice))
    }

    /// A call that runs: awaited, and its todos staged if it writes them.
    #[inline(always)]
    fn run(&mut self, call: &ToolCall, pending: &mut Pending) {
        pending.executed = pending.executed.saturating_add(1);
        pending.ids = pending.ids.wrapping_add(call.id.fingerprint());
        if call.name == WRITE_TODOS
            && let Ok(todos) = parse_todos(&call.arguments)
        {
            self.staged_todos.push((call.id.fingerprint(), todos));
        }
    }

    /// A `write_todos` call succeeded: the todos it staged become the list.
    pub(super) fn apply_todos(&mut self, call_id: &crate::name::CallId) {
        let id = call_id.fingerprint();
        if let Some(pos) = self.staged_todos.iter().position(|(k, _)| *k == id) {
            self.todos = self.staged_todos.swap_remove(pos).1;
        }
    }

    /// Keeps the last successful result of a declared poller among `results`, with `polls`, the
    /// poll streak these results make (the nudges quote it: a model that stops polling is told
    /// what its poller said last). A tool turn without a poller ends the streak the nudges see.
    pub(super) fn remember_poller(&mut self, policy: &Policy, results: &[ToolResult], polls: u32) {
        let latest = results.iter().rev().find_map(|r| match &r.outcome {
            ToolOutcome::Ok(output)
                if policy.pollers.iter().any(|p| p.as_str() == r.name.as_str()) =>
            {
                Some((r, output))
            }
            _ => None,
        });
        let Some((r, output)) = latest else {
            if let Some(said) = &mut self.poller_said {
                said.same = 0;
            }
            return;
        };
        let text = match output.as_str() {
            Some(text) => text.to_owned(),
            None => output.to_string(),
        };
        let text = text.split_whitespace().collect::<Vec<_>>().join(" ");
        self.poller_said = Some(Box::new(PollerSaid {
            name: r.name.as_str().to_owned(),
            result: text.chars().take(POLLER_SAID_CHARS).collect(),
            same: polls,
        }));
    }
}
