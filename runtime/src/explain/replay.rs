//! The builder that replays a journal into an [`Explanation`]: [`Builder`] reads an
//! execution's records in key order (through the kernel's [`Replay`] for the streaks, the tool
//! ledger and the todos), and [`read`] feeds it a store's journal page by page.

use super::prose::why;
use super::types::{Budget, Explanation, Feedback, PathStep, RuleRow, Stored, ToolError, ToolView};
use crate::ToolBudgetEvent;
use crate::budget::tool_budget_events;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use terminus_kernel::catalog;
use terminus_kernel::{
    Command, Decision, Entry, ModelErrorKind, Notice, NudgeKind, Outcome, Policy, Record, Replay,
    Rule, Stats, StepRecord, Stop, Streaks, ToolOutcome,
};

/// Explains `execution` as `store` keeps it: its spec, report, failure and conflicts, and its
/// journal read page by page (512 records a page) into a [`Builder`]. `None` when the store has
/// no such execution.
pub async fn read(
    store: &dyn crate::Claims,
    execution: &str,
) -> Result<Option<Explanation>, crate::StoreError> {
    let Some(spec) = store.spec(execution).await? else {
        return Ok(None);
    };
    let report = store.report(execution).await?;
    let failure = store.failure(execution).await?;
    let conflicts = store.conflicts(execution).await?;
    let mut builder = Builder::new(&spec.policy);
    let mut after = None;
    loop {
        let page = store.page(execution, after, 512).await?;
        let Some(last) = page.last() else { break };
        after = Some(last.key);
        for record in &page {
            builder.push(record);
        }
    }
    Ok(Some(builder.finish(&Stored {
        execution,
        spec: &spec,
        report: report.as_ref(),
        failure: failure.as_ref(),
        conflicts,
    })))
}

/// Builds an [`Explanation`] from records fed in key order; no IO.
pub struct Builder {
    policy: Policy,
    /// Whether the records are replayed through the kernel (not when the host has the machine).
    replaying: bool,
    replay: Option<Replay>,
    replay_error: Option<String>,
    path: Vec<PathStep>,
    trace: Vec<StepRecord>,
    /// What the event of the step being read said, until its transition arrives.
    event: Pending,
    stop: Option<Stop>,
    /// The counts over every record read (and over those read before, for a builder
    /// [`Builder::after`] them).
    tally: Tally,
    /// The held calls of the pending tool batch, once the replay is finished.
    held: Vec<crate::suspend::HeldState>,
    /// The tool budgets' warnings and blocks of the replayed tool batches.
    tool_budget: Vec<ToolBudgetEvent>,
}

#[derive(Default)]
struct Pending {
    model: Option<&'static str>,
    written: Option<&'static str>,
    /// The budgets a raise lifted (the event of the step that goes on from a budget stop).
    raised: Option<String>,
    verdict: Option<bool>,
    errors: Vec<ToolError>,
}

/// What an explanation counts over a whole journal, record by record: the entries and their
/// kinds, the tokens and model answers, the verifier's feedback, the tools' exclusions. A host
/// that keeps only the last steps of its journal keeps the tally of the records it let go (it
/// holds one entry per kind, feedback and tool, never one per step), so that its explanation's
/// counts stay those of the whole run ([`Builder::after`]).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Tally {
    /// Records read.
    pub entries: u64,
    /// Records read, by kind.
    pub kinds: BTreeMap<String, u64>,
    /// Tokens the model's turns reported.
    pub tokens: u64,
    /// Model calls answered (a turn or an error).
    pub model_answers: u32,
    /// What a rejecting verdict said is missing, with the steps it said so at.
    pub feedback: BTreeMap<String, Vec<u32>>,
    /// Each excluded tool: the step and the reason of its first exclusion.
    pub exclusions: BTreeMap<String, (u32, String)>,
}

