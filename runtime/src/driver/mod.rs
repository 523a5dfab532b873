//! The driver: one loop that feeds an event to the machine, drains its commands, carries out the
//! one action among them (call the model, run tools, verify) while racing the kill switch, the
//! run's deadline and the lease renewal, and journals every event before the machine sees it.
//!
//! The modules: `run` (the [`Run`] builder and [`Resume`]), `resume` (replaying a journal into a
//! driver), this one (the loop and its race), one per action (`model_step`, `tools_step`,
//! `verify_step`), `writer` (journaling), `progress` (the words of progress lines). The
//! conversation both the live path and the replay build is [`crate::conversation`].

mod checkpoint_step;
mod model_step;
mod progress;
mod resume;
mod run;
mod spans;
mod tools_step;
pub use checkpoint_step::{Summary, summary_text};
pub use tools_step::{in_doubt_outcome, lost_job_outcome};
mod verify_step;
mod writer;
use writer::Tally;

pub use resume::Replayed;
pub use run::{Adapters, Resume, Run, Setup};

use progress::summarize;

use crate::budget::{BudgetWarning, ToolBudgetEvent, Warned, tool_budget_events};
use crate::config::RuntimeConfig;
use crate::context::{ContextPolicy, ContextPrune, ContextWindow, Tokenizer};
use crate::conversation::Conversation;
use crate::error::RunError;
use crate::journal::{Claims, Lease};
use crate::kill::KillSwitch;
use crate::meters;
use crate::model::{Model, ModelInfo};
use crate::observer::{Observer, Transition};
use crate::report::Report;
use crate::tool::{ToolSet, ToolSpec, ToolsChanged};
use crate::verifier::Verifier;
use std::future::{Future, poll_fn};
use std::pin::Pin;
use std::sync::Arc;
use std::task::Poll;
use std::time::Duration;
use terminus_kernel::{
    CallState, CheckpointRequest, Command, Entry, Event, Handled, Key, Machine, ModelCall, Record,
    StepRecord, Stop, ToolBatch, VerifyRequest,
};
use tokio::time::{Instant, Sleep, sleep_until};
use tracing::Instrument as _;

/// Wall-clock milliseconds since the Unix epoch (a run's start, compared across processes).
fn unix_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

fn renewal_interval(lease: Duration) -> Duration {
    (lease / 3).max(Duration::from_millis(1))
}

/// What stays fixed during a run (shared by reference while an action is awaited), but the
/// tools of a [`crate::ToolSource`], replaced before a model call when they changed.
struct Env {
    task: String,
    /// The run's name (the scenario's, the agent's), for traces.
    name: Option<String>,
    model: Arc<dyn Model>,
    model_info: ModelInfo,
    tools: ToolSet,
    specs: Vec<ToolSpec>,
    verifier: Option<Arc<dyn Verifier>>,
    store: Arc<dyn Claims>,
    config: RuntimeConfig,
    execution: String,
    kill: KillSwitch,
    context: Option<(ContextPolicy, Arc<dyn Tokenizer>)>,
}

impl Env {
    /// Whether anything reads the conversation: the model, the verifier, the context window,
    /// or traces that capture content. When nothing does, none is kept (see
    /// [`crate::Model::reads_messages`]).
    fn conversation_read(&self) -> bool {
        self.model.reads_messages()
            || self.verifier.as_ref().is_some_and(|v| v.reads_transcript())
            || self.context.is_some()
            || self.config.capture_content
    }
}

