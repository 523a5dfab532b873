//! `terminus agent --record FILE.json`: the live run written as a scenario file, so that
//! `terminus run FILE.json` replays it offline with the same path, counters, stop reason and
//! result. The model's turns are kept as received (its errors as errors), each tool's results as
//! returned in the order the tools were called, the model verifier's verdicts, the policy, the
//! context window with the tokenizer the live run used, the system prompt and the tools'
//! descriptions and schemas.

use async_trait::async_trait;
use serde_json::Value;
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, OnceLock, PoisonError};
use terminus_kernel::{Entry, Finish, ModelTurn, ToolOutcome, ToolResult};
use terminus_runtime::layer::{self, Answer, BoxFuture, Call, Layer, Next};
use terminus_runtime::{KillSwitch, Model, ModelError, Purpose, ToolSet, ToolSource, Verifier};
use terminus_scenario::{
    CallSpec, ContextSpec, ModelScript, Repeat, ResultSpec, ScenarioFile, ToolScript, TurnSpec,
    VerdictSpec, VerifierScript,
};

#[derive(Default)]
struct ToolLog {
    description: String,
    parameters: Value,
    idempotent: bool,
    /// Whether its calls were held for a decision.
    hold: Option<terminus_kernel::Hold>,
    /// One slot per call, in the order the runtime called the tool; filled when it answers.
    results: Vec<Option<ResultSpec>>,
}

