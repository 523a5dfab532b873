//! Resuming: claim the execution, replay its journal page by page into a fresh machine and
//! conversation, and hand both to a driver.

use super::{Driver, Env, Tally, unix_ms};
use crate::budget::{ToolBudgetEvent, tool_budget_events};
use crate::conversation::Conversation;
use crate::error::RunError;
use crate::journal::Lease;
use crate::observer::Observer;
use crate::report::Report;
use std::sync::Arc;
use std::time::Duration;
use terminus_kernel::{
    CallState, Command, Entry, Handled, HeldCall, Key, Machine, Raise, RaiseError, Record, Replay,
    Stats, StepRecord, held_decision_records,
};
use tokio::time::Instant;

/// How many records a resume reads from the store at a time.
const RESUME_PAGE: usize = 512;

/// What [`Resume::on_replay`](super::Resume::on_replay) is told.
pub(super) type OnReplay = Box<dyn FnOnce(&Replayed) + Send>;

/// What a resume found already answered in the journal: those model calls and tool results are
/// replayed, never asked for again.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Replayed {
    /// Model calls answered (turns and errors).
    pub model_answers: u64,
    /// Results journaled, per tool.
    pub tool_answers: std::collections::BTreeMap<String, u64>,
}

/// The resume path of [`Run::execute`]: claim, replay the journal page by page into a fresh
/// machine and conversation, and drive on from there.
pub(super) async fn resume_execution(
    mut env: Env,
    observer: &mut Option<Box<dyn Observer>>,
    on_replay: Option<OnReplay>,
    raises: Vec<Raise>,
) -> Result<Report, RunError> {
    let lease = env
        .store
        .claim(&env.execution, &env.config.worker, env.config.lease)
        .await
        .map_err(|e| {
            let e = RunError::from(e);
            crate::meters::claim_refused(&e);
            e
        })?;
    if !raises.is_empty() {
        match raise_journal(&env, &raises).await {
            Ok((record, stats)) => {
                // The raise is a step of its own: its progress line says what was raised.
                if let Some(observer) = observer.as_mut() {
                    let raised: Vec<String> = raises.iter().map(ToString::to_string).collect();
                    let summary = format!("raised {}", raised.join(", "));
                    observer.on_transition(&crate::observer::Transition {
                        record,
                        stats,
                        summary: &summary,
                        elapsed_ms: 0,
                    });
                }
            }
            Err(e) => {
                let _ = env.store.release(&lease).await;
                return Err(e);
            }
        }
    }
    let resumed = replay_journal(&mut env, on_replay).await;
    let mut driver = match resumed {
        Ok(Resumed::Ended(report)) => {
            let _ = env.store.release(&lease).await;
            return Ok(*report);
        }
        Ok(Resumed::Driver(parts)) => parts.into_driver(env, lease),
        Err(e) => {
            let _ = env.store.release(&lease).await;
            return Err(e);
        }
    };
    let result = driver.resume(observer).await;
    // A run that stopped released its claim with its report.
    if result.is_err() {
        let _ = driver.env.store.release(&driver.lease).await;
    }
    result
}

enum Resumed {
    Ended(Box<Report>),
    Driver(Box<ResumedParts>),
}

/// What a replay rebuilt, before a driver owns it.
struct ResumedParts {
    machine: Machine,
    outstanding: Vec<Command>,
    calls: Vec<CallState>,
    held: Vec<Option<HeldCall>>,
    conversation: Conversation,
    trace: Vec<StepRecord>,
    /// The per-tool budget warnings and blocks of the replayed steps.
    tool_budget: Vec<ToolBudgetEvent>,
    model_answers: u64,
    /// The journal's entries, all replayed.
    entries: u64,
    started: Instant,
}

