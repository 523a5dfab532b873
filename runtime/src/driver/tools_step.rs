//! The tools action: run the executed calls of a batch, concurrently up to the limit, journaling
//! each result as it arrives; calls a resumed journal settled are not run again.

use super::{Driver, EventAndDetail, spans};
use crate::asking::{self, Reply};
use crate::config::InDoubt;
use crate::error::RunError;
use crate::jobs::{self, JobStatus};
use crate::observer::Observer;
use crate::suspend::{PendingCall, Suspended};
use futures_util::StreamExt as _;
use terminus_kernel::{
    CallState, Decision, Entry, Event, HeldCall, Hold, Key, Question, Record, ToolBatch,
    ToolErrorKind, ToolOutcome, ToolResult, executed,
};
use tokio::time::timeout;
use tracing::Instrument as _;

impl Driver {
    pub(super) async fn tools_step(
        &mut self,
        batch: ToolBatch,
        observer: &mut Option<Box<dyn Observer>>,
    ) -> Result<EventAndDetail, RunError> {
        // The intents were journaled with the step that issued the batch (write-ahead); the
        // results go to the same checkpoint, one slot per executed call.
        let checkpoint = self.machine.stats().steps;
        let calls = u32::try_from(executed(&batch).count()).unwrap_or(u32::MAX);
        let resumed = self.resumed_calls.take();
        // Held calls: for a batch replayed from the journal, as the journal has them (with their
        // decisions); else as the tool set holds them (undecided).
        let journaled = self.resumed_held.take();
        let replayed = journaled.is_some();
        let held: Vec<Option<HeldCall>> = match journaled {
            Some(held) => held,
            None => executed(&batch)
                .map(|call| {
                    self.env.tools.held(&call.name).map(|hold| HeldCall {
                        call_id: call.id.clone(),
                        hold,
                        decision: None,
                        question: None,
                    })
                })
                .collect(),
        };
        if replayed && held.iter().flatten().any(|h| h.decision.is_none()) {
            // Resumed with a call still undecided: suspended again at once, nothing run.
            return Err(self.suspend(&batch, &held).await);
        }
        if let Some(states) = &resumed
            && self.env.config.in_doubt == InDoubt::Stop
            && let Some((call, _)) = executed(&batch)
                .zip(states)
                .find(|(_, s)| matches!(s, CallState::InDoubt { idempotent: false }))
        {
            return Err(RunError::InDoubt {
                call: call.id.to_string(),
                tool: call.name.to_string(),
            });
        }
        // What the calls' jobs say while they run goes to the observer as it comes.
        let (said, mut saying) = tokio::sync::mpsc::unbounded_channel::<JobStatus>();
        let running = self.run_tools(&batch, checkpoint, calls, resumed, &held, &said);
        let shown = async {
            tokio::pin!(running);
            loop {
                tokio::select! {
                    out = &mut running => break out,
                    Some(status) = saying.recv() => {
                        spans::job(&status);
                        if let Some(observer) = observer.as_mut() {
                            observer.on_job(&status);
                        }
                    }
                }
            }
        };
        let (raced, renewal) = self.race(shown).await?;
        self.renewal = renewal;
        let outcomes = match self.interrupted(raced) {
            Ok(out) => out?,
            Err(event) => return Ok(event),
        };
        if outcomes.iter().any(|ran| ran.outcome.is_none()) {
            // Every call that could run has run, its result journaled (or carried here): wait
            // for the rest, and for the calls that asked a question nobody could answer.
            let mut held = held;
            for (j, ran) in outcomes.into_iter().enumerate() {
                self.carry.extend(ran.deferred);
                if let (Some(question), Some(call), Some(slot)) =
                    (ran.asked, executed(&batch).nth(j), held.get_mut(j))
                {
                    *slot = Some(HeldCall {
                        call_id: call.id.clone(),
                        hold: Hold::Elicitation,
                        decision: None,
                        question: Some(question),
                    });
                }
            }
            return Err(self.suspend(&batch, &held).await);
        }
        let mut outcomes = outcomes.into_iter();
        let mut results = Vec::with_capacity(batch.calls.len());
        for call in executed(&batch) {
            let Some(Ran {
                outcome: Some(outcome),
                deferred,
                ..
            }) = outcomes.next()
            else {
                return Err(RunError::Internal("a tool call has no outcome".into()));
            };
            // In batch order, whatever order the results arrived in.
            self.carry.extend(deferred);
            results.push(ToolResult {
                call_id: call.id.clone(),
                name: call.name.clone(),
                outcome,
            });
        }
        // Kept until the results are fed: the conversation applies them against it.
        self.batch = Some(batch);
        Ok((Event::ToolResults(results), None))
    }

