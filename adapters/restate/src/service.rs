//! The `TerminusAgent` virtual object: one object per execution id, whose exclusive `run`
//! handler drives the kernel through the runtime, and whose shared `report` and `cancel`
//! handlers read the stored report and pull the kill switch.

use crate::bridge::{
    Abandon, Begin, Bridge, Controls, Effect, JobStart, OnReplay, Replay, Start, Stored, StoredJob,
    Ticket, attempt_id, unix_ms,
};
use crate::decisions::{self, Verb};
use crate::journaled::wrap;
use async_trait::async_trait;
use restate_sdk::prelude::*;
use serde_json::Value;
use std::collections::{HashMap, VecDeque};
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, UNIX_EPOCH};
use terminus_runtime::{
    Adapters, ContextPolicy, KillSwitch, MemoryStore, Model, Resume, Run, RunError, RuntimeConfig,
    Tokenizer, ToolSet, Verifier,
};
use tokio::sync::{mpsc, oneshot};
use tokio_util::sync::CancellationToken;

/// The object's state key of the report of a run that stopped.
const REPORT: &str = "report";
/// The object's state key of the explanation of a run that stopped: `terminus inspect`'s text,
/// from the run's own journal.
const EXPLANATION: &str = "explanation";

/// Builds the run a `run` request asks for. The command line's blueprint reads
/// `{"scenario": {...}}` (a scenario file's JSON) and `{"agent": {...}, "task": "..."}` (a live
/// agent's config as JSON); a host embedding Terminus gives its own.
#[async_trait]
pub trait Blueprint: Send + Sync + 'static {
    /// The run `request` asks for. A request that cannot be run is [`Unbuildable::Invalid`]
    /// (answered 400, never retried); one that may build later (an MCP server that did not
    /// start) is [`Unbuildable::Unavailable`] (Restate retries it).
    async fn build(&self, request: &Value) -> Result<Built, Unbuildable>;
}

/// A run a [`Blueprint`] built.
pub struct Built {
    /// The run: task, policy, name, model, tools, verifier, settings and context window. The
    /// service sets the execution id (the object's key), the start, the kill switch and the
    /// observer, and wraps the adapters so that every call is a journaled step.
    pub run: Run,
    /// Called once when a replay is over, with the model answers it gave back (scripted models
    /// move past them; see `Run::resume`'s `on_replay`).
    pub on_replay: Option<OnReplay>,
    /// Awaited once the run has stopped (a live agent shuts its MCP servers down).
    pub finish: Option<Pin<Box<dyn Future<Output = ()> + Send>>>,
    /// The host gives up this long after the run starts (a scenario's `cancel_after_ms`), as
    /// if `cancel` were called then.
    pub cancel_after: Option<Duration>,
    /// A kill switch the blueprint's own adapters pull (a scenario's `cancelled` turn: the host
    /// cancelled during that model call): the run is cancelled when it fires, as if `cancel`
    /// were called then.
    pub pulled: Option<terminus_runtime::KillSwitch>,
}

impl Built {
    /// A run with nothing to do on replay or at the end.
    pub fn new(run: Run) -> Built {
        Built {
            run,
            on_replay: None,
            finish: None,
            cancel_after: None,
            pulled: None,
        }
    }
}

/// Why a request builds no run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Unbuildable {
    /// The request is wrong: the message names the field.
    Invalid(String),
    /// Something the run needs is not there now.
    Unavailable(String),
}

/// The virtual object `TerminusAgent`, keyed by execution id.
pub struct TerminusAgent {
    blueprint: Arc<dyn Blueprint>,
    /// The cancel tokens of the runs under way in this process, by execution.
    running: Arc<Mutex<HashMap<String, CancellationToken>>>,
}

impl TerminusAgent {
    /// The object, building its runs with `blueprint`.
    pub fn new(blueprint: Arc<dyn Blueprint>) -> TerminusAgent {
        TerminusAgent {
            blueprint,
            running: Arc::default(),
        }
    }

