//! Why did a run stop, and what to change: the explanation `terminus inspect` prints, built
//! without IO from what a journal keeps of an execution.
//!
//! An [`Explanation`] is built from an execution's records (fed one at a time, in key order, to a
//! [`Builder`], so a long journal is read page by page), its [`RunSpec`] (the policy), its
//! report, the failure a worker recorded and the claim conflicts ([`Stored`]). The journal is
//! replayed through the kernel ([`terminus_kernel::Replay`], pure) for what the records do not
//! say outright: the streaks at the stop, the tool ledger and the todos. It renders as text
//! ([`Explanation::text`]) and as JSON (serde). [`read`] explains an execution a store keeps,
//! reading its journal page by page (the command line's `inspect`, Restate's `explain`); an
//! embedding host (the Python and Node bindings) keeps the records of its own run and explains
//! it the same way.

use crate::budget::tool_budget_events;
use crate::context::{ContextPrune, ContextStats};
use crate::{BudgetWarning, Failure, Report, RunSpec, ToolBudgetEvent, ToolBudgetKind};
use serde::Serialize;
use std::collections::BTreeMap;
use std::fmt::Write as _;
use terminus_kernel::catalog::{self, Explain, StopPath};
use terminus_kernel::{
    Command, CompleteReason, Decision, Entry, ModelErrorKind, Notice, NudgeKind, Outcome, Phase,
    Policy, Record, Replay, Rule, Stats, StepRecord, Stop, Streaks, ToolOutcome,
};

/// What the store keeps of an execution besides its records.
pub struct Stored<'a> {
    /// The execution id.
    pub execution: &'a str,
    /// What it was started with.
    pub spec: &'a RunSpec,
    /// Its report, once it ended.
    pub report: Option<&'a Report>,
    /// Why a worker gave up on it.
    pub failure: Option<&'a Failure>,
    /// Claims refused and leases lost.
    pub conflicts: u64,
}

/// One step of the path, with what happened at it.
#[derive(Debug, Clone, Serialize)]
pub struct PathStep {
    /// The step number (1-based).
    pub step: u32,
    /// The state before.
    pub from: Phase,
    /// The state after.
    pub to: Phase,
    /// The input, as the kernel classified it.
    pub input: &'static str,
    /// The rule that fired.
    pub rule: Rule,
    /// The rule's row of the transition table, for every step but the plain loop (a tool turn
    /// and its results going back).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub why: Option<RuleRow>,
    /// The model's answer that made this step: `turn`, or the error's class.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub model: Option<&'static str>,
    /// Tool executions this step started, by tool name.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub tool_calls: Vec<String>,
    /// Tool errors among the results that made this step.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub tool_errors: Vec<ToolError>,
    /// The nudge this step sent (`continue`, `incomplete`, `verifier`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub nudge: Option<&'static str>,
    /// The notices this step sent, in words.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub notices: Vec<String>,
    /// The verdict that made this step: accepted or not.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub verdict: Option<bool>,
    /// Tokens reported so far, this step's turn included.
    pub tokens: u64,
    /// The model wrote its tool calls in its text: `recovered` (they ran) or `not_run`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub written: Option<&'static str>,
}

/// A rule's row of the transition table.
#[derive(Debug, Clone, Serialize)]
pub struct RuleRow {
    /// The input that triggers it.
    pub input: &'static str,
    /// Its guard, over counters and limits.
    pub guard: String,
    /// The rule of `docs/design.md` (1-8) or stop reason it encodes.
    pub cites: &'static str,
}

impl RuleRow {
    fn of(rule: Rule) -> RuleRow {
        let spec = rule.spec();
        RuleRow {
            input: spec.input,
            guard: spec.guard,
            cites: spec.cites,
        }
    }
}

impl std::fmt::Display for RuleRow {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.input)?;
        if self.guard != "-" {
            write!(f, " when {}", self.guard)?;
        }
        if self.cites != "-" {
            write!(f, "; {}", self.cites)?;
        }
        Ok(())
    }
}

/// One tool error, as the model was told it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ToolError {
    /// The step the result arrived with.
    pub step: u32,
    /// The tool.
    pub tool: String,
    /// The error's class.
    pub kind: &'static str,
    /// The tool's message.
    pub message: String,
}

/// What one tool did over the run.
#[derive(Debug, Clone, Serialize)]
pub struct ToolView {
    /// The tool.
    pub name: String,
    /// Executions.
    pub calls: u32,
    /// Executions that failed.
    pub failures: u32,
    /// Calls refused while it was excluded.
    pub refused: u32,
    /// Why it was excluded, if it was.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub excluded: Option<String>,
    /// The step that excluded it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub excluded_at: Option<u32>,
    /// Its errors, in order.
    pub errors: Vec<ToolError>,
}

/// Feedback the verifier gave when it rejected a claim.
#[derive(Debug, Clone, Serialize)]
pub struct Feedback {
    /// What the verifier said is missing.
    pub missing: String,
    /// How many rejections said it.
    pub count: u32,
    /// At which steps.
    pub steps: Vec<u32>,
}

/// A bound of the policy and how much of it the run spent.
#[derive(Debug, Clone, Serialize)]
pub struct Budget {
    /// The policy field.
    pub field: &'static str,
    /// The counter it bounds.
    pub counter: &'static str,
    /// The counter at the end (unknown for the deadline: wall-clock time is not journaled).
    pub used: Option<u64>,
    /// The limit (`None`: unlimited).
    pub limit: Option<u64>,
    /// The counter met the limit.
    pub reached: bool,
    /// It is the bound that stopped the run.
    pub stopped: bool,
}

