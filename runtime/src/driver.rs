//! The driver: one loop that feeds an event to the machine, drains its commands, carries out the
//! one action among them (call the model, run tools, verify) while racing the kill switch, the
//! run's deadline and the lease renewal, and journals every event before the machine sees it.

use crate::config::{InDoubt, RuntimeConfig};
use crate::context::{ContextPolicy, ContextWindow, Tokenizer, state_notice};
use crate::error::RunError;
use crate::fault::Fault;
use crate::journal::{Lease, MemoryStore, RunSpec, Store};
use crate::kill::KillSwitch;
use crate::message::{Message, Transcript};
use crate::model::{Model, ModelError, ModelFailure, ModelRequest, Purpose};
use crate::observer::{Observer, Transition};
use crate::report::Report;
use crate::tool::{ToolSet, ToolSpec, render_outcome};
use crate::verifier::{RuleVerifier, Verification, Verifier};
use futures_util::StreamExt as _;
use std::fmt::Write as _;
use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;
use terminus_kernel::{
    BudgetWarning, CallState, Command, Entry, Event, Handled, Key, Machine, ModelCall,
    ModelErrorKind, ModelTurn, Policy, Record, Replay, StepRecord, Stop, ToolBatch, ToolErrorKind,
    ToolOutcome, ToolResult, Verdict, VerifyRequest, decision_records, executed,
};
use tokio::time::{Instant, sleep, sleep_until, timeout};

/// One agent run, configured builder style and started with [`Run::execute`].
///
/// ```
/// # use std::sync::Arc;
/// # use terminus_kernel::{ModelTurn, Policy};
/// # use terminus_runtime::{Model, ModelError, ModelRequest, Run};
/// struct Answer;
/// #[async_trait::async_trait]
/// impl Model for Answer {
///     async fn complete(&self, _: ModelRequest<'_>) -> Result<ModelTurn, ModelError> {
///         Ok(ModelTurn { text: "4".into(), ..ModelTurn::default() })
///     }
/// }
/// # tokio::runtime::Builder::new_current_thread().enable_time().build().unwrap().block_on(async {
/// let report = Run::new("What is 2 + 2?", Policy::default(), Arc::new(Answer))
///     .execute()
///     .await
///     .expect("an in-memory run has no storage errors");
/// assert_eq!(report.outcome.reason_str(), "answered");
/// assert_eq!(report.result.as_deref(), Some("4"));
/// # });
/// ```
pub struct Run {
    task: String,
    name: Option<String>,
    policy: Policy,
    model: Arc<dyn Model>,
    tools: ToolSet,
    verifier: Option<Arc<dyn Verifier>>,
    store: Arc<dyn Store>,
    config: RuntimeConfig,
    execution: Option<String>,
    kill: KillSwitch,
    observer: Option<Box<dyn Observer>>,
    host: Option<serde_json::Value>,
    resume: bool,
    context: Option<(ContextPolicy, Arc<dyn Tokenizer>)>,
}

impl std::fmt::Debug for Run {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Run")
            .field("task", &self.task)
            .field("name", &self.name)
            .field("execution", &self.execution)
            .field("tools", &self.tools)
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

impl Run {
    /// A run of `task` under `policy` with `model`, the built-in tools only, the rule verifier,
    /// an in-memory journal and [`RuntimeConfig::default`].
    pub fn new(task: impl Into<String>, policy: Policy, model: Arc<dyn Model>) -> Run {
        Run {
            task: task.into(),
            name: None,
            policy,
            model,
            tools: ToolSet::new(),
            verifier: None,
            store: Arc::new(MemoryStore::new()),
            config: RuntimeConfig::default(),
            execution: None,
            kill: KillSwitch::new(),
            observer: None,
            host: None,
            resume: false,
            context: None,
        }
    }

    /// Resumes `execution` from its journal (give the same store, tools and verifier as the
    /// run had): the task, the policy and the counters come from the journal, journaled model
    /// turns and tool results are replayed instead of being asked for again, and the run goes
    /// on from where it stopped. An execution that already ended runs nothing and returns its
    /// stored report. A claim held by another live worker is [`crate::StoreError::Claimed`].
    pub fn resume(execution: impl Into<String>, model: Arc<dyn Model>) -> Run {
        let mut run = Run::new(String::new(), Policy::default(), model);
        run.execution = Some(execution.into());
        run.resume = true;
        run
    }

    /// The run's kill switch (a clone: killing it stops this run).
    pub fn kill_handle(&self) -> KillSwitch {
        self.kill.clone()
    }

    /// Data the host needs to rebuild its adapters when the run is resumed, kept in the
    /// execution's [`RunSpec::host`] (the command line keeps the scenario there).
    #[must_use]
    pub fn host_data(mut self, host: serde_json::Value) -> Run {
        self.host = Some(host);
        self
    }