    /// Suspends the run until the undecided calls of `held` are decided: journals what it
    /// carries, gives its claim up in the same commit as the suspension, and returns the
    /// [`RunError::Suspended`] that lists them.
    async fn suspend(&mut self, batch: &ToolBatch, held: &[Option<HeldCall>]) -> RunError {
        let pending: Vec<PendingCall> = executed(batch)
            .zip(held)
            .filter_map(|(call, held)| {
                let held = held.as_ref().filter(|h| h.decision.is_none())?;
                Some(PendingCall {
                    call_id: call.id.to_string(),
                    name: call.name.to_string(),
                    arguments: call.arguments.value().clone(),
                    kind: held.hold,
                    question: held.question.clone(),
                })
            })
            .collect();
        let carried = std::mem::take(&mut self.carry);
        if !carried.is_empty()
            && let Err(e) = self.put_all(carried).await
        {
            return e;
        }
        let waiting = u32::try_from(pending.len()).unwrap_or(u32::MAX);
        if let Err(e) = self
            .env
            .store
            .suspend(&self.lease, waiting, super::unix_ms())
            .await
        {
            return e.into();
        }
        let stats = self.machine.stats();
        RunError::Suspended(Box::new(Suspended::new(
            self.env.execution.clone(),
            pending,
            &stats,
        )))
    }