    fn running(&self) -> std::sync::MutexGuard<'_, HashMap<String, CancellationToken>> {
        self.running.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

#[restate_sdk::object]
impl TerminusAgent {
    /// Runs the execution to a stop and answers its report; an execution that stopped already
    /// answers its stored report and runs nothing.
    #[handler]
    async fn run(
        &self,
        ctx: ObjectContext<'_>,
        request: Json<Value>,
    ) -> HandlerResult<Json<Value>> {
        if let Some(report) = ctx.get::<Json<Value>>(REPORT).await? {
            return Ok(report);
        }
        let execution = ctx.key().to_owned();
        let Json(request) = request;
        let built = match self.blueprint.build(&request).await {
            Ok(built) => built,
            Err(Unbuildable::Invalid(message)) => {
                return Err(TerminalError::new_with_code(400, message).into());
            }
            Err(Unbuildable::Unavailable(message)) => {
                return Err(HandlerError::from(message));
            }
        };
        // The run's first start, journaled: its deadline spans restarts.
        let started: u64 = ctx.run(|| async { Ok(unix_ms()) }).name("start").await?;
        let deadline = built
            .run
            .policy()
            .deadline_ms
            .map(|ms| UNIX_EPOCH + Duration::from_millis(started.saturating_add(ms)));
        let controls = Controls {
            cancel: CancellationToken::new(),
            deadline,
        };
        if let Some(pulled) = built.pulled.clone() {
            let cancel = controls.cancel.clone();
            tokio::spawn(async move {
                pulled.killed().await;
                cancel.cancel();
            });
        }
        if let Some(after) = built.cancel_after {
            let cancel = controls.cancel.clone();
            tokio::spawn(async move {
                tokio::time::sleep(after).await;
                cancel.cancel();
            });
        }
        // Registered while this attempt is under way: also when Restate suspends the invocation
        // to wait for a decision (the handler is dropped then), the guard takes it out.
        let registered = Registered::new(self, &execution, &controls.cancel);
        let kill = KillSwitch::host_clock();
        let (bridge, mut requests) = Bridge::new(kill.clone());
        // Restate's journal is the run's; the run's own journal, in memory, carries it across
        // a suspension, as a durable store carries `terminus resume`.
        let store = Arc::new(MemoryStore::new());
        let mut again = None;
        let run = built
            .run
            .execution(execution.clone())
            .started_at(started)
            .kill_switch(kill.clone())
            .store(store.clone())
            .observer(bridge.observer())
            .adapters(|mut adapters| {
                wrap(&mut adapters, &bridge);
                again = Some(Again::of(&adapters));
            });
        let replay = Arc::new(Mutex::new(Replay::new(built.on_replay)));
        let mut steps = Steps {
            ctx: &ctx,
            controls,
            replay,
            attempt: Arc::from(attempt_id()),
        };
        let mut result = steps.drive(run.execute(), &mut requests).await;
        // Suspended: wait for the decisions (Restate suspends the invocation meanwhile), then
        // go on from the run's journal, as `terminus resume` does; again for each suspension.
        let mut round = 0u32;
        let mut stopped = None;
        while let (Err(RunError::Suspended(_)), Some(again)) = (&result, &again) {
            round = round.saturating_add(1);
            let waited = match decisions::wait(&ctx, &store, &execution, round).await {
                Ok(waited) => waited,
                Err(e) => {
                    stopped = Some(e);
                    break;
                }
            };
            // The wait does not count against the deadline.
            steps.controls.deadline = steps
                .controls
                .deadline
                .map(|at| at.checked_add(waited).unwrap_or(at));
            let resume = again
                .resume(&execution)
                .kill_switch(kill.clone())
                .store(store.clone())
                .observer(bridge.observer());
            result = steps.drive(resume.execute(), &mut requests).await;
        }
        drop(bridge);
        drop(registered);
        if let Some(finish) = built.finish {
            finish.await;
        }
        if let Some(e) = stopped {
            return Err(e);
        }
        match result {
            Ok(report) => {
                let report = serde_json::to_value(&report)
                    .map_err(|e| TerminalError::new(format!("the report: {e}")))?;
                // Why it stopped, from the run's journal (rebuilt the same on a replay).
                let explanation =
                    match terminus_runtime::explain::read(store.as_ref(), &execution).await {
                        Ok(Some(explanation)) => explanation.text(),
                        Ok(None) => format!("execution `{execution}` kept no journal"),
                        Err(e) => format!("execution `{execution}` cannot be explained: {e}"),
                    };
                ctx.set(EXPLANATION, explanation);
                ctx.set(REPORT, Json(report.clone()));
                Ok(Json(report))
            }
            // The run's errors come from its journaled answers, so a retry would end the same.
            Err(e) => Err(TerminalError::new_with_code(500, format!("{}: {e}", e.class())).into()),
        }
    }

