//! The driver of the kernel for a host: [`Host`] feeds the host's events to the machine, hands
//! out its commands in the contract's vocabulary, keeps the lean journal [`crate::Run`] would
//! write, and gives the report, the explanation and snapshots.
//!
//! # What a snapshot holds, and why it is bounded
//!
//! A host's snapshot is saved again at every step by a host that checkpoints (a LangGraph
//! saver writes the graph state, and the snapshot in it, after every node), so it must not grow
//! with the run. It holds:
//!
//! - the machine ([`Machine::save`]): the state, the counters, the policy, the tool ledger (one
//!   entry per tool), the todos, the latest result, the batch in flight, the loop detector's
//!   ring of the last 16 tool turns and the commands not yet taken: nothing per step;
//! - what the host keeps besides: the task and name, the commands of the last step, the lean
//!   batch in flight, the budget warnings (one per budget: each warns once), the clock, the
//!   stop;
//! - the journal's records, the trace and the per-tool budget events of the last
//!   [`JOURNAL_STEPS`] steps only (by default; [`Host::keep_journal`]), with the [`Tally`] of
//!   the records let go before them: entries, entries by kind, tokens, model answers, the
//!   verifier's feedback (one entry per rejection: at most `max_verification_failures`) and the
//!   tools' exclusions (one per tool).
//!
//! So the report's counters, `entries` included, and the explanation's counts (entries by kind,
//! tokens, feedback, exclusions, budgets, tools) are those of the whole run; the report's
//! `trace` and `tool_budget_events` and the explanation's path and tool errors are those of the
//! last [`JOURNAL_STEPS`] steps (the whole run while it is no longer). A host that compares its
//! report and explanation with `terminus run` and `terminus inspect` for long runs (a scenario
//! driver) keeps the whole journal ([`Host::keep_journal`] with `None`).

use super::wire::{
    CallOut, CommandOut, EventIn, Handle, InputError, Offered, RefusedOut, ResultIn, TurnIn,
    WarningOut,
};
use crate::budget::{BudgetWarning, ToolBudgetEvent, Warned, tool_budget_events};
use crate::conversation::{budget_warning_text, refusal_text};
use crate::explain::{Builder, Explanation, Stored, Tally};
use crate::journal::RunSpec;
use crate::report::Report;
use crate::verifier::missing_by_rules;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::collections::{BTreeMap, VecDeque};
use terminus_kernel::{
    Command, Entry, Event, Handled, Json, Key, Machine, ModelTurn, Phase, Policy, Raise,
    RaiseError, Record, StepRecord, Stop, ToolBatch, ToolCall, ToolOutcome, ToolResult, Verdict,
    executed, lean_decision_records, textcall,
};

/// The journal entry of an event, without the payloads the explanation never reads (a turn's
/// text and calls, tool outputs): the host keeps the machine itself, so its journal is never
/// replayed, and a lean journal keeps snapshots small.
fn lean_entry(event: &Event) -> Entry {
    match event {
        Event::ModelTurn(turn) => Entry::Assistant(ModelTurn {
            text: String::new(),
            tool_calls: Vec::new(),
            needs_more_work: turn.needs_more_work,
            usage: turn.usage,
            finish: turn.finish,
            reasoning: turn.reasoning,
            text_calls: turn.text_calls.clone(),
        }),
        Event::ToolResults(results) => Entry::ToolResults {
            results: results.iter().map(lean_result).collect(),
        },
        other => Entry::from_event(other),
    }
}

/// A batch without its calls' arguments (each `null`).
fn lean_batch(batch: &ToolBatch) -> ToolBatch {
    ToolBatch {
        calls: batch
            .calls
            .iter()
            .map(|c| ToolCall {
                id: c.id.clone(),
                name: c.name.clone(),
                arguments: Json::from(Value::Null),
            })
            .collect(),
        refused: batch.refused.clone(),
        warnings: batch.warnings.clone(),
    }
}

/// A tool result without its output (an error keeps its class and message).
fn lean_result(result: &ToolResult) -> ToolResult {
    ToolResult {
        call_id: result.call_id.clone(),
        name: result.name.clone(),
        outcome: match &result.outcome {
            ToolOutcome::Ok(_) => ToolOutcome::Ok(Json::from(Value::Null)),
            error => error.clone(),
        },
    }
}