/// Everything `terminus inspect` says about an execution.
#[derive(Debug, Clone, Serialize)]
pub struct Explanation {
    /// The execution id.
    pub execution: String,
    /// The run's name.
    pub name: Option<String>,
    /// The task.
    pub task: String,
    /// `ended`, `stopped` (the stop is journaled, the report is not stored), `interrupted`,
    /// `waiting` or `failed`; `running` for a live run a host explains (the binding sets it).
    pub status: &'static str,
    /// Why a worker gave up on it.
    pub failure: Option<Failure>,
    /// `complete` or `aborted`.
    pub outcome: Option<&'static str>,
    /// The stop reason.
    pub reason: Option<&'static str>,
    /// The rule that ended the run.
    pub rule: Option<Rule>,
    /// That rule's row of the transition table.
    pub rule_spec: Option<RuleRow>,
    /// Why the run stopped and what to change, in one paragraph.
    pub why: String,
    /// Every counter at the end (as far as the journal goes, for a run that has not ended).
    pub stats: Option<Stats>,
    /// The last substantive model content.
    pub result: Option<String>,
    /// Every bound of the policy against what the run spent.
    pub budgets: Vec<Budget>,
    /// Budgets that passed 80 % while the run went on (from its report).
    pub warnings: Vec<BudgetWarning>,
    /// The warnings and blocks of per-tool budgets (`tool_budgets`), in order: replayed from
    /// the journal through the kernel (deterministic, so they are what the run gave the model),
    /// or from the report where the journal is not replayed.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub tool_budget_events: Vec<ToolBudgetEvent>,
    /// What the context window did (from the report: the window is the runtime's, not
    /// journaled; unknown until the run has a report).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub context: Option<ContextStats>,
    /// Each prune of the model's view (from the report, as `context`).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub context_prunes: Vec<ContextPrune>,
    /// The path, a step a line, with what happened at each.
    pub path: Vec<PathStep>,
    /// Every transition, as the kernel records it.
    pub trace: Vec<StepRecord>,
    /// Verifier feedback, most repeated first.
    pub verifier_feedback: Vec<Feedback>,
    /// Tools the run called, or that were excluded.
    pub tools: Vec<ToolView>,
    /// Todos still pending or in progress at the end.
    pub open_todos: Vec<String>,
    /// `completion_requires` tools that never succeeded.
    pub missing_tools: Vec<String>,
    /// Model calls issued but never answered in the journal (in flight at a deadline or a
    /// cancel, or when the process died).
    pub unanswered_model_calls: u32,
    /// Journal entries.
    pub entries: u64,
    /// Journal entries by kind.
    pub entry_kinds: BTreeMap<&'static str, u64>,
    /// Claims refused and leases lost.
    pub conflicts: u64,
    /// Why the journal could not be replayed through the kernel, if it could not (the streaks,
    /// the ledger and the todos are then unknown).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub replay_error: Option<String>,
    /// The held calls of a suspended run's pending tool batch, with their decisions so far
    /// (`docs/approvals.md`).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub held: Vec<crate::suspend::HeldState>,
}

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
    entries: u64,
    kinds: BTreeMap<&'static str, u64>,
    feedback: BTreeMap<String, Vec<u32>>,
    exclusions: BTreeMap<String, (u32, String)>,
    tokens: u64,
    model_answers: u32,
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
            entries: 0,
            kinds: BTreeMap::new(),
            feedback: BTreeMap::new(),
            exclusions: BTreeMap::new(),
            tokens: 0,
            model_answers: 0,
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

    /// Reads the next record, in key order.
    pub fn push(&mut self, record: &Record) {
        self.entries += 1;
        *self.kinds.entry(record.entry.kind()).or_default() += 1;
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
                self.model_answers += 1;
                if let Some(usage) = turn.usage {
                    self.tokens = self
                        .tokens
                        .saturating_add(usage.input_tokens)
                        .saturating_add(usage.output_tokens);
                }
                self.event.model = Some("turn");
                if turn.recovered_calls() > 0 {
                    self.event.written = Some("recovered");
                }
            }
            Entry::ModelError { error, .. } => {
                self.model_answers += 1;
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
            Entry::Verdict(v) => {
                self.event.verdict = Some(v.complete);
                if !v.complete {
                    for missing in &v.missing {
                        self.feedback
                            .entry(missing.clone())
                            .or_default()
                            .push(checkpoint);
                    }
                }
            }
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
                    tokens: self.tokens,
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
                        for (tool, why) in tools {
                            self.exclusions
                                .entry(tool.clone())
                                .or_insert((checkpoint, why.to_string()));
                        }
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
                        other => format!("decided: {} `{call_id}`", other.as_str()),
                    };
                    step.notices.push(words);
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
            (None, None, None) if self.entries == 0 => "waiting",
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
        for (name, (step, why)) in &self.exclusions {
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
        let unanswered_model_calls =
            stats.map_or(0, |s| s.model_calls.saturating_sub(self.model_answers));
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
            entries: self.entries,
            entry_kinds: self.kinds,
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
        .filter(|l| l.listed_unset || l.value(policy).is_some())
        .map(|l| {
            let streak = l.counter.starts_with("streaks.");
            let used = match (stats, streaks) {
                (Some(s), Some(k)) => Some(l.count(s, k)),
                (Some(s), None) if !streak => Some(l.count(s, &Streaks::default())),
                _ => None,
            };
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

fn budget<'a>(e: &'a Explanation, field: &str) -> Option<&'a Budget> {
    e.budgets.iter().find(|b| b.field == field)
}

/// `used` and `limit` of a bound, e.g. (12, 12).
fn spent(e: &Explanation, field: &str) -> (u64, u64) {
    budget(e, field).map_or((0, 0), |b| (b.used.unwrap_or(0), b.limit.unwrap_or(0)))
}

fn quoted(items: &[String]) -> String {
    items
        .iter()
        .map(|i| format!("\"{i}\""))
        .collect::<Vec<_>>()
        .join(", ")
}

fn plural(n: u64, one: &str, many: &str) -> String {
    if n == 1 {
        format!("1 {one}")
    } else {
        format!("{n} {many}")
    }
}

/// What the run was waiting for in `state`, entered at `step`.
fn waiting_for(state: Phase, step: Option<&PathStep>) -> String {
    match state {
        Phase::Acting => match step.map(|s| &s.tool_calls) {
            Some(calls) if !calls.is_empty() => {
                let mut names = calls.clone();
                names.dedup();
                format!("the tool call(s) {}", names.join(", "))
            }
            _ => "its tool calls".to_owned(),
        },
        Phase::Verifying => "the verifier's verdict".to_owned(),
        Phase::Exploring | Phase::Nudged => "the model's answer".to_owned(),
        Phase::Complete | Phase::Aborted => "nothing".to_owned(),
    }
}

/// The most used tool and how many of the run's tool calls it took.
fn busiest(e: &Explanation) -> Option<(&str, u32)> {
    e.tools
        .iter()
        .max_by(|a, b| a.calls.cmp(&b.calls).then(b.name.cmp(&a.name)))
        .filter(|t| t.calls > 0)
        .map(|t| (t.name.as_str(), t.calls))
}

/// What is still open, in words, or nothing.
fn open_work(e: &Explanation) -> String {
    let mut parts = Vec::new();
    if !e.open_todos.is_empty() {
        parts.push(format!("todos still open: {}", quoted(&e.open_todos)));
    }
    if !e.missing_tools.is_empty() {
        parts.push(format!(
            "required tools that never succeeded: {}",
            e.missing_tools.join(", ")
        ));
    }
    parts.join("; ")
}

/// The verifier's feedback in words: what it repeated, or what it said.
fn feedback(e: &Explanation) -> Option<String> {
    let repeated: Vec<String> = e
        .verifier_feedback
        .iter()
        .filter(|f| f.count > 1)
        .map(|f| format!("\"{}\" ({} times)", f.missing, f.count))
        .collect();
    if !repeated.is_empty() {
        return Some(format!("it kept asking for {}", repeated.join(", ")));
    }
    let said: Vec<String> = e
        .verifier_feedback
        .iter()
        .map(|f| f.missing.clone())
        .collect();
    (!said.is_empty()).then(|| format!("its feedback was {}", quoted(&said)))
}

/// The last error of the tool, in words.
fn last_error(t: &ToolView) -> String {
    t.errors.last().map_or_else(String::new, |err| {
        format!("{}: \"{}\" at step {}", err.kind, err.message, err.step)
    })
}

/// One paragraph: why the run stopped and what to change, with the run's own names and numbers.
fn why(e: &Explanation, outcome: Option<Outcome>, policy: &Policy) -> String {
    let last = e.path.last();
    let at = last.map_or(0, |s| s.step);
    let stats = e.stats.unwrap_or_default();
    match e.status {
        "failed" => {
            if let Some(f) = &e.failure {
                return format!(
                    "The run did not stop by a rule: worker {} gave up on it ({}; exit {}), and \
                     no worker runs it again. Fix what the reason names and submit it again.",
                    f.worker, f.reason, f.exit_code
                );
            }
        }
        "waiting" => {
            return "The execution was submitted and has not run yet: start a `terminus worker` \
                    on this journal to run it."
                .to_owned();
        }
        "suspended" => {
            let pending = e.held.iter().filter(|h| h.decision.is_none()).count();
            return format!(
                "The run is suspended after step {at}: {} waiting for a decision. Decide each with \
                 `terminus approve`, `deny` or `answer`; once all are decided, `terminus resume` \
                 or a worker continues it. Time suspended does not count against the deadline.",
                plural(pending as u64, "held call", "held calls"),
            );
        }
        "decided" => {
            return format!(
                "The run was suspended after step {at} and every held call is decided: \
                 `terminus resume` or a worker continues it."
            );
        }
        "running" => {
            let waiting = waiting_for(last.map_or(Phase::Exploring, |s| s.to), last);
            return format!(
                "The run has not stopped: it is at step {at}, waiting for {waiting} ({} so far).",
                plural(u64::from(stats.model_calls), "model call", "model calls"),
            );
        }
        "interrupted" => {
            let waiting = waiting_for(last.map_or(Phase::Exploring, |s| s.to), last);
            return format!(
                "The run has not stopped: its process ended after step {at} while it waited for \
                 {waiting} ({} so far). Continue it with `terminus resume --journal <journal> \
                 --execution {}`; nothing journaled is run again.",
                plural(u64::from(stats.model_calls), "model call", "model calls"),
                e.execution
            );
        }
        _ => {}
    }
    let Some(outcome) = outcome else {
        return "The journal holds no stop for this run.".to_owned();
    };
    let stopped_note = if e.status == "stopped" {
        " (Its report was not stored before the process ended: `terminus resume` stores it.)"
    } else {
        ""
    };
    let rule = e.rule.unwrap_or(Rule::ClockReading);
    let open = open_work(e);
    let text = match catalog::stop_path(rule, outcome) {
        Some(path) => paragraph(e, path, outcome, rule, at, &open, policy),
        None => ended(outcome, at),
    };
    format!("{text}{stopped_note}")
}

fn complete(e: &Explanation, reason: CompleteReason, at: u32, policy: &Policy) -> String {
    let stats = e.stats.unwrap_or_default();
    match reason {
        CompleteReason::Verified => {
            let after = match stats.verification_failures {
                0 => "with no rejection".to_owned(),
                n => format!(
                    "after {} ({})",
                    plural(u64::from(n), "rejection", "rejections"),
                    feedback(e).unwrap_or_default()
                ),
            };
            let nudged = match stats.nudges {
                0 => String::new(),
                n => format!(
                    " Before that, {} refused with a nudge because work was still open.",
                    plural(u64::from(n), "claim was", "claims were")
                ),
            };
            format!(
                "The run completed: the verifier accepted the model's claim at step {at}, \
                 {after}.{nudged} No limit stopped it, so there is nothing to change."
            )
        }
        CompleteReason::Explicit => format!(
            "The run completed at step {at}: the model said it was done (needs_more_work: false) \
             with no tool call and nothing open, and verify_completion is off, so the claim was \
             taken as it stands. To have such claims checked first, set verify_completion: true."
        ),
        CompleteReason::Answered => format!(
            "The run completed at step {at}: the model gave a plain answer (no tool call, no \
             needs_more_work) with nothing open, and verify_completion is off, so the answer was \
             taken as it stands. To have answers checked first, set verify_completion: true."
        ),
        CompleteReason::Forced => format!(
            "The run completed without a verified claim: the verifier rejected it {} times \
             (max_verification_failures {}){} and on_verification_limit is complete, so the last \
             claim was accepted anyway at step {at}. Check the result by hand; to abort instead, \
             set on_verification_limit: abort, or raise max_verification_failures above {} to \
             give the model more rounds.",
            stats.verification_failures,
            policy.max_verification_failures,
            feedback(e).map_or_else(String::new, |f| format!("; {f}")),
            policy.max_verification_failures,
        ),
    }
}

/// A stop the catalog has no path for (a report that names a rule that does not stop).
fn ended(outcome: Outcome, at: u32) -> String {
    let how = if outcome.is_complete() {
        "completed"
    } else {
        "aborted"
    };
    format!("The run was {how} ({}) at step {at}.", outcome.reason_str())
}

/// The paragraph of the stop path's explanation template ([`Explain`]), filled with the run's
/// own names and numbers.
/// Why `max_no_ops` no-op turns in a row ended the run, by what the last of them were: replies
/// cut at the output cap, tool calls written as text, silence or `needs_more_work: true`.
fn no_progress(e: &Explanation, policy: &Policy, at: u32, open_sentence: &str) -> String {
    use terminus_kernel::{Input, NoOpKind, TurnKind};
    let last: Vec<NoOpKind> = e
        .trace
        .iter()
        .rev()
        .take(usize::try_from(policy.max_no_ops).unwrap_or(usize::MAX))
        .filter_map(|t| match t.input {
            Input::Turn {
                kind: TurnKind::NoOp(kind),
                ..
            } => Some(kind),
            _ => None,
        })
        .collect();
    let all = |kind: NoOpKind| !last.is_empty() && last.iter().all(|k| *k == kind);
    let n = policy.max_no_ops;
    if all(NoOpKind::Truncated) {
        return format!(
            "The model made no progress {n} turns in a row (max_no_ops {n}): each reply was cut \
             at the output cap (finish: length) before it was done, so none was an answer or a \
             tool call; the run stopped at step {at}.{open_sentence} Raise max_output_tokens (the \
             model's [model] setting) or ask for shorter replies; a model that repeats itself \
             until the cap needs a shorter task."
        );
    }
    if all(NoOpKind::Repetitive) {
        return format!(
            "The model made no progress {n} turns in a row (max_no_ops {n}): each reply repeated \
             the same text over and over and was cut as soon as it did (finish: repetition), so \
             none was an answer or a tool call; the run stopped at step {at}.{open_sentence} A \
             model that loops in its own text needs a shorter task or a stronger model; sampling \
             with a repetition penalty (the server's setting) helps small ones."
        );
    }
    if all(NoOpKind::TextCall) {
        return format!(
            "The model made no progress {n} turns in a row (max_no_ops {n}): each reply wrote a \
             tool call as text that could not run (a tool that is not offered, arguments that \
             are not an object, or text_tool_calls: nudge), so nothing ran; the run stopped at \
             step {at}.{open_sentence} Offer the tool it asks for, keep text_tool_calls: run, or \
             use a model (or chat template) that calls tools through the API."
        );
    }
    format!(
        "The model made no progress {n} turns in a row (max_no_ops {n}): each answered with no \
         tool call and either no content or needs_more_work: true, so the run could not move on; \
         it stopped at step {at}.{open_sentence} Have the model act (call a tool) or answer \
         (needs_more_work false or absent); raise max_no_ops only if it needs more turns to think."
    )
}

fn paragraph(
    e: &Explanation,
    path: &StopPath,
    outcome: Outcome,
    rule: Rule,
    at: u32,
    open: &str,
    policy: &Policy,
) -> String {
    let stats = e.stats.unwrap_or_default();
    let last = e.path.last();
    let before = e.path.len().checked_sub(2).and_then(|i| e.path.get(i));
    let open_sentence = if open.is_empty() {
        String::new()
    } else {
        let mut s = open.to_owned();
        if let Some(first) = s.get(..1) {
            s.replace_range(..1, &first.to_uppercase());
        }
        format!(" {s}.")
    };
    match path.explain {
        Explain::Verified => complete(e, CompleteReason::Verified, at, policy),
        Explain::Explicit => complete(e, CompleteReason::Explicit, at, policy),
        Explain::Answered => complete(e, CompleteReason::Answered, at, policy),
        Explain::Forced => complete(e, CompleteReason::Forced, at, policy),
        Explain::Budget { noun: what } => {
            let field = path.limit.map_or("", |l| l.field);
            let (used, limit) = spent(e, field);
            let final_answer = if rule == Rule::FinalAnswerDone {
                ", then made its one tool-less call for a final answer (final_answer_on_budget)"
            } else {
                ""
            };
            let busiest = busiest(e).map_or_else(String::new, |(tool, n)| {
                format!(
                    " Most of it went to {tool} ({n} of {} tool calls).",
                    stats.tool_calls
                )
            });
            format!(
                "The run spent its {what} budget ({field} {limit}, {used} used) at step {at} \
                 ({}, {}){final_answer}, before the model claimed it was done.{busiest}\
                 {open_sentence} If the task needs more, raise {field} (e.g. to {}); if it \
                 should not, look at why the model kept going: a tool that never gives it what \
                 it needs, or a task too large for one run.",
                plural(u64::from(stats.model_calls), "model call", "model calls"),
                plural(u64::from(stats.tool_calls), "tool call", "tool calls"),
                limit.saturating_mul(2).max(1)
            )
        }
        Explain::Deadline => {
            let from = last.map_or(Phase::Exploring, |s| s.from);
            let waiting = waiting_for(from, before);
            let tool_hint = if from == Phase::Acting {
                " or make that tool answer sooner (a timeout of its own)"
            } else {
                ""
            };
            format!(
                "The run's wall-clock deadline of {} ms (deadline_ms) passed at step {at} while \
                 it waited for {waiting}.{open_sentence} Raise deadline_ms{tool_hint}.",
                policy.deadline_ms.unwrap_or(0)
            )
        }
        Explain::Cancelled => {
            let from = last.map_or(Phase::Exploring, |s| s.from);
            format!(
                "The host cancelled the run (its kill switch: Ctrl-C, a cancel_after_ms or the \
                 embedding program) at step {at} while it waited for {}. No limit of the policy \
                 stopped it; run it again if the cancel was not meant.{open_sentence}",
                waiting_for(from, before)
            )
        }
        Explain::Loop => {
            let mut names: Vec<String> = e
                .path
                .iter()
                .rev()
                .filter(|s| s.rule == Rule::ToolTurn)
                .take(usize::try_from(policy.max_loop_period).unwrap_or(8))
                .flat_map(|s| s.tool_calls.iter().cloned())
                .collect();
            names.sort();
            names.dedup();
            format!(
                "The model was looping: the same tool calls ({}) got the same results {} times \
                 in a row (max_repeats {}), so the run stopped at step {at} as no progress. \
                 Give the model what it waits for (a tool whose answer changes), tell it to stop \
                 repeating itself, or raise max_repeats if repeating is expected.",
                names.join(", "),
                policy.max_repeats,
                policy.max_repeats
            )
        }
        Explain::NoProgress => no_progress(e, policy, at, &open_sentence),
        Explain::Incomplete => format!(
            "The model kept claiming it was done with work still open: {} refused with a nudge \
             (max_nudges {}), and its next claim at step {at} ended the run.{open_sentence} Have \
             the model finish (or close) that work before it claims to be done, or raise \
             max_nudges if it only needs more reminders.",
            plural(u64::from(stats.nudges), "claim was", "claims were"),
            policy.max_nudges
        ),
        Explain::VerificationLoop => format!(
            "The verifier rejected the model's claim {} times (max_verification_failures {}) and \
             on_verification_limit is abort, so the run stopped at step {at}{}. Fix what the \
             verifier asks for (or the verifier, if it asks for what the task does not need); \
             raise max_verification_failures for more rounds, or set on_verification_limit: \
             complete to accept the last claim.",
            stats.verification_failures,
            policy.max_verification_failures,
            feedback(e).map_or_else(String::new, |f| format!("; {f}")),
        ),
        Explain::AllExcluded => {
            let excluded: Vec<String> = e
                .tools
                .iter()
                .filter(|t| t.excluded.is_some())
                .map(|t| {
                    let why = t.excluded.clone().unwrap_or_default();
                    let err = last_error(t);
                    if err.is_empty() {
                        format!("{} ({why})", t.name)
                    } else {
                        format!("{} ({why}; last error {err})", t.name)
                    }
                })
                .collect();
            format!(
                "At step {at} the model asked only for tools that are excluded, so the run could \
                 not go on: {}. Fix the tool (its last error says why) or the arguments the \
                 model gives it; raise max_tool_failures (now {}) only if its failures are \
                 transient.",
                excluded.join("; "),
                policy.max_tool_failures
            )
        }
        Explain::ToolFailures => {
            let mut failing: Vec<&ToolView> =
                e.tools.iter().filter(|t| !t.errors.is_empty()).collect();
            failing.sort_by_key(|t| t.errors.last().map_or(0, |err| err.step));
            let failing: Vec<String> = failing
                .iter()
                .map(|t| format!("{} ({})", t.name, last_error(t)))
                .collect();
            format!(
                "{} tool turns in a row failed (max_consecutive_tool_failures {}), so the run \
                 stopped at step {at}: {}. Fix those tools or the arguments the model gives them; \
                 raise max_consecutive_tool_failures only if the failures are transient.",
                policy.max_consecutive_tool_failures,
                policy.max_consecutive_tool_failures,
                failing.join("; ")
            )
        }
        Explain::Unrecoverable => {
            let err = last.and_then(|s| {
                s.tool_errors.iter().find(|err| {
                    matches!(err.kind, "permission_denied" | "not_found" | "auth_failed")
                })
            });
            match err {
                Some(err) => format!(
                    "Tool {} failed at step {at} with {} (\"{}\"), which retrying cannot fix, and \
                     on_unrecoverable_tool_error is stop. Fix {}'s access (its permissions, \
                     credentials or the thing it names), or set on_unrecoverable_tool_error: \
                     exclude to let the model go on without it.",
                    err.tool, err.kind, err.message, err.tool
                ),
                None => format!(
                    "A tool failed at step {at} with an error retrying cannot fix, and \
                     on_unrecoverable_tool_error is stop. Fix the tool's access, or set \
                     on_unrecoverable_tool_error: exclude."
                ),
            }
        }
        Explain::EmptyReplies => {
            let mut kinds: BTreeMap<&'static str, u32> = BTreeMap::new();
            for t in &e.trace {
                if let terminus_kernel::Input::Turn {
                    kind: terminus_kernel::TurnKind::Empty(k),
                    ..
                } = t.input
                {
                    *kinds
                        .entry(match k {
                            terminus_kernel::EmptyKind::Blank => "blank",
                            terminus_kernel::EmptyKind::Truncated => "truncated",
                            terminus_kernel::EmptyKind::Filtered => "filtered",
                            terminus_kernel::EmptyKind::ReasoningOnly => "reasoning only",
                        })
                        .or_default() += 1;
                }
            }
            let kinds: Vec<String> = kinds.iter().map(|(k, n)| format!("{k} {n}")).collect();
            format!(
                "The model returned {} empty replies in a row (max_empty_responses {}; {}), each \
                 retried with backoff, and the run stopped at step {at}. Look at the provider: the \
                 output-token limit (max_output_tokens), its content filter, or a reasoning model \
                 that spends every token thinking; raise max_empty_responses only for a flaky \
                 provider.",
                policy.max_empty_responses,
                policy.max_empty_responses,
                kinds.join(", ")
            )
        }
        Explain::RetriesSpent => {
            let mut kinds: Vec<&str> = e
                .path
                .iter()
                .filter_map(|s| s.model)
                .filter(|m| *m != "turn")
                .collect();
            kinds.sort_unstable();
            kinds.dedup();
            format!(
                "The model call kept failing ({}): {} retries in a row were spent \
                 (max_model_retries {}) and the next failure at step {at} ended the run. The \
                 provider was down or rate limiting: try again later, or raise max_model_retries \
                 or retry_max_ms (now {} ms) to wait longer.",
                kinds.join(", "),
                policy.max_model_retries,
                policy.max_model_retries,
                policy.retry_max_ms
            )
        }
        Explain::ModelFatal => {
            let kind = last.and_then(|s| s.model).unwrap_or("an error");
            let hint = match kind {
                "auth" => {
                    "Check the API key (the variable api_key_env names) and the model's access"
                }
                "bad_request" => {
                    "Check the request the provider refused: the model name, max_output_tokens, \
                     the tools' schemas"
                }
                _ => "Check the provider",
            };
            format!(
                "The model call failed at step {at} with {kind}, which retrying cannot fix, so the \
                 run stopped. {hint}."
            )
        }
        Explain::ContextExhausted => format!(
            "At step {at} the conversation no longer fitted the model's context window, even \
             after pruning ({}, {}). Give the model a larger window ([context] window), keep \
             tool results shorter, or split the task.",
            match stats.tokens() {
                0 => "no token usage reported".to_owned(),
                n => format!("{n} tokens reported"),
            },
            plural(u64::from(stats.tool_calls), "tool call", "tool calls")
        ),
        // `stop_path` gives the spent budget's path for the final answer.
        Explain::AsTheBudget => ended(outcome, at),
    }
}

/// `text` wrapped at `width` columns, each line after `indent`.
fn wrap(text: &str, indent: &str, width: usize) -> String {
    let mut out = String::new();
    let mut line = String::new();
    for word in text.split_whitespace() {
        if !line.is_empty() && indent.len() + line.len() + 1 + word.len() > width {
            let _ = writeln!(out, "{indent}{line}");
            line.clear();
        }
        if !line.is_empty() {
            line.push(' ');
        }
        line.push_str(word);
    }
    if !line.is_empty() {
        let _ = writeln!(out, "{indent}{line}");
    }
    out
}

/// Whether a step is the plain loop with nothing else to say.
fn plain(step: &PathStep) -> bool {
    step.why.is_none()
        && step.tool_errors.is_empty()
        && step.nudge.is_none()
        && step.notices.is_empty()
}

impl PathStep {
    /// What happened at the step besides the transition, e.g. ` · calls read_file`.
    fn details(&self) -> String {
        let mut out = String::new();
        if let Some(model) = self.model.filter(|m| *m != "turn") {
            let _ = write!(out, " · model error {model}");
        }
        if !self.tool_calls.is_empty() {
            let _ = write!(out, " · calls {}", self.tool_calls.join(", "));
        }
        match self.written {
            Some("recovered") => out.push_str(" (written as text, recovered)"),
            Some(_) => out.push_str(" · a tool call written as text, not run"),
            None => {}
        }
        for err in &self.tool_errors {
            let _ = write!(out, " · {} failed: {}: {}", err.tool, err.kind, err.message);
        }
        if let Some(verdict) = self.verdict {
            out.push_str(if verdict {
                " · verdict accepted"
            } else {
                " · verdict rejected"
            });
        }
        match self.nudge {
            // Counted apart from the nudges (refused claims): `continuations` in the counters.
            Some("continue") => out.push_str(" · continuation (after a no-op)"),
            Some(nudge) => {
                let _ = write!(out, " · nudge ({nudge})");
            }
            None => {}
        }
        for notice in &self.notices {
            let _ = write!(out, " · notice: {notice}");
        }
        out
    }
}

impl Explanation {
    /// Marks the explanation as that of a live run its host is still driving (status
    /// `running`), and says so in [`Explanation::why`].
    pub fn set_running(&mut self, policy: &Policy) {
        self.status = "running";
        self.why = why(self, None, policy);
    }

    /// The explanation as text, for people.
    pub fn text(&self) -> String {
        let mut t = String::new();
        let _ = writeln!(t, "execution {}", self.execution);
        if let Some(name) = &self.name {
            let _ = writeln!(t, "scenario  {name}");
        }
        let _ = writeln!(t, "task      {}", self.task);
        let status = match (self.status, &self.failure) {
            ("failed", Some(f)) => format!(
                "failed (exit {}): {} (worker {} gave up on it; it is not run again)",
                f.exit_code, f.reason, f.worker
            ),
            ("stopped", _) => "stopped (report not yet stored; resume to store it)".to_owned(),
            ("waiting", _) => {
                "waiting (submitted; a `terminus worker` on this journal runs it)".to_owned()
            }
            ("interrupted", _) => "interrupted (resume to continue)".to_owned(),
            ("suspended", _) => "suspended (held calls wait for a decision: `terminus approve`, \
                                 `deny` or `answer`)"
                .to_owned(),
            ("decided", _) => "decided (every held call is decided; resume it, or a worker \
                               runs it)"
                .to_owned(),
            (other, _) => other.to_owned(),
        };
        let _ = writeln!(t, "status    {status}");
        if !self.held.is_empty() {
            let _ = writeln!(t, "\nheld calls:");
            for h in &self.held {
                let decided = match &h.decision {
                    None => "pending".to_owned(),
                    Some(terminus_kernel::Decision::Deny {
                        reason: Some(reason),
                    }) => format!("denied ({reason})"),
                    Some(d) => format!("decided: {}", d.as_str()),
                };
                let _ = writeln!(
                    t,
                    "  {} {} {} {}: {decided}",
                    h.call.kind.as_str(),
                    h.call.call_id,
                    h.call.name,
                    h.call.arguments
                );
                if let Some(q) = &h.call.question {
                    let _ = writeln!(t, "    it asks {:?}, a form of {}", q.message, q.schema);
                }
            }
        }
        if let (Some(outcome), Some(reason), Some(rule), Some(row)) =
            (self.outcome, self.reason, self.rule, &self.rule_spec)
        {
            let _ = writeln!(
                t,
                "outcome   {outcome} ({reason}) (rule {}: {row})",
                rule.name()
            );
        }
        let _ = writeln!(t, "\nwhy it stopped, and what to change:");
        t.push_str(&wrap(&self.why, "  ", 100));

        let _ = writeln!(
            t,
            "\npath ({}):",
            plural(self.path.len() as u64, "step", "steps")
        );
        let mut explained: Vec<Rule> = Vec::new();
        let mut i = 0;
        while i < self.path.len() {
            // A long stretch of the plain loop is folded to its ends.
            let run = self.path[i..].iter().take_while(|s| plain(s)).count();
            if run > 6 {
                for step in &self.path[i..i + 2] {
                    self.step_line(&mut t, step, &mut explained);
                }
                let folded = &self.path[i + 2..i + run - 2];
                let mut tools: Vec<&str> = folded
                    .iter()
                    .flat_map(|s| s.tool_calls.iter().map(String::as_str))
                    .collect();
                tools.sort_unstable();
                tools.dedup();
                let _ = writeln!(
                    t,
                    "  ... {} more of the plain loop (tool turns and their results; calls {})",
                    plural(folded.len() as u64, "step", "steps"),
                    tools.join(", ")
                );
                for step in &self.path[i + run - 2..i + run] {
                    self.step_line(&mut t, step, &mut explained);
                }
                i += run;
                continue;
            }
            self.step_line(&mut t, &self.path[i], &mut explained);
            i += 1;
        }

        let _ = writeln!(t, "\nbudgets (spent / limit):");
        for b in &self.budgets {
            let used = b.used.map_or_else(|| "-".to_owned(), |u| u.to_string());
            let limit = b.limit.map_or_else(|| "none".to_owned(), |l| l.to_string());
            let mark = match (b.stopped, b.reached) {
                (true, _) => "  <- stopped the run",
                (false, true) => "  (reached)",
                _ => "",
            };
            let _ = writeln!(
                t,
                "  {:<31} {:>7} / {:<7} {}{mark}",
                b.field, used, limit, b.counter
            );
        }
        for w in &self.warnings {
            let _ = writeln!(t, "  warned: {w}");
        }
        if !self.tool_budget_events.is_empty() {
            let _ = writeln!(t, "\ntool budgets (tool_budgets):");
            for e in &self.tool_budget_events {
                let what = match (e.kind, e.block_at) {
                    (ToolBudgetKind::Warn, Some(b)) => {
                        format!("warned (calls are refused from {b})")
                    }
                    (ToolBudgetKind::Warn, None) => "warned".to_owned(),
                    (ToolBudgetKind::Block, _) => "refused: its budget is spent".to_owned(),
                };
                let _ = writeln!(t, "  step {}: {} call {} {what}", e.step, e.tool, e.call);
            }
        }
        if let Some(c) = &self.context {
            let _ = writeln!(t, "\ncontext window:");
            let mut line = format!(
                "  {} · {} cut · largest view {} tokens",
                plural(u64::from(c.prunes), "prune", "prunes"),
                plural(
                    u64::from(c.truncated_results),
                    "tool result",
                    "tool results"
                ),
                c.peak_tokens
            );
            if c.system_cut_tokens > 0 {
                let _ = write!(
                    line,
                    " · system prompt cut ({} tokens not shown)",
                    c.system_cut_tokens
                );
            }
            let _ = writeln!(t, "{line}");
            for p in &self.context_prunes {
                let _ = writeln!(
                    t,
                    "  pruned for model call {} (after step {}): {} messages, {} tokens -> {} \
                     messages, {} tokens",
                    p.model_call,
                    p.step,
                    p.messages_before,
                    p.tokens_before,
                    p.messages_after,
                    p.tokens_after
                );
            }
        }
        if !self.verifier_feedback.is_empty() {
            let _ = writeln!(t, "\nverifier feedback (what it said was missing):");
            for f in &self.verifier_feedback {
                let steps: Vec<String> = f.steps.iter().map(u32::to_string).collect();
                let repeated = if f.count > 1 { "  (repeated)" } else { "" };
                let _ = writeln!(
                    t,
                    "  {}x \"{}\" (step {}){repeated}",
                    f.count,
                    f.missing,
                    steps.join(", ")
                );
            }
        }
        if !self.tools.is_empty() {
            let _ = writeln!(t, "\ntools:");
            for tool in &self.tools {
                let mut line = format!(
                    "  {:<20} {}, {}",
                    tool.name,
                    plural(u64::from(tool.calls), "call", "calls"),
                    plural(u64::from(tool.failures), "failure", "failures")
                );
                if tool.refused > 0 {
                    let _ = write!(line, ", {} refused", tool.refused);
                }
                if let Some(why) = &tool.excluded {
                    match tool.excluded_at {
                        Some(step) => {
                            let _ = write!(line, "; excluded at step {step}: {why}");
                        }
                        None => {
                            let _ = write!(line, "; excluded: {why}");
                        }
                    }
                }
                let _ = writeln!(t, "{line}");
                for err in &tool.errors {
                    let _ = writeln!(t, "    step {}: {}: {}", err.step, err.kind, err.message);
                }
            }
        }
        let open = open_work(self);
        if !open.is_empty() {
            let _ = writeln!(t, "\nopen work: {open}");
        }
        t.push('\n');
        if let Some(st) = &self.stats {
            let _ = writeln!(
                t,
                "counters  steps {} · model calls {} · tool calls {}{} · tool failures {} · \
                 nudges {} (claims refused) · continuations {} (after no-ops) · no-ops {} · \
                 empty replies {} · verification failures {} · tokens {}",
                st.steps,
                st.model_calls,
                st.tool_calls,
                if st.text_tool_calls > 0 {
                    format!(" ({} written as text)", st.text_tool_calls)
                } else {
                    String::new()
                },
                st.tool_failures,
                st.nudges,
                st.continuations,
                st.no_ops,
                st.empty_responses,
                st.verification_failures,
                st.tokens()
            );
        }
        if let Some(result) = &self.result {
            let _ = writeln!(t, "result    {result}");
        }
        let _ = writeln!(
            t,
            "entries   {} ({})",
            self.entries,
            self.entry_kinds
                .iter()
                .map(|(k, n)| format!("{k} {n}"))
                .collect::<Vec<_>>()
                .join(", ")
        );
        let _ = writeln!(
            t,
            "conflicts {} (claims refused or leases lost: each an exit 4 for some process)",
            self.conflicts
        );
        if let Some(e) = &self.replay_error {
            let _ = writeln!(
                t,
                "replay    failed: {e} (streaks, tool ledger and todos are unknown)"
            );
        }
        t
    }

    fn step_line(&self, t: &mut String, step: &PathStep, explained: &mut Vec<Rule>) {
        let record = self
            .trace
            .iter()
            .find(|r| r.step == step.step)
            .map_or_else(String::new, ToString::to_string);
        let _ = writeln!(t, "  {record}{}", step.details());
        if let Some(row) = &step.why
            && !explained.contains(&step.rule)
        {
            explained.push(step.rule);
            let _ = writeln!(t, "             rule {}: {row}", step.rule.name());
        }
    }
}