impl ResumedParts {
    pub(super) fn into_driver(self, env: Env, lease: Lease) -> Driver {
        let mut driver = Driver::new(env, self.machine, lease, self.conversation, self.started);
        driver.commands = self.outstanding;
        driver.trace = self.trace;
        driver.tool_budget = self.tool_budget;
        driver.model_calls = u32::try_from(self.model_answers).unwrap_or(u32::MAX);
        driver.resumed_calls = Some(self.calls);
        // Only a replayed tool batch has the journal's holds (a call of it not held is `None`
        // there); a run resumed before its next batch holds what the tool set holds.
        driver.resumed_held = (!self.held.is_empty()).then_some(self.held);
        driver.tally = Tally::replayed(self.entries);
        driver
    }
}

/// A raise: replays the whole journal of the ended `env.execution`, raises the stopped machine
/// (the kernel refuses a raise that does not lift the budget that stopped it), and journals the
/// raise and the step it takes while clearing the report, in one transaction. The replay that
/// follows is a resume's: it reads the raise from the journal, as a resume after a crash would.
async fn raise_journal(env: &Env, raises: &[Raise]) -> Result<(StepRecord, Stats), RunError> {
    let execution = env.execution.as_str();
    let refused = |error: RaiseError| RunError::Raise {
        execution: execution.to_owned(),
        error,
    };
    let store = &env.store;
    let Some(spec) = store.spec(execution).await? else {
        return Err(crate::journal::StoreError::NotFound(execution.to_owned()).into());
    };
    if store.report(execution).await?.is_none() {
        return Err(refused(RaiseError::Live));
    }
    let mut page = store.page(execution, None, RESUME_PAGE).await?;
    let Some(first) = page.first() else {
        return Err(refused(RaiseError::Live));
    };
    let mut replay = Replay::start(spec.policy.clone(), Record::clone(first))
        .map_err(|e| RunError::Replay(e.to_string()))?;
    let mut skip = 1;
    loop {
        let last = page.last().map(|r| r.key);
        let full = page.len() >= RESUME_PAGE;
        for record in std::mem::take(&mut page).into_iter().skip(skip) {
            replay
                .push(Arc::unwrap_or_clone(record))
                .map_err(|e| RunError::Replay(e.to_string()))?;
        }
        skip = 0;
        if !full {
            break;
        }
        page = store.page(execution, last, RESUME_PAGE).await?;
        if page.is_empty() {
            break;
        }
    }
    let mut machine = replay.finish().machine;
    let Handled::Step(step) = machine.raise(raises).map_err(refused)? else {
        return Err(RunError::Internal("a raise that took no step".into()));
    };
    let commands: Vec<Command> = std::iter::from_fn(|| machine.poll_command()).collect();
    let mut records = vec![Arc::new(Record {
        key: Key::event(step.step),
        entry: Entry::Raised {
            raises: raises.to_vec(),
        },
    })];
    records.extend(
        held_decision_records(&step, &commands, |name| {
            let idempotent = env.tools.get(name).is_none_or(|t| t.idempotent());
            (idempotent, env.tools.held(name))
        })
        .into_iter()
        .map(Arc::new),
    );
    if !store.reopen(execution, records).await? {
        // Another raise (or a resume that stored the report again) came first.
        return Err(refused(RaiseError::Live));
    }
    Ok((step, machine.stats()))
}