impl Tally {
    /// Counts one record.
    pub fn add(&mut self, record: &Record) {
        self.entries += 1;
        let kind = record.entry.kind();
        match self.kinds.get_mut(kind) {
            Some(n) => *n += 1,
            None => {
                self.kinds.insert(kind.to_owned(), 1);
            }
        }
        let checkpoint = record.key.checkpoint;
        match &record.entry {
            Entry::Assistant(turn) => {
                self.model_answers += 1;
                if let Some(usage) = turn.usage {
                    self.tokens = self
                        .tokens
                        .saturating_add(usage.input_tokens)
                        .saturating_add(usage.output_tokens);
                }
            }
            Entry::ModelError { .. } => self.model_answers += 1,
            Entry::Verdict(v) if !v.complete => {
                for missing in &v.missing {
                    self.feedback
                        .entry(missing.clone())
                        .or_default()
                        .push(checkpoint);
                }
            }
            Entry::Notice(Notice::Excluded { tools, .. }) => {
                for (tool, why) in tools {
                    self.exclusions
                        .entry(tool.clone())
                        .or_insert((checkpoint, why.to_string()));
                }
            }
            _ => {}
        }
    }
}

/// The plain loop: a tool turn and its results going back. Every other rule is explained.
fn trivial(rule: Rule) -> bool {
    matches!(rule, Rule::ToolTurn | Rule::ToolResultsBack)
}

fn error_kind(kind: ModelErrorKind) -> &'static str {
    kind.as_str()
}

impl Builder {
    /// A builder for a run under `policy`.
    pub fn new(policy: &Policy) -> Builder {
        Builder {
            policy: policy.clone(),
            replaying: true,
            replay: None,
            replay_error: None,
            path: Vec::new(),
            trace: Vec::new(),
            event: Pending::default(),
            stop: None,
            tally: Tally::default(),
            held: Vec::new(),
            tool_budget: Vec::new(),
        }
    }

    /// A builder for a host that has the run's machine itself (it gives it to
    /// [`Builder::finish_with`]): the records are not replayed, so they need only say what
    /// the explanation reads of them (usage, error kinds and messages, verdicts, transitions,
    /// guidance, tool names, the stop), not carry the payloads a replay needs.
    pub fn without_replay(policy: &Policy) -> Builder {
        Builder {
            replaying: false,
            ..Builder::new(policy)
        }
    }

    /// A builder for a host that has the run's machine and kept only the last records of its
    /// journal: `earlier` is the tally of those it let go, the records that follow are read
    /// as [`Builder::without_replay`] reads them.
    pub fn after(policy: &Policy, earlier: Tally) -> Builder {
        Builder {
            tally: earlier,
            ..Builder::without_replay(policy)
        }
    }