/// What the host keeps besides the machine; saved with it by [`Host::snapshot`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Keep {
    task: String,
    name: Option<String>,
    /// Commands of the last step not yet taken by the host.
    out: VecDeque<Command>,
    /// The last tool batch handed out, until its results arrive.
    batch: Option<ToolBatch>,
    /// The transitions of the steps the journal keeps, in order.
    trace: Vec<StepRecord>,
    /// The journal's records as [`crate::Run`] writes them, lean (see [`Host::records`]), of the
    /// last `journal_steps` steps.
    records: Vec<Record>,
    /// How many steps of the journal are kept; `None`: all (snapshots saved before it was kept
    /// hold the whole journal).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    journal_steps: Option<u32>,
    /// The tally of the records let go (absent while none was).
    #[serde(default, skip_serializing_if = "is_empty")]
    earlier: Tally,
    warned: Warned,
    warnings: Vec<BudgetWarning>,
    /// The warnings and blocks of per-tool budgets, as the runtime reports them (absent from
    /// snapshots of hosts that had none, and from those saved before it was kept).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    tool_budget: Vec<ToolBudgetEvent>,
    /// The last clock reading (milliseconds since the start).
    now_ms: u64,
    stop: Option<Stop>,
    /// The reply's prose when the last turn's tool calls were written in its text and
    /// recovered (for its `run_tools`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    written: Option<String>,
}

/// A saved host: the version, the machine and what the host keeps.
#[derive(Serialize)]
struct SavedRef<'a> {
    terminus_snapshot: u32,
    machine: &'a Machine,
    #[serde(flatten)]
    keep: &'a Keep,
}

#[derive(Deserialize)]
struct Saved {
    terminus_snapshot: u32,
    machine: Value,
    #[serde(flatten)]
    keep: Keep,
}

const SNAPSHOT_VERSION: u32 = 1;

/// How many steps of its journal (records and trace) a host keeps by default: a chain of tool
/// turns is two steps a turn, so the last 8 turns.
pub const JOURNAL_STEPS: u32 = 16;

fn is_empty(tally: &Tally) -> bool {
    tally.entries == 0
}

/// The kernel driven by a host that runs the model and tools itself.
#[derive(Debug, Clone, PartialEq)]
pub struct Host {
    machine: Machine,
    keep: Keep,
}

impl Host {
    /// A run of `task` under `policy`; `name` is the run's name (a scenario's) for the
    /// explanation. Its first command is `call_model`.
    pub fn new(policy: Policy, task: String, name: Option<String>) -> Result<Host, InputError> {
        let mut machine = Machine::new(policy)?;
        let out: VecDeque<Command> = std::iter::from_fn(|| machine.poll_command()).collect();
        Ok(Host {
            machine,
            keep: Keep {
                task,
                name,
                out,
                batch: None,
                trace: Vec::new(),
                records: Vec::new(),
                journal_steps: Some(JOURNAL_STEPS),
                earlier: Tally::default(),
                warned: Warned::default(),
                warnings: Vec::new(),
                tool_budget: Vec::new(),
                now_ms: 0,
                stop: None,
                written: None,
            },
        })
    }

    /// Keeps the last `steps` steps of the journal (records and trace), or with `None` the
    /// whole journal; by default [`JOURNAL_STEPS`]. Only the last steps make the report's
    /// `trace` and the explanation's path; every count stays the whole run's (see the module's
    /// docs). Given to a host that has taken no step yet.
    #[must_use]
    pub fn keep_journal(mut self, steps: Option<u32>) -> Host {
        self.keep.journal_steps = steps.map(|s| s.max(1));
        self
    }

    /// How many steps of the journal the host keeps (`None`: all).
    pub fn journal_steps(&self) -> Option<u32> {
        self.keep.journal_steps
    }

    /// The machine.
    pub fn machine(&self) -> &Machine {
        &self.machine
    }

    /// The current state.
    pub fn phase(&self) -> Phase {
        self.machine.phase()
    }

    /// The journal's last steps (see [`Host::keep_journal`]), as [`crate::Run`] would have
    /// written them (every record under the same key), without the payloads the explanation
    /// does not read: turns' texts and calls, tool arguments and outputs.
    pub fn records(&self) -> &[Record] {
        &self.keep.records
    }

    /// Feeds one event. An event that is not valid (a `cancel` that is not `true`) is refused
    /// with an error and changes nothing; a valid one the kernel does not expect in its state is
    /// [`Handle::Ignored`].
    pub fn handle(&mut self, event: EventIn) -> Result<Handle, InputError> {
        self.keep.written = None;
        let event = match event {
            EventIn::ModelTurn(turn) => {
                let turn = self.turn(turn);
                self.keep.written = (turn.recovered_calls() > 0).then(|| turn.text.clone());
                Event::ModelTurn(turn)
            }
            EventIn::ModelError(e) => Event::ModelError {
                kind: e.kind,
                retry_after_ms: e.retry_after_ms,
            },
            EventIn::ToolResults(results) => return self.results(results),
            EventIn::Verdict(v) => {
                let mut missing = v.missing.unwrap_or_default();
                if let Some(feedback) = v.feedback.filter(|f| !f.trim().is_empty()) {
                    missing.push(feedback);
                }
                Event::Verdict(Verdict {
                    complete: v.complete,
                    missing,
                })
            }
            EventIn::Tick(now_ms) => {
                self.keep.now_ms = self.keep.now_ms.max(now_ms);
                Event::Tick { now_ms }
            }
            EventIn::Cancel(true) => Event::Cancel,
            EventIn::Cancel(false) => {
                return Err(InputError::at(
                    "event.cancel",
                    "must be true (the kill switch has no off)",
                ));
            }
        };
        // Journaled only if it makes a step (a clock reading before the deadline does not).
        let entry = lean_entry(&event);
        let handled = self.machine.handle(event);
        Ok(self.after(handled, Some(entry), Vec::new()))
    }