/// Everything a recording keeps, filled while the run goes.
#[derive(Default)]
pub(crate) struct Recorder {
    turns: Mutex<Vec<TurnSpec>>,
    tools: Mutex<BTreeMap<String, ToolLog>>,
    verdicts: Mutex<Option<Vec<VerdictSpec>>>,
    /// The run's kill switch: a tool call dropped once it is pulled was cancelled by the host,
    /// one dropped before it by the runtime's tool timeout.
    kill: OnceLock<KillSwitch>,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Recorder {
    /// Starts keeping the model's agent turns (its calls for a verdict are the verifier's).
    pub(crate) fn model(self: &Arc<Self>, inner: Arc<dyn Model>) -> Arc<dyn Model> {
        layer::model(inner, self.clone())
    }

    /// Starts keeping the results of every tool of `tools` but the built-in `write_todos` (a
    /// scenario cannot script it; replay runs the built-in), with their descriptions.
    ///
    /// A tool list that changes during the run ([`ToolSet::watch`]) is watched through the
    /// recorder, so a tool that appears is recorded with its description too.
    pub(crate) fn tools(self: &Arc<Self>, tools: &ToolSet) -> ToolSet {
        self.register(tools);
        let mut watched = ToolSet::empty();
        watched.hold_as(tools);
        for name in tools.names() {
            if let Some(tool) = tools.get(name) {
                watched.insert(name, tool.clone());
            }
        }
        for (source, names) in tools.sources() {
            watched.watch(
                Arc::new(RecordingSource {
                    inner: source,
                    recorder: self.clone(),
                }),
                names,
            );
        }
        layer::tools(&watched, self.clone())
    }

    /// Keeps the description, schema and hold of every tool of `tools` but `write_todos`; a
    /// tool registered already keeps its results.
    fn register(&self, tools: &ToolSet) {
        let mut logs = lock(&self.tools);
        for name in tools.names() {
            if name == terminus_kernel::WRITE_TODOS {
                continue;
            }
            if let Some(tool) = tools.get(name) {
                let log = logs.entry(name.to_owned()).or_default();
                log.description = tool.description().to_owned();
                log.parameters = tool.parameters();
                log.idempotent = tool.idempotent();
                log.hold = tools.held(name);
            }
        }
    }

    /// Watches the run's kill switch, so that a tool call the host cancels is recorded as
    /// `cancelled` (the replay pulls the switch there) instead of timed out.
    pub(crate) fn watch(&self, kill: KillSwitch) {
        let _ = self.kill.set(kill);
    }

    /// The run ended: a model call it dropped unanswered is kept (as a `cancelled` turn, which
    /// the replay answers by pulling the kill switch) only when the host cancelled the run;
    /// one the deadline cut is left out (the replay's own clock decides it).
    pub(crate) fn ended(&self, cancelled: bool) {
        if !cancelled {
            lock(&self.turns).retain(|t| t.cancelled != Some(true));
        }
    }

    /// Starts keeping the verifier's verdicts (a model verifier; the rule verifier is replayed
    /// by the rules).
    pub(crate) fn verifier(self: &Arc<Self>, inner: Arc<dyn Verifier>) -> Arc<dyn Verifier> {
        *lock(&self.verdicts) = Some(Vec::new());
        layer::verifier(inner, self.clone())
    }

    /// The recording of a run rebuilt from its whole journal (a run resumed after a crash: the
    /// turns before the crash were never seen by this process, and the journal holds each turn
    /// once). `tools` gives the descriptions and schemas; `verdicts` whether the verifier's
    /// verdicts are the model's (kept) or the rules' (replayed by the rules). The journal keeps
    /// no provider error messages, so the replay of those prints the scripted default.
    pub(crate) fn from_journal(
        entries: &[&Entry],
        tools: &ToolSet,
        verdicts: bool,
    ) -> Arc<Recorder> {
        let recorder = Arc::new(Recorder::default());
        // Registers every tool with its description, as a live recording does.
        let _ = recorder.tools(tools);
        if verdicts {
            *lock(&recorder.verdicts) = Some(Vec::new());
        }
        let mut slots: BTreeMap<&str, (String, usize)> = BTreeMap::new();
        let mut jobs: BTreeMap<&str, &serde_json::Value> = BTreeMap::new();
        for entry in entries {
            match entry {
                Entry::Assistant(turn) => lock(&recorder.turns).push(turn_spec(turn)),
                Entry::ModelError {
                    error,
                    retry_after_ms,
                } => lock(&recorder.turns).push(TurnSpec {
                    error: Some(*error),
                    retry_after_ms: *retry_after_ms,
                    ..TurnSpec::default()
                }),
                // Started calls, in the order they started: the order a replay calls them in.
                Entry::ToolCall { call, .. } if call.name != terminus_kernel::WRITE_TODOS => {
                    let mut tools = lock(&recorder.tools);
                    let log = tools.entry(call.name.to_string()).or_default();
                    log.results.push(None);
                    slots.insert(&call.id, (call.name.to_string(), log.results.len() - 1));
                }
                // A result as it arrived, or as the batch gave it (a call in doubt after the
                // crash was answered by the runtime, not run again).
                Entry::ToolResult(result) => recorder.fill(&slots, result),
                Entry::ToolResults { results } => {
                    for result in results {
                        recorder.fill(&slots, result);
                    }
                }
                Entry::Started { call_id, job } => {
                    jobs.insert(call_id.as_str(), job);
                }
                Entry::Verdict(v) => {
                    if let Some(verdicts) = lock(&recorder.verdicts).as_mut() {
                        verdicts.push(VerdictSpec {
                            complete: v.complete,
                            missing: v.missing.clone(),
                        });
                    }
                }
                _ => {}
            }
        }
        // The job each call started goes with its result (its key sorts after the result's).
        for (call_id, job) in jobs {
            if let Some((name, slot)) = slots.get(call_id)
                && let Some(log) = lock(&recorder.tools).get_mut(name)
                && let Some(Some(cell)) = log.results.get_mut(*slot)
            {
                cell.job = Some(job.clone());
            }
        }
        recorder
    }

    /// Puts `result` in its call's slot, unless the slot has one already.
    fn fill(&self, slots: &BTreeMap<&str, (String, usize)>, result: &ToolResult) {
        let Some((name, slot)) = slots.get(result.call_id.as_str()) else {
            return;
        };
        if let Some(log) = lock(&self.tools).get_mut(name)
            && let Some(cell @ None) = log.results.get_mut(*slot)
        {
            *cell = Some(result_spec(&result.outcome));
        }
    }

    /// The recording as a scenario file.
    pub(crate) fn scenario(
        &self,
        task: &str,
        policy: &terminus_kernel::Policy,
        context: Option<ContextSpec>,
        system_prompt: Option<String>,
        description: String,
    ) -> ScenarioFile {
        let tools = lock(&self.tools)
            .iter()
            .map(|(name, log)| {
                let script = ToolScript {
                    // A call that never answered and was not cancelled was dropped by the
                    // runtime's tool timeout, which answered it `timeout`: the replay's tool
                    // answers the same.
                    results: log
                        .results
                        .iter()
                        .map(|r| {
                            r.clone().unwrap_or_else(|| ResultSpec {
                                error: Some(terminus_kernel::ToolErrorKind::Timeout),
                                message: Some("no result within the tool timeout".into()),
                                ..ResultSpec::default()
                            })
                        })
                        .collect(),
                    repeat: Repeat::None,
                    idempotent: log.idempotent,
                    approval: log.hold == Some(terminus_kernel::Hold::Approval),
                    deferred: log.hold == Some(terminus_kernel::Hold::Deferred),
                    description: Some(log.description.clone()),
                    parameters: Some(log.parameters.clone()),
                };
                (name.clone(), script)
            })
            .collect();
        // A model verifier under a policy that never asks it (verify_completion off) gave no
        // verdict, and a scenario refuses a verifier script it would never use.
        let verifier = lock(&self.verdicts)
            .clone()
            .filter(|verdicts| !verdicts.is_empty() || policy.verify_completion)
            .map(|verdicts| VerifierScript {
                verdicts,
                repeat: Repeat::None,
            });
        ScenarioFile {
            name: Some("agent-recording".into()),
            description: Some(description),
            task: task.to_owned(),
            system_prompt,
            policy: policy.clone(),
            scale: None,
            model: ModelScript {
                turns: lock(&self.turns).clone(),
                repeat: Repeat::None,
            },
            tools,
            verifier,
            context,
            cancel_after_ms: None,
            expect: None,
        }
    }
}

/// The recording of each call, as it is made: an agent turn (a fault stops the run and feeds
/// nothing to the kernel, so it is not kept), a tool's result in the slot its call took when the
/// runtime called it (calls answer in any order), a verdict.
impl Layer for Recorder {
    fn around<'a>(&'a self, call: Call<'a>, next: Next<'a>) -> BoxFuture<'a, Answer> {
        match &call {
            Call::Model(request) => {
                // A checkpoint written for the agent is a reply of the model like a turn: a
                // replay's scripted model gives it back at the same place.
                let turn = matches!(
                    request.purpose,
                    Purpose::Turn { .. } | Purpose::Checkpoint { .. }
                );
                let answer = next.run(call);
                Box::pin(async move {
                    // A call the run drops unanswered (the kill switch, the deadline) is kept as
                    // a `cancelled` turn; [`Recorder::ended`] keeps it only for a cancelled run.
                    let mut dropped = Dropped {
                        recorder: self,
                        armed: turn,
                    };
                    let answer = answer.await;
                    dropped.armed = false;
                    if turn
                        && let Answer::Model(answer) = &answer
                        && let Some(spec) = model_spec(answer)
                    {
                        lock(&self.turns).push(spec);
                    }
                    answer
                })
            }
            Call::Tool { name, .. } if *name != terminus_kernel::WRITE_TODOS => {
                let name: &'a str = name;
                let slot = {
                    let mut tools = lock(&self.tools);
                    let log = tools.entry(name.to_owned()).or_default();
                    log.results.push(None);
                    log.results.len() - 1
                };
                let answer = next.run(call);
                Box::pin(async move {
                    // A call the host cancels is dropped unanswered: kept as `cancelled`.
                    let mut dropped = DroppedCall {
                        recorder: self,
                        name,
                        slot,
                        armed: true,
                    };
                    let answer = answer.await;
                    dropped.armed = false;
                    if let Answer::Tool(Ok(outcome)) = &answer
                        && let Some(log) = lock(&self.tools).get_mut(name)
                        && let Some(cell) = log.results.get_mut(slot)
                    {
                        *cell = Some(ResultSpec {
                            job: terminus_runtime::jobs::current(),
                            ..result_spec(outcome)
                        });
                    }
                    answer
                })
            }
            Call::Tool { .. } => next.run(call),
            Call::Verify(_) => {
                let answer = next.run(call);
                Box::pin(async move {
                    let answer = answer.await;
                    if let Answer::Verdict(Ok(v)) = &answer
                        && let Some(verdicts) = lock(&self.verdicts).as_mut()
                    {
                        verdicts.push(VerdictSpec {
                            complete: v.complete,
                            missing: v.missing.clone(),
                        });
                    }
                    answer
                })
            }
        }
    }
}