    /// Names the run (kept in the execution's [`RunSpec`]).
    #[must_use]
    pub fn name(mut self, name: impl Into<String>) -> Run {
        self.name = Some(name.into());
        self
    }

    /// The tools the model may call.
    #[must_use]
    pub fn tools(mut self, tools: ToolSet) -> Run {
        self.tools = tools;
        self
    }

    /// The verifier asked when the policy has `verify_completion` (default [`RuleVerifier`]).
    #[must_use]
    pub fn verifier(mut self, verifier: Arc<dyn Verifier>) -> Run {
        self.verifier = Some(verifier);
        self
    }

    /// Where the journal is written (default a fresh [`MemoryStore`]).
    #[must_use]
    pub fn store(mut self, store: Arc<dyn Store>) -> Run {
        self.store = store;
        self
    }

    /// Timeouts, concurrency, system prompt, worker and lease.
    #[must_use]
    pub fn config(mut self, config: RuntimeConfig) -> Run {
        self.config = config;
        self
    }

    /// The execution id (default `run-<pid>-<n>`).
    #[must_use]
    pub fn execution(mut self, id: impl Into<String>) -> Run {
        self.execution = Some(id.into());
        self
    }

    /// The kill switch; keep a clone to stop the run.
    #[must_use]
    pub fn kill_switch(mut self, kill: KillSwitch) -> Run {
        self.kill = kill;
        self
    }

    /// Keeps the model's view of the conversation inside a context window: tokens counted with
    /// `tokenizer` (a turn's reported usage preferred), long tool results cut, the view pruned
    /// by `policy` (see [`crate::context`]). The conversation, the journal and the verifier's
    /// transcript keep everything. A view that cannot fit ends the run with
    /// `context_exhausted`. Without it the model is sent the whole conversation.
    #[must_use]
    pub fn context(mut self, policy: ContextPolicy, tokenizer: Arc<dyn Tokenizer>) -> Run {
        self.context = Some((policy, tokenizer));
        self
    }

    /// Receives one record per transition.
    #[must_use]
    pub fn observer(mut self, observer: impl Observer + 'static) -> Run {
        self.observer = Some(Box::new(observer));
        self
    }