    /// The tool calls of a turn, with the scripted model's ids where the host gave none.
    fn turn(&self, turn: TurnIn) -> ModelTurn {
        let call = self.machine.stats().model_calls;
        let tool_calls = turn
            .tool_calls
            .unwrap_or_default()
            .into_iter()
            .enumerate()
            .map(|(i, c)| {
                ToolCall::new(
                    c.id.unwrap_or_else(|| format!("call-{call}-{i}")),
                    c.name,
                    c.arguments
                        .unwrap_or_else(|| Value::Object(serde_json::Map::new())),
                )
            })
            .collect();
        let mut out = ModelTurn {
            text: turn.text.unwrap_or_default(),
            tool_calls,
            needs_more_work: turn.needs_more_work,
            usage: turn.usage,
            finish: turn.finish.unwrap_or_default(),
            reasoning: turn.reasoning.unwrap_or(false),
            text_calls: None,
        };
        // A tool call written in the text: run as a real call (it goes out in `run_tools`, with
        // an id of its own), or left for the kernel's nudge.
        // Values a format wrote as text (XML parameters) typed by the offered tool's schema.
        let offered = turn.tools.as_deref();
        let names = offered.map(Offered::names);
        let schemas = offered.map(Offered::schemas).unwrap_or_default();
        textcall::recover_typed(
            &mut out,
            names.as_deref(),
            &schemas,
            self.machine.policy().text_tool_calls,
            &format!("text-{call}-"),
        );
        out
    }

    fn results(&mut self, results: Vec<ResultIn>) -> Result<Handle, InputError> {
        let mut out = Vec::with_capacity(results.len());
        for (i, r) in results.into_iter().enumerate() {
            let outcome = match (r.ok, r.error) {
                (Some(_), Some(_)) => {
                    return Err(InputError::at(
                        format!("event.tool_results[{i}]"),
                        "has both `ok` and `error`",
                    ));
                }
                (None, None) => {
                    return Err(InputError::at(
                        format!("event.tool_results[{i}]"),
                        "needs `ok` or `error`",
                    ));
                }
                (Some(value), None) => {
                    if r.message.is_some() {
                        return Err(InputError::at(
                            format!("event.tool_results[{i}].message"),
                            "goes with `error`, not `ok`",
                        ));
                    }
                    ToolOutcome::ok(value)
                }
                (None, Some(kind)) => ToolOutcome::Error {
                    kind,
                    message: r.message.unwrap_or_default(),
                },
            };
            out.push(ToolResult {
                call_id: r.call_id.into(),
                name: r.name.into(),
                outcome,
            });
        }
        // In the batch's order, as the runtime feeds them (the kernel takes any order).
        let mut results_records = Vec::new();
        if let Some(batch) = &self.keep.batch {
            let calls: Vec<&ToolCall> = executed(batch).collect();
            if calls.len() == out.len() {
                let mut ordered = Vec::with_capacity(out.len());
                for call in &calls {
                    if let Some(at) = out.iter().position(|r| r.call_id == call.id) {
                        ordered.push(out.swap_remove(at));
                    }
                }
                ordered.append(&mut out);
                out = ordered;
                let checkpoint = self.machine.stats().steps;
                let k = u32::try_from(calls.len()).unwrap_or(u32::MAX);
                for (j, r) in out.iter().enumerate() {
                    results_records.push(Record {
                        key: Key::result(checkpoint, k, u32::try_from(j).unwrap_or(u32::MAX)),
                        entry: Entry::ToolResult(lean_result(r)),
                    });
                }
            }
        }
        let handled = self.machine.handle_results(&out);
        let entry = Entry::ToolResults {
            results: out.iter().map(lean_result).collect(),
        };
        Ok(self.after(handled, Some(entry), results_records))
    }

