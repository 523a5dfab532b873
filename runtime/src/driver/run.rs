//! [`Run`]: one agent run, configured builder style; [`Resume`]: going on from a journal.

use super::resume::{OnReplay, Replayed, resume_execution};
use super::{Driver, Env, unix_ms};
use crate::config::RuntimeConfig;
use crate::context::{ContextPolicy, Tokenizer};
use crate::conversation::Conversation;
use crate::error::RunError;
use crate::journal::{Claims, MemoryStore, RunSpec};
use crate::kill::KillSwitch;
use crate::meters;
use crate::model::Model;
use crate::observer::Observer;
use crate::report::Report;
use crate::tool::ToolSet;
use crate::verifier::Verifier;
use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use terminus_kernel::{Machine, Policy, Raise};
use tokio::time::Instant;

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
    /// The task's size, for the policy's `budget_scale`.
    scale: Option<u64>,
    execution: Option<String>,
    host: Option<serde_json::Value>,
    /// When the run first started (Unix ms), if not now.
    started: Option<u64>,
    parts: Parts,
}

/// A run's adapters and settings, lent to [`Run::adapters`] for a host that wraps them (a
/// durable engine journals every call).
#[non_exhaustive]
pub struct Adapters<'a> {
    /// The model.
    pub model: &'a mut Arc<dyn Model>,
    /// The tools.
    pub tools: &'a mut ToolSet,
    /// The verifier, if the host gave one (else the rule verifier, which calls nothing).
    pub verifier: &'a mut Option<Arc<dyn Verifier>>,
    /// Timeouts and the rest.
    pub config: &'a mut RuntimeConfig,
    /// The context window's policy and tokenizer, if the host gave them (a host that goes on
    /// with the run itself, as [`Run::resume`] does, gives them again).
    pub context: &'a mut Option<(ContextPolicy, Arc<dyn Tokenizer>)>,
}

/// Goes on with an execution from its journal, started with [`Run::resume`]. It takes the
/// adapters and controls a run takes ([`Setup`]) and nothing else: the task, the name, the
/// policy and the host's data are the journal's.
pub struct Resume {
    execution: String,
    parts: Parts,
    on_replay: Option<OnReplay>,
    raises: Vec<Raise>,
}

/// What a new run and a resumed one both take: the adapters and the host's controls.
struct Parts {
    model: Arc<dyn Model>,
    tools: ToolSet,
    verifier: Option<Arc<dyn Verifier>>,
    store: Arc<dyn Claims>,
    config: RuntimeConfig,
    kill: KillSwitch,
    observer: Option<Box<dyn Observer>>,
    context: Option<(ContextPolicy, Arc<dyn Tokenizer>)>,
}

impl Parts {
    fn new(model: Arc<dyn Model>) -> Parts {
        Parts {
            model,
            tools: ToolSet::new(),
            verifier: None,
            store: Arc::new(MemoryStore::new()),
            config: RuntimeConfig::default(),
            kill: KillSwitch::new(),
            observer: None,
            context: None,
        }
    }

    /// The run's fixed environment, and its observer (which the driver borrows mutably).
    fn into_env(
        self,
        task: String,
        execution: String,
    ) -> Result<(Env, Option<Box<dyn Observer>>), RunError> {
        if let Some((policy, _)) = &self.context {
            policy.validate().map_err(RunError::Context)?;
        }
        let model_info = self.model.info();
        let env = Env {
            task,
            name: None,
            model_info,
            model: self.model,
            tools: self.tools,
            specs: Vec::new(),
            verifier: self.verifier,
            store: self.store,
            config: self.config,
            execution,
            kill: self.kill,
            context: self.context,
        };
        Ok((env, self.observer))
    }
}