    /// Runs to a stop and returns the report. Claims the execution first (a held claim is
    /// [`crate::StoreError::Claimed`]), creates it in the store with its [`RunSpec`] (an
    /// execution that already exists is [`RunError::ExecutionExists`]: resuming is not `run`),
    /// stores the report at the end and releases the claim.
    pub async fn execute(self) -> Result<Report, RunError> {
        static RUNS: AtomicU64 = AtomicU64::new(0);
        let Run {
            task,
            name,
            policy,
            model,
            tools,
            verifier,
            store,
            config,
            execution,
            kill,
            mut observer,
            host,
            resume,
            context,
        } = self;
        if let Some((policy, _)) = &context {
            policy.validate().map_err(RunError::Context)?;
        }
        let execution = execution.unwrap_or_else(|| {
            let n = RUNS.fetch_add(1, Ordering::Relaxed);
            format!("run-{}-{n}", std::process::id())
        });
        let env = Env {
            task,
            model,
            tools,
            specs: Vec::new(),
            verifier,
            store,
            config,
            execution,
            kill,
            context,
        };
        if resume {
            return resume_execution(env, &mut observer).await;
        }
        let machine = Machine::new(policy).map_err(RunError::Policy)?;
        let spec = RunSpec {
            task: env.task.clone(),
            name,
            system: env.config.system_prompt.clone(),
            policy: machine.policy().clone(),
            host,
            started_unix_ms: Some(unix_ms()),
        };
        // Create, then claim: a second `run` of the same id finds it created and stops at once.
        if !env.store.create(&env.execution, &spec).await? {
            return Err(RunError::ExecutionExists(env.execution));
        }
        let lease = env
            .store
            .claim(&env.execution, &env.config.worker, env.config.lease)
            .await?;
        let mut conversation = Vec::with_capacity(64);
        if let Some(system) = &env.config.system_prompt {
            conversation.push(Message::system(system.clone()));
        }
        conversation.push(Message::user(env.task.clone()));
        let mut driver = Driver::new(env, machine, lease, conversation, Instant::now());
        let result = driver.drive(&mut observer).await;
        // The lease expires by itself if releasing fails; the run's own result matters more.
        let _ = driver.env.store.release(&driver.lease).await;
        result
    }
}

/// How many records a resume reads from the store at a time.
const RESUME_PAGE: usize = 512;

/// The resume path of [`Run::execute`]: claim, replay the journal page by page into a fresh
/// machine and conversation, and drive on from there.
async fn resume_execution(
    mut env: Env,
    observer: &mut Option<Box<dyn Observer>>,
) -> Result<Report, RunError> {
    let lease = env
        .store
        .claim(&env.execution, &env.config.worker, env.config.lease)
        .await?;
    let resumed = replay_journal(&mut env).await;
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
    let _ = driver.env.store.release(&driver.lease).await;
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
    conversation: Vec<Message>,
    trace: Vec<StepRecord>,
    model_answers: u64,
    started: Instant,
}

impl ResumedParts {
    fn into_driver(self, env: Env, lease: Lease) -> Driver {
        let mut driver = Driver::new(env, self.machine, lease, self.conversation, self.started);
        driver.commands = self.outstanding;
        driver.trace = self.trace;
        driver.model_calls = u32::try_from(self.model_answers).unwrap_or(u32::MAX);
        driver.resumed_calls = Some(self.calls);
        driver
    }
}

/// Reads the journal of `env.execution` in pages and replays it.
async fn replay_journal(env: &mut Env) -> Result<Resumed, RunError> {
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
    if env.config.system_prompt.is_none() {
        env.config.system_prompt.clone_from(&spec.system);
    }
    let mut page = store.page(&execution, None, RESUME_PAGE).await?;
    let Some(first) = page.first() else {
        // Created and never started (submitted for a worker): start it from the beginning.
        let mut machine = Machine::new(spec.policy.clone()).map_err(RunError::Policy)?;
        let outstanding = std::iter::from_fn(|| machine.poll_command()).collect();
        let mut conversation = Vec::with_capacity(64);
        if let Some(system) = &env.config.system_prompt {
            conversation.push(Message::system(system.clone()));
        }
        conversation.push(Message::user(spec.task.clone()));
        return Ok(Resumed::Driver(Box::new(ResumedParts {
            machine,
            outstanding,
            calls: Vec::new(),
            conversation,
            trace: Vec::new(),
            model_answers: 0,
            started: Instant::now(),
        })));
    };
    let mut replay = Replay::start(spec.policy.clone(), Record::clone(first))
        .map_err(|e| RunError::Replay(e.to_string()))?;
    let mut conversation = Vec::with_capacity(64);
    if let Some(system) = &env.config.system_prompt {
        conversation.push(Message::system(system.clone()));
    }
    conversation.push(Message::user(spec.task.clone()));
    let mut trace = Vec::new();
    let mut skip = 1;
    loop {
        let last = page.last().map(|r| r.key);
        for record in page.iter().skip(skip) {
            match &record.entry {
                Entry::Assistant(turn)
                    if !turn.text.trim().is_empty() || !turn.tool_calls.is_empty() =>
                {
                    conversation.push(Message::assistant(
                        turn.text.clone(),
                        turn.tool_calls.clone(),
                    ));
                }
                Entry::ToolResults { results } => {
                    // The batch these results answer is the one the last replayed step issued.
                    if let Some(batch) = replay.outstanding().iter().find_map(|c| match c {
                        Command::RunTools(b) => Some(b),
                        _ => None,
                    }) {
                        push_tool_messages(&mut conversation, batch, results.iter().cloned())?;
                    }
                }
                Entry::Nudge(nudge) => conversation.push(Message::kernel(nudge.text.clone())),
                Entry::Notice(notice) => conversation.push(Message::kernel(notice.text())),
                Entry::Transition(step) => trace.push(*step),
                _ => {}
            }
            replay
                .push(Record::clone(record))
                .map_err(|e| RunError::Replay(e.to_string()))?;
        }
        skip = 0;
        if page.len() < RESUME_PAGE {
            break;
        }
        page = store.page(&execution, last, RESUME_PAGE).await?;
        if page.is_empty() {
            break;
        }
    }
    let recovery = replay.finish();
    env.model.resumed(recovery.model_answers);
    for (tool, answered) in &recovery.tool_answers {
        if let Some(t) = env.tools.get(tool) {
            t.resumed(*answered);
        }
    }
    // The run's clock goes on from its first start, so a deadline spans the interruption.
    let elapsed = spec
        .started_unix_ms
        .map_or(0, |at| unix_ms().saturating_sub(at));
    let now = Instant::now();
    let started = now
        .checked_sub(Duration::from_millis(elapsed))
        .unwrap_or(now);
    Ok(Resumed::Driver(Box::new(ResumedParts {
        machine: recovery.machine,
        outstanding: recovery.outstanding,
        calls: recovery.calls,
        conversation,
        trace,
        model_answers: recovery.model_answers,
        started,
    })))
}

/// Wall-clock milliseconds since the Unix epoch (a run's start, compared across processes).
fn unix_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// Appends the messages a tool batch produces, in call order: a refusal for each refused call,
/// and each executed call's result (with its budget warning) from `results`, which are in the
/// order of the executed calls. The live run and a resumed run build the same conversation.
fn push_tool_messages(
    conversation: &mut Vec<Message>,
    batch: &ToolBatch,
    results: impl IntoIterator<Item = ToolResult>,
) -> Result<(), RunError> {
    let mut results = results.into_iter();
    for (i, call) in batch.calls.iter().enumerate() {
        if let Some(exclusion) = batch.refusal(i) {
            // Refused calls are not executed and not sent back to the kernel, but the model
            // gets an answer for each (chat APIs require one per call).
            let text = format!(
                "Not run: the tool `{}` is excluded because {exclusion}.",
                call.name
            );
            conversation.push(Message::tool_refusal(
                call.id.clone(),
                call.name.clone(),
                text,
            ));
            continue;
        }
        let Some(result) = results.next() else {
            return Err(RunError::Internal("a tool call has no outcome".into()));
        };
        let warning = batch
            .warnings
            .iter()
            .find(|(k, _)| *k == i)
            .map(|(_, w)| budget_warning_text(&call.name, *w));
        conversation.push(Message::tool_result(
            result.call_id,
            result.name,
            render_outcome(&result.outcome),
            warning.as_deref(),
        ));
    }
    Ok(())
}

fn renewal_interval(lease: Duration) -> Duration {
    (lease / 3).max(Duration::from_millis(1))
}

/// What stays fixed during a run (shared by reference while an action is awaited).
struct Env {
    task: String,
    model: Arc<dyn Model>,
    tools: ToolSet,
    specs: Vec<ToolSpec>,
    verifier: Option<Arc<dyn Verifier>>,
    store: Arc<dyn Store>,
    config: RuntimeConfig,
    execution: String,
    kill: KillSwitch,
    context: Option<(ContextPolicy, Arc<dyn Tokenizer>)>,
}

struct Driver {
    env: Env,
    machine: Machine,
    conversation: Vec<Message>,
    /// The commands of the last step, journaled and not yet carried out (a reused buffer).
    commands: Vec<Command>,
    trace: Vec<StepRecord>,
    /// Appends that found their key stored with the same content (atomic: concurrent tool
    /// calls journal their results while the driver is borrowed).
    duplicates: AtomicU64,
    model_calls: u32,
    start: Instant,
    deadline: Option<Instant>,
    lease: Lease,
    renewal: Instant,
    /// On resume, the journal's state of each executed call of the pending tool batch: done
    /// calls are not run again, in-doubt calls only if their tool is idempotent.
    resumed_calls: Option<Vec<CallState>>,
    /// Tool results to journal with the next step (in the same append).
    carry: std::sync::Mutex<Vec<Record>>,
    /// The model's view of the conversation, when the run has a context policy.
    window: Option<ContextWindow>,
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
        conversation: Vec<Message>,
        start: Instant,
    ) -> Driver {
        env.specs = env.tools.specs();
        let window = env.context.take().map(|(policy, tokenizer)| {
            // Until a turn reports usage, the tokens outside the messages are the tool
            // definitions and the reply's priming.
            let tools = serde_json::to_string(&env.specs).unwrap_or_default();
            let fixed = tokenizer.count(&tools).saturating_add(3);
            ContextWindow::new(policy, tokenizer, fixed)
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
            commands: Vec::with_capacity(4),
            trace: Vec::with_capacity(32),
            duplicates: AtomicU64::new(0),
            model_calls: 0,
            start,
            resumed_calls: None,
            carry: std::sync::Mutex::new(Vec::new()),
        }
    }

    /// Goes on from a replayed journal: first re-journals the last replayed step (an
    /// interrupted run may have written its event and not all of its decisions; stored keys
    /// come back as prevented duplicates), then loops as [`Driver::drive`] does.
    async fn resume(
        &mut self,
        observer: &mut Option<Box<dyn Observer>>,
    ) -> Result<Report, RunError> {
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
        self.put(Record {
            key: Key::event(0),
            entry: Entry::User {
                task: self.env.task.clone(),
            },
        })
        .await?;
        // The machine's first command (the first model call) comes from no step.
        self.commands
            .extend(std::iter::from_fn(|| self.machine.poll_command()));
        self.run_loop(observer).await
    }

    async fn run_loop(
        &mut self,
        observer: &mut Option<Box<dyn Observer>>,
    ) -> Result<Report, RunError> {
        loop {
            let (event, detail) = match self.drain()? {
                Action::Stop(stop) => return self.finish(stop, observer).await,
                Action::Model(call) => self.model_step(call).await?,
                Action::Tools(batch) => self.tools_step(batch).await?,
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
                    self.conversation.push(Message::kernel(notice.text()));
                    continue;
                }
                Command::Nudge(nudge) => {
                    self.conversation.push(Message::kernel(nudge.text));
                    continue;
                }
                Command::CallModel(call) => Action::Model(call),
                Command::RunTools(batch) => Action::Tools(batch),
                Command::Verify(request) => Action::Verify(request),
                Command::Stop(stop) => Action::Stop(stop),
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
        let deadline = async {
            match self.deadline {
                Some(at) => sleep_until(at).await,
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
                sleep_until(next()).await;
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

    // ----- model -----

    async fn model_step(&mut self, call: ModelCall) -> Result<EventAndDetail, RunError> {
        self.model_calls = self.model_calls.saturating_add(1);
        let number = self.model_calls;
        if let Some(window) = &mut self.window {
            let machine = &self.machine;
            if let Err(e) = window.prepare(&self.conversation, || state_notice(machine)) {
                // Not sent: the provider would refuse it. The kernel stops the run with
                // `context_exhausted`, as for the provider's own overflow error.
                return Ok((
                    Event::ModelError {
                        kind: ModelErrorKind::ContextOverflow,
                        retry_after_ms: None,
                    },
                    Some(format!(
                        "not sent: the smallest view the pruning rules allow needs {} tokens, \
                         the window allows {} (window {} - reserve {})",
                        e.needed,
                        e.limit,
                        window.policy().window,
                        window.policy().reserve
                    )),
                ));
            }
        }
        let (raced, renewal) = self.race(self.call_model(call, number)).await?;
        self.renewal = renewal;
        let out = match self.interrupted(raced) {
            Ok(out) => out?,
            Err(event) => return Ok(event),
        };
        match out {
            Ok(mut turn) => {
                if let Some(window) = &mut self.window {
                    window.observe(turn.usage);
                }
                for (i, call) in turn.tool_calls.iter_mut().enumerate() {
                    if call.id.is_empty() {
                        call.id = format!("call-{number}-{i}");
                    }
                }
                if !turn.text.trim().is_empty() || !turn.tool_calls.is_empty() {
                    self.conversation.push(Message::assistant(
                        turn.text.clone(),
                        turn.tool_calls.clone(),
                    ));
                }
                Ok((Event::ModelTurn(turn), None))
            }
            Err(failure) => Ok((
                Event::ModelError {
                    kind: failure.kind,
                    retry_after_ms: failure.retry_after_ms,
                },
                Some(failure.message),
            )),
        }
    }

    async fn call_model(
        &self,
        call: ModelCall,
        number: u32,
    ) -> Result<Result<ModelTurn, ModelFailure>, Fault> {
        if call.delay_ms > 0 {
            // Backoff before a retry: a real sleep, so the deadline and the kill switch apply.
            sleep(Duration::from_millis(call.delay_ms)).await;
        }
        let messages = match &self.window {
            Some(window) => window.messages(&self.conversation),
            None => &self.conversation,
        };
        let request = ModelRequest {
            messages,
            tools: &self.env.specs,
            tools_enabled: call.tools,
            purpose: Purpose::Turn {
                reason: call.reason,
                call: number,
            },
        };
        let answer = self.env.model.complete(request);
        let answer = match self.env.config.model_timeout {
            None => answer.await,
            Some(limit) => timeout(limit, answer).await.unwrap_or_else(|_| {
                Err(ModelError::Failure(ModelFailure::new(
                    ModelErrorKind::Timeout,
                    format!("no answer within {} ms", limit.as_millis()),
                )))
            }),
        };
        match answer {
            Ok(turn) => Ok(Ok(turn)),
            Err(ModelError::Failure(failure)) => Ok(Err(failure)),
            Err(ModelError::Fault(fault)) => Err(fault),
        }
    }

    // ----- tools -----

    async fn tools_step(&mut self, batch: ToolBatch) -> Result<EventAndDetail, RunError> {
        // The intents were journaled with the step that issued the batch (write-ahead); the
        // results go to the same checkpoint, one slot per executed call.
        let checkpoint = self.machine.stats().steps;
        let calls = u32::try_from(executed(&batch).count()).unwrap_or(u32::MAX);
        let resumed = self.resumed_calls.take();
        if let Some(states) = &resumed
            && self.env.config.in_doubt == InDoubt::Stop
            && let Some((call, _)) = executed(&batch)
                .zip(states)
                .find(|(_, s)| matches!(s, CallState::InDoubt { idempotent: false }))
        {
            return Err(RunError::InDoubt {
                call: call.id.clone(),
                tool: call.name.clone(),
            });
        }
        let (raced, renewal) = self
            .race(self.run_tools(&batch, checkpoint, calls, resumed))
            .await?;
        self.renewal = renewal;
        let outcomes = match self.interrupted(raced) {
            Ok(out) => out?,
            Err(event) => return Ok(event),
        };
        let mut outcomes = outcomes.into_iter();
        let mut results = Vec::with_capacity(batch.calls.len());
        for call in executed(&batch) {
            let Some((_, outcome)) = outcomes.next() else {
                return Err(RunError::Internal("a tool call has no outcome".into()));
            };
            results.push(ToolResult {
                call_id: call.id.clone(),
                name: call.name.clone(),
                outcome,
            });
        }
        push_tool_messages(&mut self.conversation, &batch, results.iter().cloned())?;
        Ok((Event::ToolResults(results), None))
    }

    /// Runs the executed calls of `batch`, at most `max_concurrent_tools` at a time, journals
    /// each result as it arrives (executed call `j` of `calls` under
    /// `Key::result(checkpoint, calls, j)`, so a crash loses no finished call), and returns the
    /// outcomes in batch order (so the event does not depend on timing).
    async fn run_tools(
        &self,
        batch: &ToolBatch,
        checkpoint: u32,
        calls_in_batch: u32,
        resumed: Option<Vec<CallState>>,
    ) -> Result<Vec<(usize, ToolOutcome)>, RunError> {
        let limit = self.env.config.max_concurrent_tools.max(1);
        let mut resumed = resumed.unwrap_or_default().into_iter();
        // A batch of one call: its result is journaled in the same transaction as the step it
        // feeds (see `carry`), which is as soon as the result is known, one commit fewer.
        let defer = calls_in_batch == 1;
        let tool_timeout = self.env.config.tool_timeout;
        // Each tool's `call` is invoked here, in batch order, before anything runs: an adapter
        // that takes the next scripted result when called stays deterministic.
        let calls: Vec<_> = batch
            .calls
            .iter()
            .enumerate()
            .filter(|(i, _)| batch.refusal(*i).is_none())
            .enumerate()
            .map(|(j, (i, call))| {
                let state = resumed.next().unwrap_or(CallState::NotStarted);
                let known = match state {
                    CallState::Done(result) => Some(result.outcome),
                    CallState::InDoubt { idempotent: false } => Some(in_doubt_outcome(&call.name)),
                    CallState::NotStarted | CallState::InDoubt { idempotent: true } => None,
                };
                // Arguments must be a JSON object (every provider's tool calls and every tool
                // schema say so); anything else, such as the text of arguments a model sent as
                // broken JSON, is answered `invalid_arguments` without calling the tool.
                let malformed = known.is_none() && !call.arguments.is_object();
                let started = match known {
                    Some(_) => None,
                    None if malformed => None,
                    None => self
                        .env
                        .tools
                        .get(&call.name)
                        .map(|tool| tool.call(call.arguments.clone())),
                };
                let name = call.name.as_str();
                let key = Key::result(
                    checkpoint,
                    calls_in_batch,
                    u32::try_from(j).unwrap_or(u32::MAX),
                );
                async move {
                    if let Some(outcome) = known {
                        // Journaled already (done), or answered as in doubt: never run again.
                        let result = ToolResult {
                            call_id: call.id.clone(),
                            name: call.name.clone(),
                            outcome: outcome.clone(),
                        };
                        self.put_result(key, result, defer).await?;
                        return Ok::<_, RunError>((i, outcome));
                    }
                    let outcome = match started {
                        None if malformed => Ok(ToolOutcome::Error {
                            kind: ToolErrorKind::InvalidArguments,
                            message: invalid_arguments_message(&call.arguments),
                        }),
                        None => Ok(ToolOutcome::Error {
                            kind: ToolErrorKind::NotFound,
                            message: format!("there is no tool named `{name}`"),
                        }),
                        Some(running) => match tool_timeout {
                            None => running.await,
                            Some(limit) => timeout(limit, running).await.unwrap_or_else(|_| {
                                Ok(ToolOutcome::Error {
                                    kind: ToolErrorKind::Timeout,
                                    message: format!("no result within {} ms", limit.as_millis()),
                                })
                            }),
                        },
                    };
                    let outcome = outcome?;
                    let result = ToolResult {
                        call_id: call.id.clone(),
                        name: call.name.clone(),
                        outcome: outcome.clone(),
                    };
                    self.put_result(key, result, defer).await?;
                    Ok::<_, RunError>((i, outcome))
                }
            })
            .collect();
        if calls.len() == 1 {
            // The common case: no stream machinery.
            let mut out = Vec::with_capacity(1);
            for call in calls {
                out.push(call.await?);
            }
            return Ok(out);
        }
        let mut out: Vec<(usize, ToolOutcome)> = Vec::with_capacity(calls.len());
        let mut running = futures_util::stream::iter(calls).buffer_unordered(limit);
        while let Some(result) = running.next().await {
            out.push(result?);
        }
        out.sort_unstable_by_key(|(i, _)| *i);
        Ok(out)
    }

    // ----- verification -----

    async fn verify_step(&mut self, request: VerifyRequest) -> Result<EventAndDetail, RunError> {
        let (raced, renewal) = self.race(self.verify(&request)).await?;
        self.renewal = renewal;
        match self.interrupted(raced) {
            Ok(verdict) => Ok((Event::Verdict(verdict?), None)),
            Err(event) => Ok(event),
        }
    }

    async fn verify(&self, request: &VerifyRequest) -> Result<Verdict, Fault> {
        let verification = Verification {
            task: &self.env.task,
            claim: &request.claim,
            todos: &request.todos,
            ledger: self.machine.ledger(),
            completion_requires: &self.machine.policy().completion_requires,
            transcript: Transcript::new(&self.conversation),
        };
        let verifier: &dyn Verifier = match &self.env.verifier {
            Some(v) => v.as_ref(),
            None => &RuleVerifier,
        };
        let verdict = verifier.verify(verification);
        match self.env.config.verifier_timeout {
            None => verdict.await,
            Some(limit) => timeout(limit, verdict).await.unwrap_or_else(|_| {
                Err(Fault::internal(format!(
                    "the verifier gave no verdict within {} ms",
                    limit.as_millis()
                )))
            }),
        }
    }

    // ----- journal and machine -----

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
        let event_record = Record {
            key: Key::event(checkpoint),
            entry: Entry::from_event(&event),
        };
        let label = event.label();
        match self.machine.handle(event) {
            Handled::Step(record) => {
                self.trace.push(record);
                self.commands
                    .extend(std::iter::from_fn(|| self.machine.poll_command()));
                // The event and what the step decided are written together, before any of it
                // is carried out: one transaction in a durable store, so a crash leaves the
                // step either wholly journaled or not at all (the machine is deterministic, so
                // writing the event after it was fed loses nothing).
                let mut records = std::mem::take(
                    &mut *self
                        .carry
                        .lock()
                        .unwrap_or_else(std::sync::PoisonError::into_inner),
                );
                records.push(event_record);
                records.extend(self.decisions(&record));
                self.put_all(records).await?;
                if let Some(observer) = observer.as_mut() {
                    observer.on_transition(&Transition {
                        record,
                        stats: self.machine.stats(),
                        summary: summary.as_deref().unwrap_or(""),
                        elapsed_ms: u64::try_from(self.start.elapsed().as_millis())
                            .unwrap_or(u64::MAX),
                    });
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

    /// Journals what step `step` decided, before any of it is carried out: the transition, the
    /// guidance it emitted, its stop record, and an intent per executed tool call (the layout of
    /// `terminus_kernel::step_records`).
    async fn journal_step(&self, step: &StepRecord) -> Result<(), RunError> {
        self.put_all(self.decisions(step)).await
    }

    fn decisions(&self, step: &StepRecord) -> Vec<Record> {
        decision_records(step, &self.commands, |name| {
            self.env.tools.get(name).is_none_or(|t| t.idempotent())
        })
    }

    /// Appends `record`. A key already stored with the same content is a prevented duplicate;
    /// with other content, the journal is another run's.
    async fn put(&self, record: Record) -> Result<(), RunError> {
        let record = Arc::new(record);
        let appended = self
            .env
            .store
            .append(&self.env.execution, Arc::clone(&record))
            .await?;
        self.check_appended(&record, &appended)
    }

    /// Journals a tool result now, or (`defer`) with the step it feeds.
    async fn put_result(&self, key: Key, result: ToolResult, defer: bool) -> Result<(), RunError> {
        let record = Record {
            key,
            entry: Entry::ToolResult(result),
        };
        if defer {
            self.carry
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .push(record);
            return Ok(());
        }
        self.put(record).await
    }

    /// Appends the records of one step together (one transaction in durable stores).
    async fn put_all(&self, records: Vec<Record>) -> Result<(), RunError> {
        let records: Vec<Arc<Record>> = records.into_iter().map(Arc::new).collect();
        let appended = self
            .env
            .store
            .append_all(&self.env.execution, records.clone())
            .await?;
        if appended.len() != records.len() {
            return Err(RunError::Internal(
                "the store answered a different number of appends".into(),
            ));
        }
        for (record, appended) in records.iter().zip(&appended) {
            self.check_appended(record, appended)?;
        }
        Ok(())
    }

    fn check_appended(
        &self,
        record: &Record,
        appended: &crate::journal::Appended,
    ) -> Result<(), RunError> {
        if appended.already_existed {
            if *appended.record != *record {
                return Err(RunError::Diverged(record.key));
            }
            self.duplicates.fetch_add(1, Ordering::Relaxed);
        }
        Ok(())
    }

    async fn finish(
        &mut self,
        stop: Stop,
        observer: &mut Option<Box<dyn Observer>>,
    ) -> Result<Report, RunError> {
        // The stop record was journaled with the last step.
        let entries = self.env.store.count(&self.env.execution).await?;
        let mut report = Report::new(
            self.env.execution.clone(),
            stop,
            self.machine.todos().to_vec(),
            std::mem::take(&mut self.trace),
            entries,
            self.duplicates.load(Ordering::Relaxed),
        );
        report.context = self.window.as_ref().map(ContextWindow::stats);
        self.env.store.finish(&self.env.execution, &report).await?;
        if let Some(observer) = observer.as_mut() {
            observer.on_stop(&report);
        }
        Ok(report)
    }
}

/// The answer to a call of a non-idempotent tool that was started before the run stopped and has
/// no journaled result: it is not run again, and the model is told why.
fn in_doubt_outcome(tool: &str) -> ToolOutcome {
    ToolOutcome::Error {
        kind: ToolErrorKind::Failed,
        message: format!(
            "in doubt: the run stopped while this call of `{tool}` was running, and `{tool}` is \
             not idempotent, so it was not run again. Its effect may or may not have happened: \
             check before calling it again."
        ),
    }
}

/// The warning appended to a tool result when its tool's budget is nearly spent.
fn budget_warning_text(tool: &str, w: BudgetWarning) -> String {
    match w.block_at {
        Some(_) if w.last => format!(
            "[budget] This was call {} of `{tool}`, the last one allowed: further calls will be refused.",
            w.call
        ),
        Some(block_at) => format!(
            "[budget] This was call {} of `{tool}`; from call {block_at} on, calls will be refused.",
            w.call
        ),
        None => format!(
            "[budget] This was call {} of `{tool}`; use it sparingly.",
            w.call
        ),
    }
}

/// A few words on an event, for progress lines.
fn summarize(event: &Event, detail: Option<&str>) -> String {
    let mut s = String::new();
    match event {
        Event::ModelTurn(turn) if !turn.tool_calls.is_empty() => {
            s.push_str("calls ");
            for (i, call) in turn.tool_calls.iter().enumerate() {
                if i > 0 {
                    s.push_str(", ");
                }
                s.push_str(&call.name);
            }
        }
        Event::ModelTurn(turn) => {
            let text = turn.text.trim();
            if text.is_empty() {
                s.push_str("no content");
            } else {
                let preview: String = text.chars().take(60).collect();
                let _ = write!(s, "{preview:?}");
                if preview.len() < text.len() {
                    s.push('…');
                }
            }
            match turn.needs_more_work {
                Some(true) => s.push_str(" needs_more_work: true"),
                Some(false) => s.push_str(" needs_more_work: false"),
                None => {}
            }
        }
        Event::ModelError { kind, .. } => {
            s.push_str(kind.as_str());
            if let Some(detail) = detail {
                s.push_str(": ");
                s.push_str(detail);
            }
        }
        Event::ToolResults(results) => {
            for (i, r) in results.iter().enumerate() {
                if i > 0 {
                    s.push_str(", ");
                }
                s.push_str(&r.name);
                match &r.outcome {
                    ToolOutcome::Ok(_) => s.push_str(" ok"),
                    ToolOutcome::Error { kind, .. } => {
                        s.push(' ');
                        s.push_str(kind.as_str());
                    }
                }
            }
        }
        Event::Verdict(v) => {
            if v.complete {
                s.push_str("verdict: complete");
            } else {
                s.push_str("verdict: incomplete");
                if !v.missing.is_empty() {
                    s.push_str(" (missing: ");
                    s.push_str(&v.missing.join("; "));
                    s.push(')');
                }
            }
        }
        Event::Tick { now_ms } => {
            let _ = write!(s, "clock at {now_ms} ms");
        }
        Event::Cancel => s.push_str("kill switch"),
        other => s.push_str(other.label()),
    }
    s
}

/// What the model is told when its arguments are not a JSON object.
fn invalid_arguments_message(arguments: &serde_json::Value) -> String {
    let text = match arguments {
        serde_json::Value::String(raw) => raw.clone(),
        other => other.to_string(),
    };
    let mut shown: String = text.chars().take(200).collect();
    if shown.len() < text.len() {
        shown.push('…');
    }
    format!("the arguments must be a JSON object; the call was not run. Got: {shown}")
}