    /// Approves the held call `{"call_id"}` names: it runs, once (`docs/restate.md`).
    #[handler]
    async fn approve(
        &self,
        ctx: SharedObjectContext<'_>,
        body: Json<Value>,
    ) -> HandlerResult<Json<Value>> {
        decisions::decide(&ctx, Verb::Approve, &body.0).await
    }

    /// Denies the held call `{"call_id", "reason"?}` names: the model gets a
    /// `permission_denied` result carrying the reason.
    #[handler]
    async fn deny(
        &self,
        ctx: SharedObjectContext<'_>,
        body: Json<Value>,
    ) -> HandlerResult<Json<Value>> {
        decisions::decide(&ctx, Verb::Deny, &body.0).await
    }

    /// Answers the held call `{"call_id", "result"}` (or `{"call_id", "error", "message"}`)
    /// names: that is its result.
    #[handler]
    async fn answer(
        &self,
        ctx: SharedObjectContext<'_>,
        body: Json<Value>,
    ) -> HandlerResult<Json<Value>> {
        decisions::decide(&ctx, Verb::Answer, &body.0).await
    }

    /// The report of the execution, once it has stopped.
    #[handler]
    async fn report(&self, ctx: SharedObjectContext<'_>) -> HandlerResult<Json<Value>> {
        match ctx.get::<Json<Value>>(REPORT).await? {
            Some(report) => Ok(report),
            None => Err(TerminalError::new_with_code(
                404,
                format!("execution `{}` has no report yet", ctx.key()),
            )
            .into()),
        }
    }

    /// Why the execution stopped and what to change, once it has: the text of `terminus
    /// inspect` for the same run.
    #[handler]
    async fn explain(&self, ctx: SharedObjectContext<'_>) -> HandlerResult<String> {
        match ctx.get::<String>(EXPLANATION).await? {
            Some(text) => Ok(text),
            None => Err(TerminalError::new_with_code(
                404,
                format!("execution `{}` has no explanation yet", ctx.key()),
            )
            .into()),
        }
    }

    /// Pulls the kill switch of the execution's run, if it is under way in this process:
    /// the run ends `aborted (cancelled)` with its report. Answers whether it was.
    #[handler]
    async fn cancel(&self, ctx: SharedObjectContext<'_>) -> HandlerResult<bool> {
        let token = self.running().get(ctx.key()).cloned();
        Ok(match token {
            Some(token) => {
                token.cancel();
                true
            }
            None => false,
        })
    }
}

/// A run's cancel token in [`TerminusAgent`]'s `running`, taken out when dropped.
struct Registered<'a> {
    agent: &'a TerminusAgent,
    execution: &'a str,
}

impl<'a> Registered<'a> {
    fn new(
        agent: &'a TerminusAgent,
        execution: &'a str,
        cancel: &CancellationToken,
    ) -> Registered<'a> {
        agent.running().insert(execution.to_owned(), cancel.clone());
        Registered { agent, execution }
    }
}

impl Drop for Registered<'_> {
    fn drop(&mut self) {
        self.agent.running().remove(self.execution);
    }
}

/// What a run that goes on after a suspension takes again: the wrapped adapters and settings.
struct Again {
    model: Arc<dyn Model>,
    tools: ToolSet,
    verifier: Option<Arc<dyn Verifier>>,
    config: RuntimeConfig,
    context: Option<(ContextPolicy, Arc<dyn Tokenizer>)>,
}