/// Reads the journal of `env.execution` in pages and replays it.
async fn replay_journal(env: &mut Env, on_replay: Option<OnReplay>) -> Result<Resumed, RunError> {
    let store = Arc::clone(&env.store);
    let execution = env.execution.clone();
    let Some(mut spec) = store.spec(&execution).await? else {
        return Err(crate::journal::StoreError::NotFound(execution).into());
    };
    // The host's data (a scenario can be large) is the host's business; free it now.
    spec.host = None;
    if let Some(report) = store.report(&execution).await? {
        return Ok(Resumed::Ended(Box::new(report)));
    }
    env.task.clone_from(&spec.task);
    env.name.clone_from(&spec.name);
    if env.config.system_prompt.is_none() {
        env.config.system_prompt.clone_from(&spec.system);
    }
    let mut page = store.page(&execution, None, RESUME_PAGE).await?;
    let Some(first) = page.first() else {
        // Created and never started (submitted for a worker): start it from the beginning.
        let mut machine = Machine::new(spec.policy.clone()).map_err(RunError::Policy)?;
        let outstanding = std::iter::from_fn(|| machine.poll_command()).collect();
        let conversation = Conversation::new(
            env.config.system_prompt.as_deref(),
            &spec.task,
            env.conversation_read(),
            &spec.policy,
        );
        return Ok(Resumed::Driver(Box::new(ResumedParts {
            machine,
            outstanding,
            calls: Vec::new(),
            held: Vec::new(),
            conversation,
            trace: Vec::new(),
            tool_budget: Vec::new(),
            model_answers: 0,
            entries: 0,
            started: Instant::now(),
        })));
    };
    let mut replay = Replay::start(spec.policy.clone(), Record::clone(first))
        .map_err(|e| RunError::Replay(e.to_string()))?;
    let mut conversation = Conversation::new(
        env.config.system_prompt.as_deref(),
        &spec.task,
        env.conversation_read(),
        &spec.policy,
    );
    let mut trace = Vec::new();
    let mut tool_budget = Vec::new();
    let mut entries = 1;
    let mut skip = 1;
    loop {
        let last = page.last().map(|r| r.key);
        let full = page.len() >= RESUME_PAGE;
        // Each page is dropped once replayed: what the replay keeps does not grow with the
        // journal (the machine, the pending batch, the trace's steps, and the conversation
        // when something reads it).
        for record in std::mem::take(&mut page).into_iter().skip(skip) {
            // The page's records are not shared: taken, not copied.
            let record = Arc::unwrap_or_clone(record);
            entries += 1;
            if let Entry::Transition(step) = &record.entry {
                trace.push(*step);
            }
            // The batch tool results answer is the one the last replayed step issued.
            let batch = replay.outstanding().iter().find_map(|c| match c {
                Command::RunTools(b) => Some(b),
                _ => None,
            });
            conversation.apply(&record.entry, batch)?;
            let turn = matches!(record.entry, Entry::Assistant(_));
            replay
                .push(record)
                .map_err(|e| RunError::Replay(e.to_string()))?;
            if turn {
                // The tool budgets' warnings and blocks of the batch this turn made, as the
                // live run gave them.
                let step = replay.machine().stats().steps;
                for c in replay.outstanding() {
                    if let Command::RunTools(b) = c {
                        tool_budget.extend(tool_budget_events(step, b));
                    }
                }
            }
        }
        skip = 0;
        if !full {
            break;
        }
        page = store.page(&execution, last, RESUME_PAGE).await?;
        if page.is_empty() {
            break;
        }
    }
    let recovery = replay.finish();
    if let Some(on_replay) = on_replay {
        on_replay(&Replayed {
            model_answers: recovery.model_answers,
            tool_answers: recovery.tool_answers.clone(),
        });
    }
    // The run's clock goes on from its first start, so a deadline spans the interruption, but
    // not the time it spent suspended, waiting for decisions.
    let paused = store.suspension(&execution).await?.paused_ms;
    let elapsed = spec
        .started_unix_ms
        .map_or(0, |at| unix_ms().saturating_sub(at).saturating_sub(paused));
    let now = Instant::now();
    let started = now
        .checked_sub(Duration::from_millis(elapsed))
        .unwrap_or(now);
    Ok(Resumed::Driver(Box::new(ResumedParts {
        machine: recovery.machine,
        outstanding: recovery.outstanding,
        calls: recovery.calls,
        held: recovery.held,
        conversation,
        trace,
        tool_budget,
        model_answers: recovery.model_answers,
        entries,
        started,
    })))
}