    /// Reads the next record, in key order.
    pub fn push(&mut self, record: &Record) {
        self.tally.add(record);
        self.replay(record);
        let checkpoint = record.key.checkpoint;
        if let (Entry::Assistant(_), Some(replay), None) =
            (&record.entry, &self.replay, &self.replay_error)
        {
            // The batch this turn made, with its tool budgets' warnings and blocks.
            for command in replay.outstanding() {
                if let Command::RunTools(batch) = command {
                    self.tool_budget
                        .extend(tool_budget_events(checkpoint, batch));
                }
            }
        }
        match &record.entry {
            Entry::Assistant(turn) => {
                self.event.model = Some("turn");
                if turn.recovered_calls() > 0 {
                    self.event.written = Some("recovered");
                }
            }
            Entry::ModelError { error, .. } => {
                self.event.model = Some(error_kind(*error));
            }
            Entry::ToolResults { results } => {
                for r in results {
                    if let ToolOutcome::Error { kind, message } = &r.outcome {
                        self.event.errors.push(ToolError {
                            step: checkpoint,
                            tool: r.name.to_string(),
                            kind: kind.as_str(),
                            message: message.clone(),
                        });
                    }
                }
            }
            Entry::Verdict(v) => self.event.verdict = Some(v.complete),
            Entry::Transition(t) => {
                self.trace.push(*t);
                let event = std::mem::take(&mut self.event);
                self.path.push(PathStep {
                    step: t.step,
                    from: t.from,
                    to: t.to,
                    input: t.input.label(),
                    rule: t.rule,
                    why: (!trivial(t.rule)).then(|| RuleRow::of(t.rule)),
                    model: event.model,
                    tool_calls: Vec::new(),
                    tool_errors: event.errors,
                    nudge: None,
                    notices: event.raised.into_iter().collect(),
                    verdict: event.verdict,
                    tokens: self.tally.tokens,
                    written: match t.input {
                        terminus_kernel::Input::Turn {
                            kind: terminus_kernel::TurnKind::NoOp(terminus_kernel::NoOpKind::TextCall),
                            ..
                        } => Some("not_run"),
                        _ => event.written,
                    },
                });
            }
            Entry::Nudge(n) => {
                if let Some(step) = self.step_at(checkpoint) {
                    step.nudge = Some(match n.kind {
                        NudgeKind::Continue(_) => "continue",
                        NudgeKind::Incomplete => "incomplete",
                        NudgeKind::VerifierRejected => "verifier",
                    });
                }
            }
            Entry::Notice(notice) => {
                let words = match notice {
                    Notice::Excluded { tools, .. } => {
                        let names: Vec<&str> = tools.iter().map(|(t, _)| t.as_str()).collect();
                        format!("excluded {}", names.join(", "))
                    }
                    Notice::Repeating {
                        period,
                        times,
                        limit,
                        ..
                    } => format!(
                        "repeating: a window of {period} tool turn(s) occurred {times} times \
                         in a row (stops at {limit})"
                    ),
                    Notice::TokenBudget {
                        percent,
                        used,
                        budget,
                        ..
                    } => format!("tokens: {percent} % of the budget used ({used} of {budget})"),
                    _ => "notice".to_owned(),
                };
                if let Some(step) = self.step_at(checkpoint) {
                    step.notices.push(words);
                }
            }
            Entry::ToolCall { call, .. } => {
                if let Some(step) = self.step_at(checkpoint) {
                    step.tool_calls.push(call.name.to_string());
                }
            }
            Entry::Checkpoint { .. } => {
                if let Some(step) = self.step_at(checkpoint) {
                    step.notices
                        .push("a checkpoint written for the agent".to_owned());
                }
            }
            Entry::Held {
                call,
                hold,
                question,
            } => {
                if let Some(step) = self.step_at(checkpoint) {
                    match question {
                        // Held after it ran: its intent listed the call already.
                        Some(q) => step.notices.push(format!(
                            "held: `{}` asked a person {:?}; its run was cancelled",
                            call.id, q.message
                        )),
                        None => step.tool_calls.push(format!(
                            "{} (held for {})",
                            call.name,
                            hold.as_str()
                        )),
                    }
                }
            }
            Entry::Decided { call_id, decision } => {
                if let Some(step) = self.step_at(checkpoint) {
                    let words = match decision {
                        Decision::Deny {
                            reason: Some(reason),
                        } => format!("decided: deny `{call_id}` ({reason})"),
                        Decision::Edit { arguments } => {
                            format!(
                                "decided: approve `{call_id}` with edited arguments {arguments}"
                            )
                        }
                        other => format!("decided: {} `{call_id}`", other.as_str()),
                    };
                    step.notices.push(words);
                }
            }
            Entry::Started { call_id, job } => {
                if let Some(step) = self.step_at(checkpoint) {
                    step.notices
                        .push(format!("started: `{call_id}` waits for its job {job}"));
                }
            }
            Entry::Stop(stop) => self.stop = Some(stop.clone()),
            Entry::Raised { raises } => {
                // The run goes on from its stop, under the raised policy.
                self.stop = None;
                for raise in raises {
                    if let Some(limit) = terminus_kernel::catalog::raisable(&raise.field) {
                        let _ = limit.set(&mut self.policy, raise.to);
                    }
                }
                let words: Vec<String> = raises.iter().map(ToString::to_string).collect();
                self.event.raised = Some(format!("raised {}", words.join(", ")));
            }
            Entry::User { .. } | Entry::ToolResult(_) | Entry::Tick { .. } | Entry::Cancel => {}
        }
    }

    fn step_at(&mut self, checkpoint: u32) -> Option<&mut PathStep> {
        self.path.last_mut().filter(|s| s.step == checkpoint)
    }