    /// Journals a step (as the runtime does: the results of the batch, the event, the
    /// transition and what it decided) and queues its commands.
    fn after(&mut self, handled: Handled, entry: Option<Entry>, results: Vec<Record>) -> Handle {
        let record = match handled {
            Handled::Step(record) => record,
            Handled::Observed => return Handle::Observed,
            Handled::Ignored { .. } => return Handle::Ignored,
        };
        // Commands of an earlier step the host never took are superseded.
        self.keep.out.clear();
        self.keep
            .out
            .extend(std::iter::from_fn(|| self.machine.poll_command()));
        let records = &mut self.keep.records;
        if records.is_empty() {
            records.push(Record {
                key: Key::event(0),
                entry: Entry::User {
                    task: self.keep.task.clone(),
                },
            });
        }
        if matches!(entry, Some(Entry::ToolResults { .. })) {
            self.keep.batch = None;
        }
        records.extend(results);
        if let Some(entry) = entry {
            records.push(Record {
                key: Key::event(record.step),
                entry,
            });
        }
        let commands: &[Command] = self.keep.out.make_contiguous();
        records.extend(lean_decision_records(&record, commands));
        self.keep.trace.push(record);
        for command in commands.iter() {
            match command {
                Command::RunTools(batch) => {
                    self.keep
                        .tool_budget
                        .extend(tool_budget_events(record.step, batch));
                    // Only its calls' ids and order are read again: the arguments stay out.
                    self.keep.batch = Some(lean_batch(batch));
                }
                Command::Stop(stop) => self.keep.stop = Some((**stop).clone()),
                // The checkpoint the host writes, under the key `terminus run` journals it with
                // (its summary is a payload the explanation never reads: left out).
                Command::Checkpoint(request) => self.keep.records.push(Record {
                    key: Key::written_checkpoint(record.step),
                    entry: Entry::Checkpoint {
                        note: request.note.clone(),
                        text: String::new(),
                    },
                }),
                _ => {}
            }
        }
        self.let_go(record.step);
        if !record.to.is_terminal() {
            let due = self.keep.warned.check(
                self.machine.policy(),
                &self.machine.stats(),
                self.keep.now_ms,
            );
            self.keep.warnings.extend(due);
        }
        Handle::Step
    }

    /// Lets go of the journal's steps before the last `journal_steps` (at `step`), keeping the
    /// tally of their records.
    fn let_go(&mut self, step: u32) {
        let Some(window) = self.keep.journal_steps else {
            return;
        };
        let Some(first) = step.checked_sub(window) else {
            return;
        };
        let keep = &mut self.keep;
        let old = keep
            .records
            .iter()
            .take_while(|r| r.key.checkpoint <= first)
            .count();
        for record in keep.records.drain(..old) {
            keep.earlier.add(&record);
        }
        let old = keep.trace.iter().take_while(|r| r.step <= first).count();
        keep.trace.drain(..old);
        // A tool budget's blocks go on as long as the model calls the tool alongside others.
        let old = keep
            .tool_budget
            .iter()
            .take_while(|e| e.step <= first)
            .count();
        keep.tool_budget.drain(..old);
    }

    /// Goes on with a run a budget stopped, with that budget raised (`budgets`: policy field to
    /// new value, see [`Machine::raise`]): the step the stop pre-empted is taken, journaled with a
    /// `raised` entry as [`crate::Resume::raise`] journals it. A raise the kernel refuses is an
    /// error that says why, and changes nothing.
    pub fn raise(&mut self, budgets: &BTreeMap<String, u64>) -> Result<Handle, RaiseError> {
        let raises: Vec<Raise> = budgets
            .iter()
            .map(|(field, to)| Raise {
                field: field.clone(),
                to: *to,
            })
            .collect();
        let handled = self.machine.raise(&raises)?;
        self.keep.stop = None;
        Ok(self.after(handled, Some(Entry::Raised { raises }), Vec::new()))
    }

    /// The next command, or `None` while the kernel waits for an event.
    pub fn next_command(&mut self) -> Option<CommandOut> {
        let command = self.keep.out.pop_front()?;
        Some(self.command_out(command))
    }

    /// How many commands wait for [`Host::next_command`]: a binding that knows none wait can
    /// answer `None` without asking.
    pub fn pending(&self) -> usize {
        self.keep.out.len()
    }

    /// Takes the next command if it is `call_model` (the hot path of a binding), returning its
    /// delay and whether tools are allowed; any other command stays queued.
    pub fn next_call_model(&mut self) -> Option<(u64, bool)> {
        match self.keep.out.front() {
            Some(Command::CallModel(call)) => {
                let out = (call.delay_ms, call.tools);
                self.keep.out.pop_front();
                Some(out)
            }
            _ => None,
        }
    }

    /// The next command's delay and tools if it is `call_model`, without taking it (a binding
    /// that hands this command out itself takes it later with [`Host::skip_command`]).
    pub fn peek_call_model(&self) -> Option<(u64, bool)> {
        match self.keep.out.front() {
            Some(Command::CallModel(call)) => Some((call.delay_ms, call.tools)),
            _ => None,
        }
    }

    /// If the next command is `run_tools` running every call of its turn (none refused, no
    /// budget warning), how many calls it has: a binding that holds the turn's calls (ids
    /// given) can hand out `{"command": "run_tools", "calls": [...]}` itself, then take the
    /// command with [`Host::skip_command`].
    pub fn peek_whole_batch(&self) -> Option<usize> {
        match self.keep.out.front() {
            Some(Command::RunTools(batch))
                if batch.refused.is_empty()
                    && batch.warnings.is_empty()
                    && self.keep.written.is_none() =>
            {
                Some(batch.calls.len())
            }
            _ => None,
        }
    }