    /// Runs the executed calls of `batch`, at most `max_concurrent_tools` at a time, journals
    /// each result as it arrives (executed call `j` of `calls` under
    /// `Key::result(checkpoint, calls, j)`, so a crash loses no finished call), and returns the
    /// outcomes in batch order (so the event does not depend on timing). The result of a lone
    /// call, or of calls that may all run again, is returned instead of journaled, to go with
    /// the step it feeds. A held call (`held`) runs only once approved (its intent journaled
    /// first), takes its decision's result when denied or answered, and has no outcome
    /// (`None`) while undecided. A call that asks a question nobody can answer while it runs
    /// ([`asking`]) has no outcome either: its result is dropped and its hold journaled (under
    /// `Key::held`), and once decided it runs again with the reply (its second intent under
    /// `Key::rerun`).
    pub(super) async fn run_tools(
        &self,
        batch: &ToolBatch,
        checkpoint: u32,
        calls_in_batch: u32,
        resumed: Option<Vec<CallState>>,
        held: &[Option<HeldCall>],
        said: &tokio::sync::mpsc::UnboundedSender<JobStatus>,
    ) -> Result<Vec<Ran>, RunError> {
        let limit = self.env.config.max_concurrent_tools.max(1);
        let mut resumed = resumed.unwrap_or_default().into_iter();
        // A batch of one call: its result is journaled in the same transaction as the step it
        // feeds, which is as soon as the result is known, one commit fewer; so are the results
        // of calls that may all run again. Not with a held call: a suspension keeps every
        // result that came.
        let defer =
            (calls_in_batch == 1 || self.may_rerun(batch)) && held.iter().all(Option::is_none);
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
                let hold = held.get(j).and_then(Option::as_ref);
                let decision = hold.map(|h| &h.decision);
                let asked_before = hold.is_some_and(|h| h.hold == Hold::Elicitation);
                let jj = u32::try_from(j).unwrap_or(u32::MAX);
                // An approved call not yet started gets its intent now, before it runs; a call
                // held after it ran, once decided, its second intent.
                let intent = match (&state, decision) {
                    (CallState::NotStarted, Some(Some(_))) if asked_before => {
                        Some(Key::rerun(checkpoint, calls_in_batch, jj))
                    }
                    (CallState::NotStarted, Some(Some(decision))) if decision.runs() => {
                        Some(Key::intent(checkpoint, jj))
                    }
                    _ => None,
                };
                // The reply the second run of a call held after it ran gives its question.
                let reply = hold
                    .filter(|_| asked_before)
                    .and_then(|h| Some((h.question.clone()?, Reply::of(h.decision.as_ref()?))));
                // A job the call started before the run stopped: waited for, not started again.
                let job = match &state {
                    CallState::Started { job, .. } => Some(job.clone()),
                    _ => None,
                };
                let known = match state {
                    CallState::Done(result) => Some(result.outcome),
                    CallState::InDoubt { idempotent: false } => Some(in_doubt_outcome(&call.name)),
                    CallState::Started { .. } => None,
                    CallState::NotStarted | CallState::InDoubt { idempotent: true } => {
                        match decision {
                            // Held after it ran: it runs again, whatever the decision.
                            Some(Some(_)) if asked_before => None,
                            Some(Some(decision)) => decision.outcome(&call.name),
                            _ => None,
                        }
                    }
                };
                let undecided = known.is_none() && matches!(decision, Some(None));
                // Arguments must be a JSON object (every provider's tool calls and every tool
                // schema say so); anything else, such as the text of arguments a model sent as
                // broken JSON, is answered `invalid_arguments` without calling the tool.
                // An approval with edited arguments runs the call with the person's (its intent
                // says so); the held entry keeps the model's.
                let edited = decision.and_then(Option::as_ref).and_then(Decision::edited);
                let malformed = known.is_none()
                    && !edited.map_or_else(|| call.arguments.is_object(), |a| a.is_object());
                let started = match known {
                    Some(_) => None,
                    None if malformed || undecided => None,
                    None => self.env.tools.get(&call.name).map(|tool| {
                        tool.call(
                            edited.map_or_else(|| call.arguments.value().clone(), Clone::clone),
                        )
                    }),
                };
                let name = call.name.as_str();
                let span = spans::tool(name, &call.id);
                let key = Key::result(
                    checkpoint,
                    calls_in_batch,
                    u32::try_from(j).unwrap_or(u32::MAX),
                );
                let idempotent = self.env.tools.get(name).is_none_or(|t| t.idempotent());
                async move {
                    if undecided {
                        return Ok::<_, RunError>(Ran::undecided(i));
                    }
                    if let Some(outcome) = known {
                        // Journaled already (done), answered as in doubt, or decided without
                        // running: never run.
                        let result = ToolResult {
                            call_id: call.id.clone(),
                            name: call.name.clone(),
                            outcome: outcome.clone(),
                        };
                        let deferred = self.put_result(key, result, defer).await?;
                        return Ok::<_, RunError>(Ran::done(i, outcome, deferred));
                    }
                    if let Some(intent) = intent {
                        let mut call = call.clone();
                        if let Some(arguments) = edited {
                            call.arguments = arguments.clone().into();
                        }
                        self.put(Record {
                            key: intent,
                            entry: Entry::ToolCall { call, idempotent },
                        })
                        .await?;
                    }
                    let outcome = match started {
                        None if malformed => Ok(ToolOutcome::Error {
                            kind: ToolErrorKind::InvalidArguments,
                            message: crate::tool::invalid_arguments_message(&call.arguments),
                        }),
                        None => Ok(ToolOutcome::Error {
                            kind: ToolErrorKind::NotFound,
                            message: format!("there is no tool named `{name}`"),
                        }),
                        Some(running) => {
                            let journal =
                                |job| self.put_job(checkpoint, calls_in_batch, jj, call, job);
                            let asking = asking::scope(reply, async {
                                match tool_timeout {
                                    None => running.await,
                                    Some(limit) => {
                                        timeout(limit, running).await.unwrap_or_else(|_| {
                                            Ok(ToolOutcome::Error {
                                                kind: ToolErrorKind::Timeout,
                                                message: format!(
                                                    "no result within {} ms",
                                                    limit.as_millis()
                                                ),
                                            })
                                        })
                                    }
                                }
                            });
                            let say = |job: &serde_json::Value, status| {
                                let status =
                                    JobStatus::new(&call.name, &call.id, job.clone(), status);
                                let _ = said.send(status);
                            };
                            let ((outcome, asked), lost) =
                                jobs::scope(job, journal, say, asking).await;
                            if let Some(why) = lost {
                                // Its job is gone with whatever it did: in doubt, not run again.
                                let outcome = lost_job_outcome(&call.name, &why);
                                return self.finished(key, call, outcome, defer, i).await;
                            }
                            // A first run that asked a question nobody could answer had no
                            // effect: its result is dropped, and the call is held for the
                            // person (a call is held so once: a second run's question was
                            // answered or declined by the tool).
                            if let (Some(question), None) = (asked, hold) {
                                self.put(Record {
                                    key: Key::held(checkpoint, calls_in_batch, jj),
                                    entry: Entry::Held {
                                        call: call.clone(),
                                        hold: Hold::Elicitation,
                                        question: Some(question.clone()),
                                    },
                                })
                                .await?;
                                return Ok(Ran::asked(i, question));
                            }
                            outcome
                        }
                    };
                    self.finished(key, call, outcome?, defer, i).await
                }
                .instrument(span)
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
        let mut out: Vec<Ran> = Vec::with_capacity(calls.len());
        let mut running = futures_util::stream::iter(calls).buffer_unordered(limit);
        while let Some(result) = running.next().await {
            out.push(result?);
        }
        out.sort_unstable_by_key(|ran| ran.index);
        Ok(out)
    }
}