/// The adapters and controls that both [`Run`] and [`Resume`] take, for a host that builds
/// either the same way (the same methods exist on both types without importing this trait).
pub trait Setup: Sized {
    /// The tools the model may call.
    #[must_use]
    fn tools(self, tools: ToolSet) -> Self;
    /// The verifier asked when the policy has `verify_completion` (default
    /// [`RuleVerifier`](crate::RuleVerifier)).
    #[must_use]
    fn verifier(self, verifier: Arc<dyn Verifier>) -> Self;
    /// Where the journal is written (default a fresh [`MemoryStore`]): a run needs only its
    /// journal and claims ([`Claims`], which an `Arc<dyn Store>` is too).
    #[must_use]
    fn store(self, store: Arc<dyn Claims>) -> Self;
    /// Timeouts, concurrency, system prompt, worker and lease.
    #[must_use]
    fn config(self, config: RuntimeConfig) -> Self;
    /// The kill switch; keep a clone to stop the run.
    #[must_use]
    fn kill_switch(self, kill: KillSwitch) -> Self;
    /// Keeps the model's view of the conversation inside a context window: tokens counted with
    /// `tokenizer` (a turn's reported usage preferred), long tool results cut, the view pruned
    /// by `policy` (see [`crate::context`]). The conversation, the journal and the verifier's
    /// transcript keep everything. A view that cannot fit ends the run with
    /// `context_exhausted`. Without it the model is sent the whole conversation.
    #[must_use]
    fn context(self, policy: ContextPolicy, tokenizer: Arc<dyn Tokenizer>) -> Self;
    /// Receives one record per transition.
    #[must_use]
    fn observer(self, observer: impl Observer + 'static) -> Self;
    /// The run's kill switch (a clone: killing it stops this run).
    fn kill_handle(&self) -> KillSwitch;
    /// Runs to a stop and returns the report.
    fn execute(self) -> impl Future<Output = Result<Report, RunError>>;
}

/// The [`Setup`] methods, inherent on both types (so callers need no import) and as the trait.
macro_rules! setup {
    ($t:ident) => {
        impl $t {
            /// The tools the model may call.
            #[must_use]
            pub fn tools(mut self, tools: ToolSet) -> $t {
                self.parts.tools = tools;
                self
            }

            /// The verifier asked when the policy has `verify_completion` (default
            /// [`RuleVerifier`](crate::RuleVerifier)).
            #[must_use]
            pub fn verifier(mut self, verifier: Arc<dyn Verifier>) -> $t {
                self.parts.verifier = Some(verifier);
                self
            }

            /// Where the journal is written (default a fresh [`MemoryStore`]): a run needs only
            /// its journal and claims ([`Claims`], which an `Arc<dyn Store>` is too).
            #[must_use]
            pub fn store(mut self, store: Arc<dyn Claims>) -> $t {
                self.parts.store = store;
                self
            }

            /// Timeouts, concurrency, system prompt, worker and lease.
            #[must_use]
            pub fn config(mut self, config: RuntimeConfig) -> $t {
                self.parts.config = config;
                self
            }

            /// The kill switch; keep a clone to stop the run.
            #[must_use]
            pub fn kill_switch(mut self, kill: KillSwitch) -> $t {
                self.parts.kill = kill;
                self
            }

            /// Keeps the model's view inside a context window (see [`Setup::context`]).
            #[must_use]
            pub fn context(mut self, policy: ContextPolicy, tokenizer: Arc<dyn Tokenizer>) -> $t {
                self.parts.context = Some((policy, tokenizer));
                self
            }

            /// Receives one record per transition.
            #[must_use]
            pub fn observer(mut self, observer: impl Observer + 'static) -> $t {
                self.parts.observer = Some(Box::new(observer));
                self
            }

            /// The run's kill switch (a clone: killing it stops this run).
            pub fn kill_handle(&self) -> KillSwitch {
                self.parts.kill.clone()
            }
        }

        impl Setup for $t {
            fn tools(self, tools: ToolSet) -> Self {
                $t::tools(self, tools)
            }
            fn verifier(self, verifier: Arc<dyn Verifier>) -> Self {
                $t::verifier(self, verifier)
            }
            fn store(self, store: Arc<dyn Claims>) -> Self {
                $t::store(self, store)
            }
            fn config(self, config: RuntimeConfig) -> Self {
                $t::config(self, config)
            }
            fn kill_switch(self, kill: KillSwitch) -> Self {
                $t::kill_switch(self, kill)
            }
            fn context(self, policy: ContextPolicy, tokenizer: Arc<dyn Tokenizer>) -> Self {
                $t::context(self, policy, tokenizer)
            }
            fn observer(self, observer: impl Observer + 'static) -> Self {
                $t::observer(self, observer)
            }
            fn kill_handle(&self) -> KillSwitch {
                $t::kill_handle(self)
            }
            fn execute(self) -> impl Future<Output = Result<Report, RunError>> {
                $t::execute(self)
            }
        }
    };
}

setup!(Run);
setup!(Resume);

impl std::fmt::Debug for Run {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Run")
            .field("task", &self.task)
            .field("name", &self.name)
            .field("execution", &self.execution)
            .field("tools", &self.parts.tools)
            .field("config", &self.parts.config)
            .finish_non_exhaustive()
    }
}