struct Driver {
    env: Env,
    machine: Machine,
    conversation: Conversation,
    /// The tool batch being carried out (the results it gets are applied to the conversation
    /// against it).
    batch: Option<ToolBatch>,
    /// The commands of the last step, journaled and not yet carried out (a reused buffer).
    commands: Vec<Command>,
    trace: Vec<StepRecord>,
    /// The entries the journal holds, and the appends that found theirs stored.
    tally: Tally,
    model_calls: u32,
    start: Instant,
    deadline: Option<Instant>,
    lease: Lease,
    renewal: Instant,
    /// On resume, the journal's state of each executed call of the pending tool batch: done
    /// calls are not run again, in-doubt calls only if their tool is idempotent.
    resumed_calls: Option<Vec<CallState>>,
    /// On resume, the journal's held calls of the pending tool batch, with their decisions.
    resumed_held: Option<Vec<Option<terminus_kernel::HeldCall>>>,
    /// Records journaled with the next step, in the same append: the results of a batch that
    /// is safe to run again, and the step they fed (see [`Driver::feed`]).
    carry: Vec<Record>,
    /// The model's view of the conversation, when the run has a context policy.
    window: Option<ContextWindow>,
    /// Budgets warned about, and the warnings given (for the report).
    warned: Warned,
    warnings: Vec<BudgetWarning>,
    /// The prunes of the model's view so far (for the report).
    prunes: Vec<ContextPrune>,
    /// The warnings and blocks of per-tool budgets so far (for the report; a resumed run's
    /// include those its journal replays).
    tool_budget: Vec<ToolBudgetEvent>,
    /// The changes of the tool list so far (for the report).
    tools_changed: Vec<ToolsChanged>,
    /// A checkpoint the kernel asked for, written before the next model call.
    checkpoint: Option<CheckpointRequest>,
    /// Whether this driver goes on from a journal (for the run span).
    resumed: bool,
    /// The timers of the deadline and the lease renewal, kept armed across actions.
    deadline_timer: Armed,
    renew_timer: Armed,
}

/// A timer kept armed from one action to the next. Every action that waits races the deadline
/// and the lease renewal; a new tokio timer for each would, whenever the timer wheel was empty or
/// its next expiry later (the runtime's time driver recomputes it each time it parks), wake the
/// thread parked on that driver: a system call and a thread wake-up each agent step on the live
/// path, for a timer that almost never fires. One timer each, armed by the first action that
/// waits and reset only when its instant moves, stays in the wheel instead (and the model's and
/// the HTTP client's per-call timeouts, later than it, then wake nothing either).
#[derive(Default)]
struct Armed(std::sync::Mutex<Option<Pin<Box<Sleep>>>>);

impl Armed {
    /// Resolves at `at` (at once if it has passed).
    async fn until(&self, at: Instant) {
        poll_fn(|cx| {
            let mut slot = self
                .0
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            let timer = slot.get_or_insert_with(|| Box::pin(sleep_until(at)));
            if timer.deadline() != at {
                timer.as_mut().reset(at);
            }
            timer.as_mut().poll(cx)
        })
        .await;
    }
}

/// The one command among those drained that needs an answer.
enum Action {
    Model(ModelCall),
    Tools(ToolBatch),
    Verify(VerifyRequest),
    Stop(Stop),
}

/// How the race between an action, the kill switch and the deadline ended.
enum Raced<T> {
    Done(T),
    Cancel,
    Deadline,
}

type EventAndDetail = (Event, Option<String>);

impl Driver {
    fn new(
        mut env: Env,
        machine: Machine,
        lease: Lease,
        conversation: Conversation,
        start: Instant,
    ) -> Driver {
        env.specs = env.tools.specs();
        let window = env.context.take().map(|(policy, tokenizer)| {
            // Until a turn reports usage, the tokens outside the messages are the tool
            // definitions and the reply's priming.
            let tools = serde_json::to_string(&env.specs).unwrap_or_default();
            let fixed = tokenizer.count(&tools).saturating_add(3);
            ContextWindow::new(policy, tokenizer, fixed)
                .keeping(env.tools.keeps().map(str::to_owned))
        });
        Driver {
            window,
            deadline: machine
                .poll_timeout()
                .map(|ms| start + Duration::from_millis(ms)),
            renewal: Instant::now() + renewal_interval(lease.duration),
            env,
            lease,
            machine,
            conversation,
            batch: None,
            commands: Vec::with_capacity(4),
            trace: Vec::with_capacity(32),
            tally: Tally::default(),
            model_calls: 0,
            start,
            resumed_calls: None,
            resumed_held: None,
            carry: Vec::new(),
            warned: Warned::default(),
            warnings: Vec::new(),
            prunes: Vec::new(),
            tool_budget: Vec::new(),
            tools_changed: Vec::new(),
            checkpoint: None,
            resumed: false,
            deadline_timer: Armed::default(),
            renew_timer: Armed::default(),
        }
    }

    /// Goes on from a replayed journal: first re-journals the last replayed step (an
    /// interrupted run may have written its event and not all of its decisions; stored keys
    /// come back as prevented duplicates), then loops as [`Driver::drive`] does.
    async fn resume(
        &mut self,
        observer: &mut Option<Box<dyn Observer>>,
    ) -> Result<Report, RunError> {
        self.resumed = true;
        if let Some(last) = self.trace.last().copied() {
            self.journal_step(&last).await?;
        } else {
            self.put(Record {
                key: Key::event(0),
                entry: Entry::User {
                    task: self.env.task.clone(),
                },
            })
            .await?;
        }
        self.run_loop(observer).await
    }