    /// The next command, without taking it: what [`Host::next_command`] would return now.
    pub fn peek_command(&self) -> Option<CommandOut> {
        let command = self.keep.out.front()?.clone();
        Some(self.command_out(command))
    }

    /// Takes the next command without converting it (a binding that already handed it out
    /// from [`Host::peek_command`] or [`Host::peek_call_model`]); false when none waits.
    pub fn skip_command(&mut self) -> bool {
        self.keep.out.pop_front().is_some()
    }

    fn command_out(&self, command: Command) -> CommandOut {
        match command {
            Command::CallModel(call) => CommandOut::CallModel {
                delay_ms: call.delay_ms,
                tools: call.tools,
            },
            Command::RunTools(batch) => {
                let mut calls = Vec::with_capacity(batch.calls.len());
                let mut refused = Vec::new();
                let mut warnings = Vec::new();
                let ToolBatch {
                    calls: given,
                    refused: refusals,
                    warnings: warned,
                } = batch;
                let batch = ToolBatch {
                    calls: Vec::new(),
                    refused: refusals,
                    warnings: warned,
                };
                // The command is the host's to hand out: its strings and arguments move out.
                for (i, call) in given.into_iter().enumerate() {
                    let ToolCall {
                        id,
                        name,
                        arguments,
                    } = call;
                    let id = id.into_string();
                    if let Some(exclusion) = batch.refusal(i) {
                        refused.push(RefusedOut {
                            text: refusal_text(
                                &name,
                                exclusion,
                                &self.machine.policy().tool_budgets,
                            ),
                            id,
                            name: name.into_string(),
                            arguments: arguments.into_value(),
                        });
                        continue;
                    }
                    if let Some(w) = batch.warning(i) {
                        warnings.push(WarningOut {
                            id: id.clone(),
                            text: budget_warning_text(
                                &name,
                                w,
                                &self.machine.policy().tool_budgets,
                            ),
                        });
                    }
                    calls.push(CallOut {
                        id,
                        name: name.into_string(),
                        arguments: arguments.into_value(),
                    });
                }
                CommandOut::RunTools {
                    calls,
                    refused,
                    warnings,
                    written: self.keep.written.clone(),
                }
            }
            Command::Verify(request) => {
                let policy = self.machine.policy();
                let mut missing = missing_by_rules(
                    &request.todos,
                    self.machine.ledger(),
                    &policy.completion_requires,
                );
                // A claim that does not meet the output schema: its first error is missing too.
                if let Some(schema) = &policy.output_schema {
                    match crate::output::check_claim(schema, &request.claim) {
                        Ok(Ok(_)) => {}
                        Ok(Err(rejected)) => missing.extend(rejected.missing),
                        Err(problem) => missing.push(problem),
                    }
                }
                CommandOut::Verify {
                    missing,
                    claim: request.claim,
                    todos: request.todos,
                }
            }
            Command::Nudge(nudge) => CommandOut::Nudge { text: nudge.text },
            Command::Notice(notice) => CommandOut::Notice {
                text: notice.text().to_owned(),
            },
            Command::Checkpoint(request) => {
                let request = *request;
                CommandOut::Checkpoint {
                    prompt: request.prompt,
                    note: request.note,
                    blocked: request.blocked,
                    lifted: request.lifted,
                }
            }
            Command::Stop(_) => CommandOut::Stop {
                report: self.report_json(),
            },
            // A command a later kernel adds: the host is told its name.
            other => CommandOut::Notice {
                text: format!("unsupported kernel command: {other:?}"),
            },
        }
    }

    /// The report of the ended run, as [`crate::Run`] gives it (execution id empty), or `None`
    /// while the run goes on.
    pub fn report(&self) -> Option<Report> {
        let stop = self.keep.stop.clone()?;
        let mut report = Report::new(
            String::new(),
            stop,
            self.machine.todos().to_vec(),
            self.keep.trace.clone(),
            self.entries(),
            0,
        );
        report.warnings = self.keep.warnings.clone();
        report.tool_budget_events = self.keep.tool_budget.clone();
        report.set_output(self.machine.policy());
        report.set_scale(self.machine.policy());
        Some(report)
    }

    /// The report as JSON without the execution id: the ended run's, or while it goes on the
    /// same fields with `outcome`, `reason`, `rule` null and the counters so far.
    pub fn report_json(&self) -> Value {
        let mut value = match self.report() {
            Some(report) => serde_json::to_value(report).unwrap_or(Value::Null),
            None => {
                let s = self.machine.stats();
                serde_json::json!({
                    "outcome": null,
                    "reason": null,
                    "steps": s.steps,
                    "model_calls": s.model_calls,
                    "tool_calls": s.tool_calls,
                    "nudges": s.nudges,
                    "verification_failures": s.verification_failures,
                    "no_ops": s.no_ops,
                    "empty_responses": s.empty_responses,
                    "excluded_tools": self.machine.ledger().excluded().map(|(t, _)| t).collect::<Vec<_>>(),
                    "entries": self.entries(),
                    "duplicates_prevented": 0,
                    "result": self.machine.result(),
                    "rule": null,
                    "todos": self.machine.todos(),
                    "stats": s,
                    "trace": self.keep.trace,
                })
            }
        };
        if let Value::Object(map) = &mut value {
            map.remove("execution");
            if !self.keep.warnings.is_empty() && !map.contains_key("warnings") {
                map.insert(
                    "warnings".into(),
                    serde_json::to_value(&self.keep.warnings).unwrap_or(Value::Null),
                );
            }
            if !self.keep.tool_budget.is_empty() && !map.contains_key("tool_budget_events") {
                map.insert(
                    "tool_budget_events".into(),
                    serde_json::to_value(&self.keep.tool_budget).unwrap_or(Value::Null),
                );
            }
        }
        value
    }