    /// Feeds the kernel's replay; the first divergence stops it and is reported.
    fn replay(&mut self, record: &Record) {
        if !self.replaying || self.replay_error.is_some() {
            return;
        }
        let result = match self.replay.as_mut() {
            Some(replay) => replay.push(record.clone()),
            None => Replay::start(self.policy.clone(), record.clone()).map(|r| {
                self.replay = Some(r);
            }),
        };
        if let Err(e) = result {
            self.replay_error = Some(e.to_string());
        }
    }

    /// The explanation, with what the store keeps besides the records.
    pub fn finish(mut self, stored: &Stored<'_>) -> Explanation {
        let replayed = self.replay.take();
        if let Some(replay) = &replayed
            && stored.report.is_none()
        {
            self.held = crate::suspend::held_calls(&replay.clone().finish());
        }
        self.finish_with(stored, replayed.as_ref().map(Replay::machine))
    }

    /// The explanation, with the run's machine as it is at the last record (the replayed one,
    /// or the host's own for a builder made [`Builder::without_replay`]).
    pub fn finish_with(
        self,
        stored: &Stored<'_>,
        machine: Option<&terminus_kernel::Machine>,
    ) -> Explanation {
        let policy = &self.policy;
        let stop = self.stop.clone();
        let stats = stop
            .as_ref()
            .map(|s| s.stats)
            .or(stored.report.map(|r| r.stats))
            .or(machine.map(terminus_kernel::Machine::stats));
        let streaks = machine.map(terminus_kernel::Machine::streaks);
        let outcome = stop
            .as_ref()
            .map(|s| s.outcome)
            .or(stored.report.map(|r| r.outcome));
        let rule = stop
            .as_ref()
            .map(|s| s.rule)
            .or(stored.report.map(|r| r.rule));
        let status = match (stored.failure, stored.report, &stop) {
            (Some(_), _, _) => "failed",
            (None, Some(_), _) => "ended",
            (None, None, Some(_)) => "stopped",
            (None, None, None) if self.tally.entries == 0 => "waiting",
            (None, None, None) if self.held.iter().any(|h| h.decision.is_none()) => "suspended",
            (None, None, None) if !self.held.is_empty() => "decided",
            (None, None, None) => "interrupted",
        };

        // Tools: the ledger's counts, with the errors and exclusions the journal holds.
        let mut tools: BTreeMap<String, ToolView> = BTreeMap::new();
        let view = |name: &str| ToolView {
            name: name.to_owned(),
            calls: 0,
            failures: 0,
            refused: 0,
            excluded: None,
            excluded_at: None,
            errors: Vec::new(),
        };
        if let Some(m) = machine {
            for (name, record) in m.ledger().iter() {
                let v = tools.entry(name.to_owned()).or_insert_with(|| view(name));
                v.calls = record.calls;
                v.failures = record.failures;
                v.refused = record.refused;
                v.excluded = record.excluded.map(|e| e.to_string());
            }
        }
        for step in &self.path {
            for e in &step.tool_errors {
                let v = tools.entry(e.tool.clone()).or_insert_with(|| view(&e.tool));
                v.errors.push(e.clone());
            }
            if machine.is_none() {
                for name in &step.tool_calls {
                    tools
                        .entry(name.clone())
                        .or_insert_with(|| view(name))
                        .calls += 1;
                }
            }
        }
        for (name, (step, why)) in &self.tally.exclusions {
            let v = tools.entry(name.clone()).or_insert_with(|| view(name));
            v.excluded_at = Some(*step);
            v.excluded.get_or_insert_with(|| why.clone());
        }
        if machine.is_none() {
            for v in tools.values_mut() {
                v.failures = u32::try_from(v.errors.len()).unwrap_or(u32::MAX);
            }
        }
        let tools: Vec<ToolView> = tools.into_values().collect();

        let mut verifier_feedback: Vec<Feedback> = self
            .tally
            .feedback
            .into_iter()
            .map(|(missing, steps)| Feedback {
                missing,
                count: u32::try_from(steps.len()).unwrap_or(u32::MAX),
                steps,
            })
            .collect();
        verifier_feedback.sort_by(|a, b| b.count.cmp(&a.count).then(a.steps.cmp(&b.steps)));

        let open_todos = terminus_kernel::open_todos(match (machine, stored.report) {
            (Some(m), _) => m.todos(),
            (None, Some(r)) => &r.todos[..],
            (None, None) => &[],
        });
        // With no replayed machine, no required tool is known to have succeeded.
        let missing_tools = machine.map_or_else(
            || policy.completion_requires.clone(),
            |m| m.ledger().missing(&policy.completion_requires),
        );

        let budgets = budgets(
            policy,
            stats.as_ref(),
            streaks.as_ref(),
            rule,
            outcome,
            &tools,
        );
        let unanswered_model_calls = stats.map_or(0, |s| {
            s.model_calls.saturating_sub(self.tally.model_answers)
        });
        let mut explanation = Explanation {
            execution: stored.execution.to_owned(),
            name: stored.spec.name.clone(),
            task: stored.spec.task.clone(),
            status,
            failure: stored.failure.cloned(),
            outcome: outcome.map(Outcome::outcome_str),
            reason: outcome.map(Outcome::reason_str),
            rule,
            rule_spec: rule.map(RuleRow::of),
            why: String::new(),
            stats,
            result: stop
                .as_ref()
                .and_then(|s| s.result.clone())
                .or_else(|| stored.report.and_then(|r| r.result.clone())),
            budgets,
            scale: policy.budget_scale.clone(),
            tool_budgets: policy.tool_budgets.clone(),
            warnings: stored
                .report
                .map(|r| r.warnings.clone())
                .unwrap_or_default(),
            tool_budget_events: match (self.replaying && self.replay_error.is_none(), stored.report)
            {
                (false, Some(report)) => report.tool_budget_events.clone(),
                _ => self.tool_budget,
            },
            context: stored.report.and_then(|r| r.context),
            context_prunes: stored
                .report
                .map(|r| r.context_prunes.clone())
                .unwrap_or_default(),
            trace: self.trace,
            path: self.path,
            verifier_feedback,
            tools,
            open_todos,
            missing_tools,
            unanswered_model_calls,
            entries: self.tally.entries,
            entry_kinds: self.tally.kinds,
            conflicts: stored.conflicts,
            replay_error: self.replay_error,
            held: self.held,
        };
        explanation.why = why(&explanation, outcome, policy);
        explanation
    }
}