    async fn drive(
        &mut self,
        observer: &mut Option<Box<dyn Observer>>,
    ) -> Result<Report, RunError> {
        // The task goes with the first step's append: until the model has answered there is
        // nothing to resume (a resume of an execution with no entries starts it over, and the
        // call in flight is made again, as after any crash during a model call).
        self.carry.push(Record {
            key: Key::event(0),
            entry: Entry::User {
                task: self.env.task.clone(),
            },
        });
        // The machine's first command (the first model call) comes from no step.
        self.commands
            .extend(std::iter::from_fn(|| self.machine.poll_command()));
        self.run_loop(observer).await
    }

    async fn run_loop(
        &mut self,
        observer: &mut Option<Box<dyn Observer>>,
    ) -> Result<Report, RunError> {
        let span = spans::run(&self.env, self.resumed);
        let result = self.steps(observer).instrument(span.clone()).await;
        spans::end_run(&span, &result);
        meters::run_ended(&result);
        // A run that fails (a model fault, a tool adapter's error) keeps what it carried, so a
        // resume need not run those calls again; a store that failed is not written again.
        if let Err(e) = &result
            && !matches!(e, RunError::Store(_))
            && !self.carry.is_empty()
        {
            let carried = std::mem::take(&mut self.carry);
            let _ = self.put_all(carried).await;
        }
        result
    }

    async fn steps(
        &mut self,
        observer: &mut Option<Box<dyn Observer>>,
    ) -> Result<Report, RunError> {
        loop {
            let (event, detail) = match self.drain()? {
                Action::Stop(stop) => return self.finish(stop, observer).await,
                Action::Model(call) => match self.checkpoint_step().await? {
                    // The kill switch or the deadline came first.
                    Some(interrupted) => interrupted,
                    None => self.model_step(call, observer).await?,
                },
                Action::Tools(batch) => self.tools_step(batch, observer).await?,
                Action::Verify(request) => self.verify_step(request).await?,
            };
            self.feed(event, detail, observer).await?;
        }
    }

    /// Carries out the last step's commands: notices and nudges go into the conversation as the
    /// kernel's messages; the one command that needs an answer is returned.
    fn drain(&mut self) -> Result<Action, RunError> {
        let mut action = None;
        let mut commands = std::mem::take(&mut self.commands);
        for command in commands.drain(..) {
            let next = match command {
                Command::Notice(notice) => {
                    self.conversation.apply(&Entry::Notice(notice), None)?;
                    continue;
                }
                Command::Nudge(nudge) => {
                    self.conversation.apply(&Entry::Nudge(*nudge), None)?;
                    continue;
                }
                Command::Checkpoint(request) => {
                    // Written before the model call that follows (`checkpoint_step`).
                    self.checkpoint = Some(*request);
                    continue;
                }
                Command::CallModel(call) => Action::Model(call),
                Command::RunTools(batch) => Action::Tools(batch),
                Command::Verify(request) => Action::Verify(request),
                Command::Stop(stop) => Action::Stop(*stop),
                other => {
                    return Err(RunError::Internal(format!(
                        "a kernel command this runtime cannot carry out: {other:?}"
                    )));
                }
            };
            if action.replace(next).is_some() {
                return Err(RunError::Internal(
                    "the kernel issued two actions after one event".into(),
                ));
            }
        }
        self.commands = commands;
        action.ok_or_else(|| {
            RunError::Internal(format!(
                "the kernel is {} with no command to carry out",
                self.machine.phase().as_str()
            ))
        })
    }