impl Again {
    fn of(adapters: &Adapters<'_>) -> Again {
        Again {
            model: adapters.model.clone(),
            tools: adapters.tools.clone(),
            verifier: adapters.verifier.clone(),
            config: adapters.config.clone(),
            context: adapters.context.clone(),
        }
    }

    /// The resume of `execution` with these adapters (no `on_replay`: they are the ones that
    /// ran, and have moved past what the journal holds).
    fn resume(&self, execution: &str) -> Resume {
        let mut resume = Run::resume(execution, self.model.clone())
            .tools(self.tools.clone())
            .config(self.config.clone());
        if let Some(verifier) = &self.verifier {
            resume = resume.verifier(verifier.clone());
        }
        if let Some((policy, tokenizer)) = &self.context {
            resume = resume.context(*policy, tokenizer.clone());
        }
        resume
    }
}

/// A step waiting its turn.
type Job<'a> = Pin<Box<dyn Future<Output = ()> + Send + 'a>>;

/// Polls the first job of `queue` (pending while there is none).
fn front<'q, 'a>(queue: &'q mut VecDeque<Job<'a>>) -> impl Future<Output = ()> + 'q {
    std::future::poll_fn(move |cx| match queue.front_mut() {
        Some(job) => job.as_mut().poll(cx),
        None => std::task::Poll::Pending,
    })
}

/// What the steps of one attempt share.
struct Steps<'a, 'ctx> {
    ctx: &'a ObjectContext<'ctx>,
    controls: Controls,
    replay: Arc<Mutex<Replay>>,
    /// This attempt's id, journaled as the start of effects that must not run twice.
    attempt: Arc<str>,
}

impl Steps<'_, '_> {
    /// Polls the run while journaling the steps its adapters ask for, one at a time in the
    /// order they were asked for (the order the runtime called its adapters): the SDK carries
    /// out one `ctx.run` at a time, so the tool calls of one turn are journaled one after
    /// another on this path. When the run stops, the steps it asked for and stopped waiting on
    /// are journaled too (as abandoned), so that a replay creates exactly the same steps.
    async fn drive<T>(
        &self,
        run: impl Future<Output = T>,
        requests: &mut mpsc::UnboundedReceiver<Begin>,
    ) -> T {
        let mut queue: VecDeque<Job<'_>> = VecDeque::new();
        tokio::pin!(run);
        let out = loop {
            tokio::select! {
                out = &mut run => break out,
                Some(begin) = requests.recv() => self.push(&mut queue, begin),
                () = front(&mut queue), if !queue.is_empty() => {
                    queue.pop_front();
                }
            }
        };
        // The run is over and its adapters are gone with it: nothing asks for a step after
        // these (the channel stays open for a run that goes on after a suspension).
        while let Ok(begin) = requests.try_recv() {
            self.push(&mut queue, begin);
        }
        while let Some(job) = queue.pop_front() {
            job.await;
        }
        out
    }