/// Records a `cancelled` turn if the model call it guards is dropped before it answers.
struct Dropped<'a> {
    recorder: &'a Recorder,
    armed: bool,
}

impl Drop for Dropped<'_> {
    fn drop(&mut self) {
        if self.armed {
            lock(&self.recorder.turns).push(TurnSpec {
                cancelled: Some(true),
                ..TurnSpec::default()
            });
        }
    }
}

/// Records a `cancelled` result in its slot if the tool call it guards is dropped unanswered
/// after the host pulled the kill switch (a call the tool timeout drops keeps an empty slot).
struct DroppedCall<'a> {
    recorder: &'a Recorder,
    name: &'a str,
    slot: usize,
    armed: bool,
}

impl Drop for DroppedCall<'_> {
    fn drop(&mut self) {
        let cancelled = self.recorder.kill.get().is_some_and(KillSwitch::is_killed);
        if self.armed
            && cancelled
            && let Some(log) = lock(&self.recorder.tools).get_mut(self.name)
            && let Some(cell @ None) = log.results.get_mut(self.slot)
        {
            *cell = Some(ResultSpec {
                cancelled: Some(true),
                // Dropped inside the call's scope: the job it started, if any.
                job: terminus_runtime::jobs::current(),
                ..ResultSpec::default()
            });
        }
    }
}