    /// Awaits `work` unless the kill switch or the deadline comes first; renews the lease while
    /// waiting. Returns the outcome and the next renewal time.
    async fn race<T>(
        &self,
        work: impl Future<Output = T>,
    ) -> Result<(Raced<T>, Instant), RunError> {
        tokio::pin!(work);
        // What is due already decides at once, in the order of the race below: a timer that
        // ran out while no action was awaited might not be seen to fire before an action that
        // is ready at once.
        let now = Instant::now();
        if self.env.kill.killed_now() {
            return Ok((Raced::Cancel, self.renewal));
        }
        let passed = if self.env.kill.keeps_clock() {
            self.env.kill.expired_now()
        } else {
            self.deadline.is_some_and(|at| now >= at)
        };
        if passed {
            return Ok((Raced::Deadline, self.renewal));
        }
        // Most actions are done at their first poll (a scripted or cached answer, a native
        // tool): unless the lease is due for renewal, they are polled once before any timer is
        // armed, since arming one wakes the runtime's driver (a system call an action).
        if now < self.renewal
            && let Poll::Ready(out) = poll_fn(|cx| Poll::Ready(work.as_mut().poll(cx))).await
        {
            return Ok((Raced::Done(out), self.renewal));
        }
        let deadline = async {
            match self.deadline {
                // A host that keeps the clock says when the deadline passes.
                _ if self.env.kill.keeps_clock() => self.env.kill.expired().await,
                Some(at) => self.deadline_timer.until(at).await,
                None => std::future::pending().await,
            }
        };
        tokio::pin!(deadline);
        // The lease is renewed by a branch of its own, polled alongside the work: renewing
        // inside a select handler would stop polling the work, and a store that serializes
        // its connection (PostgreSQL) would wait forever for the lock the paused work holds.
        let renewed = std::sync::Mutex::new(self.renewal);
        let next = || {
            *renewed
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
        };
        let renew = async {
            loop {
                self.renew_timer.until(next()).await;
                if let Err(e) = self.env.store.renew(&self.lease).await {
                    return RunError::from(e);
                }
                *renewed
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner) =
                    Instant::now() + renewal_interval(self.lease.duration);
            }
        };
        tokio::pin!(renew);
        let raced = tokio::select! {
            biased;
            () = self.env.kill.killed() => Raced::Cancel,
            () = &mut deadline => Raced::Deadline,
            failed = &mut renew => return Err(failed),
            out = &mut work => Raced::Done(out),
        };
        if !matches!(raced, Raced::Done(_)) {
            // The work is dropped, perhaps with an append sent and not yet answered.
            self.tally.unsure();
        }
        Ok((raced, next()))
    }

    fn interrupted<T>(&self, raced: Raced<T>) -> Result<T, EventAndDetail> {
        match raced {
            Raced::Done(out) => Ok(out),
            Raced::Cancel => Err((Event::Cancel, None)),
            Raced::Deadline => Err((self.tick(), None)),
        }
    }

    fn tick(&self) -> Event {
        let now_ms = u64::try_from(self.start.elapsed().as_millis()).unwrap_or(u64::MAX);
        Event::Tick { now_ms }
    }

    /// Feeds `event` to the machine, journals the event with the step it made and that step's
    /// commands (before any command is carried out), and reports the transition.
    async fn feed(
        &mut self,
        event: Event,
        detail: Option<String>,
        observer: &mut Option<Box<dyn Observer>>,
    ) -> Result<(), RunError> {
        let summary = observer
            .as_ref()
            .map(|_| summarize(&event, detail.as_deref()));
        let checkpoint = self.machine.stats().steps.saturating_add(1);
        let label = event.label();
        let results_may_rerun = matches!(event, Event::ToolResults(_))
            && self.batch.as_ref().is_some_and(|b| self.may_rerun(b));
        // The journal entry takes tool results and the machine borrows them (it keeps nothing
        // of a result), so they are not copied; any other event goes to the machine, which
        // keeps part of it, and the entry keeps a copy.
        let (entry, event) = match event {
            Event::ToolResults(results) => (Entry::ToolResults { results }, None),
            event => (Entry::from_event(&event), Some(event)),
        };
        let event_record = Record {
            key: Key::event(checkpoint),
            entry,
        };
        // What the model is told comes from the entry, as on replay.
        self.conversation
            .apply(&event_record.entry, self.batch.as_ref())?;
        let handled = match (event, &event_record.entry) {
            (Some(event), _) => self.machine.handle(event),
            (None, Entry::ToolResults { results }) => self.machine.handle_results(results),
            (None, entry) => {
                return Err(RunError::Internal(format!(
                    "no event for a {} entry",
                    entry.kind()
                )));
            }
        };
        match handled {
            Handled::Step(record) => {
                if let Some(observer) = observer.as_mut() {
                    // Before the entry moves into the journal's batch (no copy is made).
                    observer.on_event(&event_record.entry, &self.machine);
                }
                self.trace.push(record);
                self.commands
                    .extend(std::iter::from_fn(|| self.machine.poll_command()));
                // The event and what the step decided are written together, before any of it
                // is carried out: one transaction in a durable store, so a crash leaves the
                // step either wholly journaled or not at all (the machine is deterministic, so
                // writing the event after it was fed loses nothing).
                let mut records = std::mem::take(&mut self.carry);
                records.push(event_record);
                records.extend(self.decisions(&record));
                if self.only_stops() || (results_may_rerun && self.only_asks_the_model()) {
                    // The results of calls that may run again, and a step whose only effect is
                    // the next model call: journaled with the step the model's answer makes (one
                    // commit per agent step). A crash before then leaves the calls in doubt, and
                    // a resume runs them again, as it would any idempotent call in doubt. A step
                    // that stops the run is journaled with its report (one commit); a crash
                    // before then leaves the run going, to resume from the step before.
                    self.carry = records;
                } else {
                    self.put_all(records).await?;
                }
                spans::transition(&record);
                let budgeted = self.commands.iter().find_map(|c| match c {
                    Command::RunTools(batch) => Some(tool_budget_events(record.step, batch)),
                    _ => None,
                });
                let stats = self.machine.stats();
                let elapsed_ms =
                    u64::try_from(self.start.elapsed().as_millis()).unwrap_or(u64::MAX);
                if let Some(observer) = observer.as_mut() {
                    observer.on_transition(&Transition {
                        record,
                        stats,
                        summary: summary.as_deref().unwrap_or(""),
                        elapsed_ms,
                    });
                }
                for event in budgeted.unwrap_or_default() {
                    spans::tool_budget(&event);
                    meters::tool_budget(&event);
                    if let Some(observer) = observer.as_mut() {
                        observer.on_tool_budget(&event);
                    }
                    self.tool_budget.push(event);
                }
                if !record.to.is_terminal() {
                    let warned = self.warned.check(self.machine.policy(), &stats, elapsed_ms);
                    for warning in warned {
                        spans::budget_warning(&warning);
                        meters::budget_warning(&warning);
                        if let Some(observer) = observer.as_mut() {
                            observer.on_warning(&warning);
                        }
                        self.warnings.push(warning);
                    }
                }
                Ok(())
            }
            Handled::Observed => Ok(()),
            Handled::Ignored { why, phase } => Err(RunError::Internal(format!(
                "the kernel ignored {label} in {} ({why:?})",
                phase.as_str()
            ))),
        }
    }

    async fn finish(
        &mut self,
        stop: Stop,
        observer: &mut Option<Box<dyn Observer>>,
    ) -> Result<Report, RunError> {
        // The step that stopped the run (with what it carried), its report and the claim's
        // release are one commit on durable stores, when none of its keys is stored yet.
        let last: Vec<Arc<Record>> = std::mem::take(&mut self.carry)
            .into_iter()
            .map(Arc::new)
            .collect();
        let written = u64::try_from(last.len()).unwrap_or(u64::MAX);
        let entries = match self.tally.entries() {
            Some(n) => n,
            None => self.env.store.count(&self.env.execution).await?,
        };
        let mut report = Report::new(
            self.env.execution.clone(),
            stop,
            self.machine.todos().to_vec(),
            std::mem::take(&mut self.trace),
            entries.saturating_add(written),
            self.tally.duplicates(),
        );
        report.context = self.window.as_ref().map(ContextWindow::stats);
        report.warnings = std::mem::take(&mut self.warnings);
        report.context_prunes = std::mem::take(&mut self.prunes);
        report.tool_budget_events = std::mem::take(&mut self.tool_budget);
        report.tools_changed = std::mem::take(&mut self.tools_changed);
        report.set_output(self.machine.policy());
        report.set_scale(self.machine.policy());
        let store = &self.env.store;
        if last.is_empty() {
            store.finish_released(&self.lease, &report).await?;
        } else if store
            .finish_with_step(&self.lease, last.clone(), &report)
            .await?
        {
            self.tally.wrote(written);
        } else {
            // Some key was stored already (or the store writes them apart): appended as any
            // step is, which checks each, and the journal counted.
            self.put_shared(last).await?;
            report.entries = self.env.store.count(&self.env.execution).await?;
            report.duplicates_prevented = self.tally.duplicates();
            self.env.store.finish_released(&self.lease, &report).await?;
        }
        if let Some(observer) = observer.as_mut() {
            observer.on_stop(&report);
        }
        Ok(report)
    }
}