    /// The journal's entries over the whole run: those let go and those kept.
    fn entries(&self) -> u64 {
        let kept = u64::try_from(self.keep.records.len()).unwrap_or(u64::MAX);
        self.keep.earlier.entries.saturating_add(kept)
    }

    /// Why the run stopped and what to change: the explanation `terminus inspect` gives of the
    /// same run (execution id: the run's name, else `run`); for a live run, where it is. Its
    /// path is that of the steps the journal keeps (see [`Host::keep_journal`]).
    pub fn explain(&self) -> Explanation {
        let policy = self.machine.policy();
        // The host has the machine: the (lean) records are not replayed.
        let mut builder = Builder::after(policy, self.keep.earlier.clone());
        for record in &self.keep.records {
            builder.push(record);
        }
        let spec = RunSpec {
            task: self.keep.task.clone(),
            name: self.keep.name.clone(),
            system: None,
            policy: policy.clone(),
            host: None,
            started_unix_ms: None,
        };
        let report = self.report();
        let execution = self.keep.name.as_deref().unwrap_or("run");
        let mut explanation = builder.finish_with(
            &Stored {
                execution,
                spec: &spec,
                report: report.as_ref(),
                failure: None,
                conflicts: 0,
            },
            Some(&self.machine),
        );
        if report.is_none() {
            explanation.set_running(policy);
        }
        explanation
    }

    /// The whole host (machine, pending commands, the journal's last steps) as JSON text, of a
    /// size bounded whatever the run's length (see the module's docs).
    pub fn snapshot(&self) -> String {
        let saved = SavedRef {
            terminus_snapshot: SNAPSHOT_VERSION,
            machine: &self.machine,
            keep: &self.keep,
        };
        // Plain data with string keys: serializing cannot fail.
        serde_json::to_string(&saved).unwrap_or_default()
    }