/// A changing tool list, recorded: the tools it answers are registered as the first ones were
/// (the layer around them is put on by [`layer::tools`]).
struct RecordingSource {
    inner: Arc<dyn ToolSource>,
    recorder: Arc<Recorder>,
}

#[async_trait]
impl ToolSource for RecordingSource {
    async fn refresh(&self) -> Option<ToolSet> {
        let tools = self.inner.refresh().await?;
        self.recorder.register(&tools);
        Some(tools)
    }
}

/// A model turn's answer as a scripted turn; none for a fault.
fn model_spec(answer: &Result<ModelTurn, ModelError>) -> Option<TurnSpec> {
    match answer {
        Ok(turn) => Some(turn_spec(turn)),
        Err(ModelError::Failure(f)) => Some(TurnSpec {
            error: Some(f.kind),
            retry_after_ms: f.retry_after_ms,
            message: Some(f.message.clone()),
            ..TurnSpec::default()
        }),
        Err(ModelError::Fault(_)) => None,
    }
}

fn turn_spec(turn: &ModelTurn) -> TurnSpec {
    TurnSpec {
        text: Some(turn.text.clone()),
        tool_calls: (!turn.tool_calls.is_empty()).then(|| {
            turn.tool_calls
                .iter()
                .map(|c| CallSpec {
                    name: c.name.to_string(),
                    arguments: c.arguments.clone().into(),
                    id: (!c.id.is_empty()).then(|| c.id.to_string()),
                })
                .collect()
        }),
        needs_more_work: turn.needs_more_work,
        usage: turn.usage,
        finish: (turn.finish != Finish::Stop).then_some(turn.finish),
        reasoning: turn.reasoning.then_some(true),
        ..TurnSpec::default()
    }
}

fn result_spec(outcome: &ToolOutcome) -> ResultSpec {
    match outcome {
        ToolOutcome::Ok(value) => ResultSpec {
            ok: Some(value.value().clone()),
            ..ResultSpec::default()
        },
        ToolOutcome::Error { kind, message } => ResultSpec {
            error: Some(*kind),
            message: Some(message.clone()),
            ..ResultSpec::default()
        },
    }
}