impl Driver {
    /// Journals the job executed call `j` of `calls` started ([`jobs::started`]); whether it is.
    async fn put_job(
        &self,
        checkpoint: u32,
        calls: u32,
        j: u32,
        call: &terminus_kernel::ToolCall,
        job: serde_json::Value,
    ) -> bool {
        self.put(Record {
            key: Key::started(checkpoint, calls, j),
            entry: Entry::Started {
                call_id: call.id.clone(),
                job,
            },
        })
        .await
        .is_ok()
    }

    /// Ends executed call `index` of the batch with `outcome`: its span, and its result
    /// journaled now or (`defer`) with the step it feeds.
    async fn finished(
        &self,
        key: Key,
        call: &terminus_kernel::ToolCall,
        outcome: ToolOutcome,
        defer: bool,
        index: usize,
    ) -> Result<Ran, RunError> {
        spans::end_tool(&tracing::Span::current(), &outcome);
        let result = ToolResult {
            call_id: call.id.clone(),
            name: call.name.clone(),
            outcome: outcome.clone(),
        };
        let deferred = self.put_result(key, result, defer).await?;
        Ok(Ran::done(index, outcome, deferred))
    }
}

/// An executed call of a batch as [`Driver::run_tools`] leaves it.
pub(super) struct Ran {
    /// Its index in the batch.
    index: usize,
    /// Its result; `None` while it waits for a decision.
    outcome: Option<ToolOutcome>,
    /// Its result record when it goes with the step it feeds instead of now.
    deferred: Option<Record>,
    /// The question it asked that nobody could answer (its hold is journaled).
    asked: Option<Question>,
}

impl Ran {
    fn done(index: usize, outcome: ToolOutcome, deferred: Option<Record>) -> Ran {
        Ran {
            index,
            outcome: Some(outcome),
            deferred,
            asked: None,
        }
    }

    fn undecided(index: usize) -> Ran {
        Ran {
            index,
            outcome: None,
            deferred: None,
            asked: None,
        }
    }

    fn asked(index: usize, question: Question) -> Ran {
        Ran {
            index,
            outcome: None,
            deferred: None,
            asked: Some(question),
        }
    }
}

/// The answer to a call of a non-idempotent tool that was started before the run stopped and has
/// no journaled result: it is not run again, and the model is told why.
pub fn in_doubt_outcome(tool: &str) -> ToolOutcome {
    ToolOutcome::Error {
        kind: ToolErrorKind::Failed,
        message: format!(
            "in doubt: the run stopped while this call of `{tool}` was running, and `{tool}` is \
             not idempotent, so it was not run again. Its effect may or may not have happened: \
             check before calling it again."
        ),
    }
}

/// The answer to a call whose job (an MCP task) was started before the run stopped and is no
/// longer known to whoever ran it (`why`, in the tool's words): it is not started again.
pub fn lost_job_outcome(tool: &str, why: &str) -> ToolOutcome {
    ToolOutcome::Error {
        kind: ToolErrorKind::Failed,
        message: format!(
            "in doubt: the run stopped while this call of `{tool}` waited for the job it started, \
             and the job can no longer be found ({why}), so it was not started again. It may or \
             may not have finished: check before calling `{tool}` again."
        ),
    }
}
