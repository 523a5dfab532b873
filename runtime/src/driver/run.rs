//! [`Run`]: one agent run, configured builder style; [`Resume`]: going on from a journal.

use super::resume::resume_execution;
use super::*;

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
        let conversation = Conversation::new(env.config.system_prompt.as_deref(), &env.task);
        let mut driver = Driver::new(env, machine, lease, conversation, Instant::now());
        let result = driver.drive(&mut observer).await;
        // The lease expires by itself if releasing fails; the run's own result matters more.
        let _ = driver.env.store.release(&driver.lease).await;
        result
    }
}