    fn push<'s>(&'s self, queue: &mut VecDeque<Job<'s>>, mut begin: Begin) {
        let effect = begin.guard.take().map(|guard| {
            // The effect's start, a step of its own before the effect's.
            let (started_tx, started) = oneshot::channel();
            let attempt = Arc::clone(&self.attempt);
            let name = format!("{}:started", begin.name);
            queue.push_back(Box::pin(async move {
                let journaled = self
                    .ctx
                    .run(|| async move { Ok(attempt.to_string()) })
                    .name(name)
                    .await;
                let _ = started_tx.send(journaled.unwrap_or_default());
            }));
            // Then the job it started, if it starts one.
            let (effect_tx, effect) = oneshot::channel();
            let name = format!("{}:job", begin.name);
            queue.push_back(Box::pin(self.job_step(name, guard.job, started, effect_tx)));
            (guard.in_doubt, effect)
        });
        queue.push_back(Box::pin(self.step(begin, effect)));
    }

    /// The job step of an effect that must not run twice: live, and if this attempt started
    /// the effect, it hands the adapter a job ticket and stores the job the effect reports
    /// before it waits for it (or none, if the effect ends first, or the run is cancelled or
    /// out of time). An effect an earlier attempt started is not started here: its job step
    /// stores none, and its answer step answers it as in doubt. Tells the answer step which.
    async fn job_step(
        &self,
        name: String,
        reply: oneshot::Sender<JobStart>,
        started: oneshot::Receiver<String>,
        effect: oneshot::Sender<Effect>,
    ) {
        // Journaled (or replayed) by the step before this one.
        let first = started.await.ok().as_deref() == Some(&*self.attempt);
        let reply = Arc::new(Mutex::new(Some(reply)));
        let (journaled_tx, journaled) = oneshot::channel();
        let live = {
            let reply = Arc::clone(&reply);
            let controls = self.controls.clone();
            let replay = Arc::clone(&self.replay);
            move || async move {
                replay.lock().unwrap_or_else(PoisonError::into_inner).over();
                let (job_tx, job_rx) = oneshot::channel();
                // Not started here: the adapter is told after the step, as on a replay.
                let waiting = first
                    .then(|| reply.lock().unwrap_or_else(PoisonError::into_inner).take())
                    .flatten();
                let handed = waiting.is_some_and(|reply| {
                    reply
                        .send(JobStart::Live {
                            job: job_tx,
                            journaled,
                        })
                        .is_ok()
                });
                let job = if handed {
                    tokio::select! {
                        biased;
                        job = job_rx => job.ok().flatten(),
                        () = controls.cancel.cancelled() => None,
                        () = controls.deadline() => None,
                    }
                } else {
                    None
                };
                serde_json::to_string(&StoredJob { job }).map_err(HandlerError::from)
            }
        };
        let result = self.ctx.run(live).name(name.clone()).await;
        let stored = result.map_err(|e| e.to_string()).and_then(|text| {
            serde_json::from_str::<StoredJob>(&text)
                .map_err(|e| format!("the journaled step `{name}` cannot be read: {e}"))
        });
        let job = stored.as_ref().ok().and_then(|s| s.job.clone());
        let waiting = reply.lock().unwrap_or_else(PoisonError::into_inner).take();
        match waiting {
            // Replayed, or an effect this attempt does not start: the stored job, if any.
            Some(reply) => {
                let _ = reply.send(match stored {
                    Ok(stored) => JobStart::Replayed(stored.job),
                    Err(message) => JobStart::Failed(message),
                });
            }
            None => {
                let _ = journaled_tx.send(stored.is_ok());
            }
        }
        let _ = effect.send(if first {
            Effect::ThisAttempt
        } else {
            Effect::Earlier { job }
        });
    }

    /// One journaled step: a `ctx.run` whose closure, when live, hands the adapter a ticket and
    /// stores whichever comes first: the answer, the cancel, the deadline, the step's timeout.
    /// An effect an earlier attempt started and that started no job is not carried out: its
    /// in-doubt answer is stored. One that started a job is live: it waits for that job.
    async fn step(&self, begin: Begin, effect: Option<(Value, oneshot::Receiver<Effect>)>) {
        let Begin {
            name,
            kind,
            timeout,
            reply,
            ..
        } = begin;
        let reply = Arc::new(Mutex::new(Some(reply)));
        let (stored_tx, stored_rx) = oneshot::channel();
        let live = {
            let reply = Arc::clone(&reply);
            let controls = self.controls.clone();
            let replay = Arc::clone(&self.replay);
            move || async move {
                replay.lock().unwrap_or_else(PoisonError::into_inner).over();
                if let Some((answer, effect)) = effect
                    && !matches!(
                        effect.await,
                        Ok(Effect::ThisAttempt | Effect::Earlier { job: Some(_) })
                    )
                {
                    let stored = Stored::Done { value: answer };
                    return serde_json::to_string(&stored).map_err(HandlerError::from);
                }
                let (answer, answered) = oneshot::channel();
                let waiting = reply.lock().unwrap_or_else(PoisonError::into_inner).take();
                let started = waiting.is_some_and(|reply| {
                    reply
                        .send(Start::Live(Ticket {
                            answer,
                            stored: stored_rx,
                        }))
                        .is_ok()
                });
                let abandoned = |why| Stored::Abandoned { why, started };
                let timed_out = async {
                    match timeout {
                        Some(t) => tokio::time::sleep(t).await,
                        None => std::future::pending().await,
                    }
                };
                let stored = tokio::select! {
                    biased;
                    answer = answered => match answer {
                        Ok(value) => Stored::Done { value },
                        Err(_) => abandoned(Abandon::Dropped),
                    },
                    () = controls.cancel.cancelled() => abandoned(Abandon::Cancelled),
                    () = controls.deadline() => abandoned(Abandon::Deadline),
                    () = timed_out => abandoned(Abandon::Timeout),
                };
                serde_json::to_string(&stored).map_err(HandlerError::from)
            }
        };
        let result = self.ctx.run(live).name(name.clone()).await;
        let stored = result.map_err(|e| e.to_string()).and_then(|text| {
            serde_json::from_str::<Stored>(&text)
                .map_err(|e| format!("the journaled step `{name}` cannot be read: {e}"))
        });
        let waiting = reply.lock().unwrap_or_else(PoisonError::into_inner).take();
        match waiting {
            // The adapter was not handed a ticket: the outcome is Restate's journaled one (or the
            // in-doubt answer just stored).
            Some(reply) => {
                if let Ok(stored) = &stored
                    && started_first_time(stored)
                {
                    self.replay
                        .lock()
                        .unwrap_or_else(PoisonError::into_inner)
                        .count(kind);
                }
                let _ = reply.send(match stored {
                    Ok(stored) => Start::Replayed(stored),
                    Err(message) => Start::Failed(message),
                });
            }
            None => {
                let _ = stored_tx.send(stored);
            }
        }
    }
}