    /// A host saved by [`Host::snapshot`]. Text from outside is checked: its format, the
    /// machine's policy and invariants ([`Machine::restore`]), and that the host's trace and
    /// journal agree with the machine.
    pub fn restore(text: &str) -> Result<Host, InputError> {
        let de = &mut serde_json::Deserializer::from_str(text);
        let saved: Saved = serde_path_to_error::deserialize(de)
            .map_err(|e| InputError::from_serde("snapshot", &e))?;
        if saved.terminus_snapshot != SNAPSHOT_VERSION {
            return Err(InputError::at(
                "snapshot.terminus_snapshot",
                format!(
                    "version {} is not {SNAPSHOT_VERSION}",
                    saved.terminus_snapshot
                ),
            ));
        }
        let bytes = serde_json::to_vec(&saved.machine).unwrap_or_default();
        let machine = Machine::restore(&bytes)
            .map_err(|e| InputError::at("snapshot.machine", e.to_string()))?;
        let mut keep = saved.keep;
        keep.journal_steps = keep.journal_steps.map(|w| w.max(1));
        let steps = machine.stats().steps;
        // The last steps: as many as the window, or all while none was let go.
        let kept = match keep.journal_steps {
            Some(window) => steps.min(window),
            None if keep.earlier.entries == 0 => steps,
            None => u32::try_from(keep.trace.len())
                .unwrap_or(u32::MAX)
                .min(steps),
        };
        let first = steps - kept;
        if keep.trace.len() != kept as usize
            || keep
                .trace
                .iter()
                .enumerate()
                .any(|(i, r)| r.step as usize != first as usize + i + 1)
        {
            return Err(InputError::at(
                "snapshot.trace",
                format!("does not hold the machine's last {kept} of {steps} steps in order"),
            ));
        }
        if keep.stop.is_some() != machine.phase().is_terminal() {
            return Err(InputError::at(
                "snapshot.stop",
                "disagrees with the machine's state",
            ));
        }
        if (steps == 0) != keep.records.is_empty() {
            return Err(InputError::at(
                "snapshot.records",
                "disagree with the machine's steps",
            ));
        }
        Ok(Host { machine, keep })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::host::wire::policy_from_json;

    fn host(policy: &str) -> Host {
        let policy = policy_from_json(policy).expect("a valid policy");
        Host::new(policy, "task".into(), Some("t".into())).expect("a host")
    }

    fn event(json: &str) -> EventIn {
        EventIn::from_json(json).expect("a valid event")
    }

    #[test]
    fn a_refused_event_changes_nothing() {
        let mut h = host("{}");
        let before = h.snapshot();
        let e = h
            .handle(event(r#"{"cancel": false}"#))
            .expect_err("refused");
        assert_eq!(e.path, "event.cancel");
        let e = h
            .handle(event(
                r#"{"tool_results": [{"call_id": "a", "name": "t"}]}"#,
            ))
            .expect_err("neither ok nor error");
        assert_eq!(e.path, "event.tool_results[0]");
        assert_eq!(h.snapshot(), before);
    }

    #[test]
    fn a_run_journals_what_the_runtime_journals_and_restores() {
        let mut h = host(r#"{"completion_requires": ["write_file"]}"#);
        assert_eq!(
            h.next_command(),
            Some(CommandOut::CallModel {
                delay_ms: 0,
                tools: true
            })
        );
        assert_eq!(h.next_command(), None);
        let turn = r#"{"model_turn": {"tool_calls": [{"name": "write_file"}]}}"#;
        assert_eq!(h.handle(event(turn)), Ok(Handle::Step));
        let Some(CommandOut::RunTools { calls, .. }) = h.next_command() else {
            panic!("run_tools expected");
        };
        assert_eq!(calls[0].id, "call-1-0");
        let saved = h.snapshot();
        let results =
            r#"{"tool_results": [{"call_id": "call-1-0", "name": "write_file", "ok": "written"}]}"#;
        assert_eq!(h.handle(event(results)), Ok(Handle::Step));
        let mut copy = Host::restore(&saved).expect("a snapshot");
        assert_eq!(copy.handle(event(results)), Ok(Handle::Step));
        assert_eq!(copy, h);
        let done = r#"{"model_turn": {"text": "Done.", "needs_more_work": false}}"#;
        h.next_command();
        assert_eq!(h.handle(event(done)), Ok(Handle::Step));
        let Some(CommandOut::Stop { report }) = h.next_command() else {
            panic!("stop expected");
        };
        assert_eq!(report["reason"], "explicit");
        assert!(report.get("execution").is_none());
        // The task; per step the event and transition; the tool intent and result; the stop.
        assert_eq!(report["entries"], 10);
        let kinds: Vec<&str> = h.records().iter().map(|r| r.entry.kind()).collect();
        assert_eq!(
            kinds,
            [
                "user",
                "assistant",
                "transition",
                "tool_call",
                "tool_result",
                "tool_results",
                "transition",
                "assistant",
                "transition",
                "stop"
            ]
        );
        let keys: Vec<Key> = h.records().iter().map(|r| r.key).collect();
        let mut sorted = keys.clone();
        sorted.sort();
        assert_eq!(keys, sorted, "records in key order, as a store pages them");
        assert_eq!(h.explain().status, "ended");
    }

    #[test]
    fn offered_tools_come_as_names_or_with_their_schemas_and_type_a_written_calls_values() {
        let glm = "<tool_call>count\n<arg_key>n</arg_key>\n<arg_value>3</arg_value>\n</tool_call>";
        let turn = |tools: &str| {
            let text = serde_json::to_string(glm).expect("a string");
            format!(r#"{{"model_turn": {{"text": {text}, "tools": {tools}}}}}"#)
        };
        let run = |tools: &str| {
            let mut h = host("{}");
            h.next_command();
            assert_eq!(h.handle(event(&turn(tools))), Ok(Handle::Step));
            match h.next_command() {
                Some(CommandOut::RunTools { calls, .. }) => calls[0].arguments.clone(),
                other => panic!("run_tools expected, got {other:?}"),
            }
        };
        let schema = r#"{"type": "object", "properties": {"n": {"type": "number"}}}"#;
        let typed = run(&format!(
            r#"[{{"name": "count", "parameters": {schema}}}, "read"]"#
        ));
        assert_eq!(typed, serde_json::json!({"n": 3}));
        assert_eq!(run(r#"["count"]"#), serde_json::json!({"n": "3"}));
        assert_eq!(run(r#"[{"name": "count"}]"#), serde_json::json!({"n": "3"}));

        // Each bad entry is refused at its path, before it reaches the run.
        for (tools, path, says) in [
            (r#"[3]"#, "event.model_turn.tools[0]", "a tool's name or"),
            (
                r#"[{"parameters": {}}]"#,
                "event.model_turn.tools[0]",
                "missing field `name`",
            ),
            (
                r#"[{"name": "count", "parameters": "x"}]"#,
                "event.model_turn.tools[0]",
                "not a JSON Schema object",
            ),
            (
                r#"[{"name": "count", "schema": {}}]"#,
                "event.model_turn.tools[0]",
                "unknown field `schema`",
            ),
        ] {
            let e = EventIn::from_json(&turn(tools)).expect_err(tools);
            assert_eq!(e.path, path, "{tools}");
            assert!(e.message.contains(says), "{tools}: {}", e.message);
        }
    }

    #[test]
    fn peeking_leaves_the_command_and_skipping_takes_it() {
        let mut h = host("{}");
        assert_eq!(h.peek_call_model(), Some((0, true)));
        assert_eq!(h.pending(), 1);
        assert!(h.skip_command());
        assert!(!h.skip_command());
        assert_eq!(h.peek_call_model(), None);
        let turn = r#"{"model_turn": {"tool_calls": [{"id": "a", "name": "t"}]}}"#;
        assert_eq!(h.handle(event(turn)), Ok(Handle::Step));
        assert_eq!(h.peek_call_model(), None);
        assert_eq!(h.peek_whole_batch(), Some(1));
        let peeked = h.peek_command();
        assert!(matches!(peeked, Some(CommandOut::RunTools { .. })));
        assert_eq!(h.pending(), 1);
        assert_eq!(h.next_command(), peeked);
        assert_eq!(h.peek_command(), None);
        assert_eq!(h.peek_whole_batch(), None);
        // A refused call: not the whole batch.
        let mut h = host(r#"{"tool_budgets": {"t": {"block_at": 1}}}"#);
        h.skip_command();
        let two = r#"{"model_turn": {"tool_calls": [{"id": "a", "name": "t"}, {"id": "b", "name": "u"}]}}"#;
        assert_eq!(h.handle(event(two)), Ok(Handle::Step));
        assert_eq!(h.peek_whole_batch(), None);
        let Some(CommandOut::RunTools { refused, .. }) = h.peek_command() else {
            panic!("run_tools expected");
        };
        assert_eq!(refused.len(), 1);
    }

    /// A host after `turns` tool turns (each with its own argument and usage, so no loop).
    fn after_turns(mut h: Host, turns: u32) -> Host {
        for i in 0..turns {
            h.skip_command();
            let turn = format!(
                r#"{{"model_turn": {{"tool_calls": [{{"id": "c{i}", "name": "t", "arguments": {{"i": {i}}}}}],
                "usage": {{"input_tokens": {}, "output_tokens": 7}}}}}}"#,
                100 + i
            );
            assert_eq!(h.handle(event(&turn)), Ok(Handle::Step));
            h.skip_command();
            let results =
                format!(r#"{{"tool_results": [{{"call_id": "c{i}", "name": "t", "ok": {i}}}]}}"#);
            assert_eq!(h.handle(event(&results)), Ok(Handle::Step));
        }
        h
    }

    const LONG: &str = r#"{"max_steps": 100000, "max_model_calls": 100000}"#;

    #[test]
    fn the_snapshot_stays_the_same_size_however_long_the_run() {
        let short = after_turns(host(LONG), 50).snapshot().len();
        let long = after_turns(host(LONG), 200);
        let size = long.snapshot().len();
        // The same content but for longer numbers (ids, steps, tokens).
        assert!(
            size < short + 512,
            "{short} bytes after 50 turns, {size} after 200"
        );
        assert_eq!(long.machine().stats().steps, 400);
        // Every count is the whole run's; the trace and the path are the last steps'.
        let whole = after_turns(host(LONG).keep_journal(None), 200);
        assert!(whole.snapshot().len() > 10 * size);
        let (report, full) = (long.report_json(), whole.report_json());
        assert_eq!(report["entries"], full["entries"]);
        assert_eq!(report["stats"], full["stats"]);
        assert_eq!(
            report["trace"].as_array().map(Vec::len),
            Some(JOURNAL_STEPS as usize)
        );
        let (e, f) = (long.explain(), whole.explain());
        assert_eq!(
            (
                e.entries,
                &e.entry_kinds,
                &e.tools.len(),
                e.unanswered_model_calls
            ),
            (
                f.entries,
                &f.entry_kinds,
                &f.tools.len(),
                f.unanswered_model_calls
            )
        );
        assert_eq!(e.path.len(), JOURNAL_STEPS as usize);
        assert_eq!(
            e.path.last().map(|p| p.tokens),
            f.path.last().map(|p| p.tokens)
        );
        assert_eq!(
            e.trace[..],
            f.trace[f.trace.len() - JOURNAL_STEPS as usize..]
        );
        // Restored, it is the same host, and goes on the same.
        let copy = Host::restore(&long.snapshot()).expect("a snapshot");
        assert_eq!(copy, long);
        assert_eq!(after_turns(copy, 3), after_turns(long, 3));
        let copy = Host::restore(&whole.snapshot()).expect("a snapshot");
        assert_eq!(copy, whole);
    }

    #[test]
    fn restore_refuses_text_that_is_not_a_snapshot() {
        for text in ["", "{}", "[]", r#"{"terminus_snapshot": 2}"#] {
            let e = Host::restore(text).expect_err("not a snapshot");
            assert!(e.path.starts_with("snapshot"), "{e}");
        }
    }
}