impl std::fmt::Debug for Resume {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Resume")
            .field("execution", &self.execution)
            .field("tools", &self.parts.tools)
            .field("config", &self.parts.config)
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
            scale: None,
            execution: None,
            host: None,
            started: None,
            parts: Parts::new(model),
        }
    }

    /// The run's policy.
    pub fn policy(&self) -> &Policy {
        &self.policy
    }

    /// The run's first start, in milliseconds since the Unix epoch, when it is not now: a run
    /// that a durable engine carries on after a restart keeps its clock, so the deadline spans
    /// the interruption, as [`Run::resume`] does from the journal.
    #[must_use]
    pub fn started_at(mut self, unix_ms: u64) -> Run {
        self.started = Some(unix_ms);
        self
    }

    /// Lends the run's model, tools, verifier and settings to `f`, which may wrap or replace
    /// them.
    #[must_use]
    pub fn adapters(mut self, f: impl FnOnce(Adapters<'_>)) -> Run {
        f(Adapters {
            model: &mut self.parts.model,
            tools: &mut self.parts.tools,
            verifier: &mut self.parts.verifier,
            config: &mut self.parts.config,
            context: &mut self.parts.context,
        });
        self
    }

    /// Resumes `execution` from its journal (give the same store, tools and verifier as the
    /// run had): the task, the policy and the counters come from the journal, journaled model
    /// turns and tool results are replayed instead of being asked for again, and the run goes
    /// on from where it stopped. An execution that already ended runs nothing and returns its
    /// stored report. A claim held by another live worker is [`crate::StoreError::Claimed`].
    pub fn resume(execution: impl Into<String>, model: Arc<dyn Model>) -> Resume {
        Resume {
            execution: execution.into(),
            parts: Parts::new(model),
            on_replay: None,
            raises: Vec::new(),
        }
    }

    /// Data the host needs to rebuild its adapters when the run is resumed, kept in the
    /// execution's [`RunSpec::host`] (the command line keeps the scenario there).
    #[must_use]
    pub fn host_data(mut self, host: serde_json::Value) -> Run {
        self.host = Some(host);
        self
    }

    /// The task's size in units (the files in scope, say), for the policy's `budget_scale`:
    /// the run is created under [`Policy::scaled`]`(units)`, and the execution's [`RunSpec`]
    /// keeps the scaled policy with its units, so a resume goes on under the same budgets. A
    /// policy with a `budget_scale` and no units given runs at its base (0 units); one without
    /// a `budget_scale` is not changed. A scale the policy refuses is [`RunError::Policy`].
    #[must_use]
    pub fn scale(mut self, units: u64) -> Run {
        self.scale = Some(units);
        self
    }

    /// Names the run (kept in the execution's [`RunSpec`]).
    #[must_use]
    pub fn name(mut self, name: impl Into<String>) -> Run {
        self.name = Some(name.into());
        self
    }

    /// The execution id (default `run-<pid>-<n>`).
    #[must_use]
    pub fn execution(mut self, id: impl Into<String>) -> Run {
        self.execution = Some(id.into());
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
            scale,
            execution,
            host,
            started,
            parts,
        } = self;
        let unscaled = policy
            .budget_scale
            .as_ref()
            .is_some_and(|s| s.units.is_none());
        let policy = match scale {
            Some(units) => policy.scaled(units),
            None if unscaled => policy.scaled(0),
            None => Ok(policy),
        }
        .map_err(RunError::Policy)?;
        let execution = execution.unwrap_or_else(|| {
            let n = RUNS.fetch_add(1, Ordering::Relaxed);
            format!("run-{}-{n}", std::process::id())
        });
        let (mut env, mut observer) = parts.into_env(task, execution)?;
        env.name.clone_from(&name);
        let machine = Machine::new(policy).map_err(RunError::Policy)?;
        let spec = RunSpec {
            task: env.task.clone(),
            name,
            system: env.config.system_prompt.clone(),
            policy: machine.policy().clone(),
            host,
            started_unix_ms: Some(started.unwrap_or_else(unix_ms)),
        };
        // Created already claimed (one commit on durable stores): a second `run` of the same id
        // finds it created and stops at once.
        let created = env
            .store
            .create_claimed(&env.execution, &spec, &env.config.worker, env.config.lease)
            .await
            .map_err(|e| {
                let e = RunError::from(e);
                meters::claim_refused(&e);
                e
            })?;
        let Some(lease) = created else {
            return Err(RunError::ExecutionExists(env.execution));
        };
        let conversation = Conversation::new(
            env.config.system_prompt.as_deref(),
            &env.task,
            env.conversation_read(),
            &spec.policy,
        );
        let now = Instant::now();
        let start = started.map_or(now, |at| {
            now.checked_sub(std::time::Duration::from_millis(
                unix_ms().saturating_sub(at),
            ))
            .unwrap_or(now)
        });
        let mut driver = Driver::new(env, machine, lease, conversation, start);
        let result = driver.drive(&mut observer).await;
        // A run that stopped released its claim with its report. Otherwise the lease expires by
        // itself if releasing fails; the run's own result matters more.
        if result.is_err() {
            let _ = driver.env.store.release(&driver.lease).await;
        }
        result
    }
}