/// Whether the first execution of a step started its effect.
fn started_first_time(stored: &Stored) -> bool {
    match stored {
        Stored::Done { .. } => true,
        Stored::Abandoned { started, .. } => *started,
    }
}

/// The endpoint that serves the `TerminusAgent` object, building its runs with `blueprint`.
///
/// With `identity_keys` (Restate's request-identity public keys, `publickeyv1_...`), every
/// request, discovery included, must carry a JWT signed by one of them: anything else is refused
/// (401) before a handler runs. Without keys, the endpoint answers whoever reaches it. `Err`
/// names the key that is not one.
pub fn endpoint(
    blueprint: Arc<dyn Blueprint>,
    identity_keys: &[String],
) -> Result<Endpoint, String> {
    let mut builder = Endpoint::builder().bind(TerminusAgent::new(blueprint));
    for key in identity_keys {
        builder = builder
            .identity_key(key)
            .map_err(|e| format!("`{key}` is not a Restate identity key: {e}"))?;
    }
    Ok(builder.build())
}

/// Serves `endpoint` (see [`endpoint`]) on `listener` (Restate's HTTP/2 service protocol)
/// until `shutdown` resolves, then lets the connections under way finish (10 s at most).
pub async fn serve(
    listener: tokio::net::TcpListener,
    endpoint: Endpoint,
    shutdown: impl Future<Output = ()>,
) {
    use hyper_util::rt::{TokioExecutor, TokioIo};
    let endpoint = restate_sdk::hyper::HyperEndpoint::new(endpoint);
    let graceful = hyper_util::server::graceful::GracefulShutdown::new();
    tokio::pin!(shutdown);
    loop {
        tokio::select! {
            accepted = listener.accept() => {
                let Ok((stream, remote)) = accepted else { continue };
                // Each journaled step is a small frame answered by a small frame: without
                // TCP_NODELAY, Nagle's algorithm and the peer's delayed ACK hold many of them
                // back tens of milliseconds.
                let _ = stream.set_nodelay(true);
                let connection = hyper::server::conn::http2::Builder::new(TokioExecutor::new())
                    .serve_connection(TokioIo::new(stream), endpoint.clone());
                let connection = graceful.watch(connection);
                tokio::spawn(async move {
                    if let Err(e) = connection.await {
                        tracing::warn!("serving {remote}: {e}");
                    }
                });
            }
            () = &mut shutdown => break,
        }
    }
    tokio::select! {
        () = graceful.shutdown() => {}
        () = tokio::time::sleep(Duration::from_secs(10)) => {}
    }
}