/// Every bound of `policy` against the counters at the end.
fn budgets(
    policy: &Policy,
    stats: Option<&Stats>,
    streaks: Option<&Streaks>,
    rule: Option<Rule>,
    outcome: Option<Outcome>,
    tools: &[ToolView],
) -> Vec<Budget> {
    let stopped_by = rule.and_then(catalog::of_rule);
    let mut out: Vec<Budget> = catalog::ALL
        .iter()
        .filter_map(|l| {
            let streak = l.counter.starts_with("streaks.");
            let used = match (stats, streaks) {
                (Some(s), Some(k)) => Some(l.count(s, k)),
                (Some(s), None) if !streak => Some(l.count(s, &Streaks::default())),
                _ => None,
            };
            l.listed(policy, used).then_some((l, used))
        })
        .map(|(l, used)| {
            let final_answer = rule == Some(Rule::FinalAnswerDone)
                && l.final_answer
                && outcome == Some(l.outcome(policy));
            Budget {
                field: l.field,
                counter: l.counter,
                used,
                limit: l.value(policy),
                reached: used.is_some_and(|u| l.fires_at(policy, u)),
                stopped: stopped_by.is_some_and(|s| s.field == l.field) || final_answer,
            }
        })
        .collect();
    let worst = tools.iter().map(|t| u64::from(t.failures)).max();
    out.push(Budget {
        field: "max_tool_failures",
        counter: "failures of one tool",
        used: worst.or(Some(0)),
        limit: Some(u64::from(policy.max_tool_failures)),
        reached: worst.is_some_and(|w| w >= u64::from(policy.max_tool_failures)),
        stopped: false,
    });
    let deadline = rule == Some(Rule::DeadlinePassed);
    out.push(Budget {
        field: "deadline_ms",
        counter: "wall-clock ms",
        used: None,
        limit: policy.deadline_ms,
        reached: deadline,
        stopped: deadline,
    });
    out
}