impl Resume {
    /// Called once after the journal is replayed, before the run goes on, with what it already
    /// answers. Live adapters need nothing of it; scripted ones (the scenario files) move past
    /// the answers the journal holds.
    #[must_use]
    pub fn on_replay(mut self, f: impl FnOnce(&Replayed) + Send + 'static) -> Resume {
        self.on_replay = Some(Box::new(f));
        self
    }

    /// Goes on with a run that a budget stopped, with that budget raised
    /// (`terminus resume --raise FIELD=N`, see [`terminus_kernel::raise`]): the step the stop
    /// pre-empted is taken under the raised policy, and the run goes on from there. The first
    /// stop and the raise stay in the journal; the counters carry over. A raise that does not
    /// lift the budget that stopped the run, or of a run that has not ended, is
    /// [`RunError::Raise`] (exit code 2), nothing written.
    #[must_use]
    pub fn raise(mut self, raises: Vec<Raise>) -> Resume {
        self.raises = raises;
        self
    }

    /// Claims the execution, replays its journal into a fresh machine and conversation, and
    /// runs on to a stop (an execution that already ended returns its stored report, unless
    /// [`Resume::raise`] lifts the budget that stopped it).
    pub async fn execute(self) -> Result<Report, RunError> {
        let (env, mut observer) = self.parts.into_env(String::new(), self.execution)?;
        resume_execution(env, &mut observer, self.on_replay, self.raises).await
    }
}
