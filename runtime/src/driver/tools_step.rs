//! The tools action: run the executed calls of a batch, concurrently up to the limit, journaling
//! each result as it arrives; calls a resumed journal settled are not run again.

use super::{Driver, EventAndDetail, spans};
use crate::config::InDoubt;
use crate::error::RunError;
use crate::suspend::{PendingCall, Suspended};
use futures_util::StreamExt as _;
use terminus_kernel::{
    CallState, Decision, Entry, Event, HeldCall, Key, Record, ToolBatch, ToolErrorKind,
    ToolOutcome, ToolResult, executed,
};
use tokio::time::timeout;
use tracing::Instrument as _;

impl Driver {
    pub(super) async fn tools_step(
        &mut self,
        batch: ToolBatch,
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
        let (raced, renewal) = self
            .race(self.run_tools(&batch, checkpoint, calls, resumed, &held))
            .await?;
        self.renewal = renewal;
        let outcomes = match self.interrupted(raced) {
            Ok(out) => out?,
            Err(event) => return Ok(event),
        };
        if outcomes.iter().any(|(_, outcome, _)| outcome.is_none()) {
            // Every call that could run has run, its result journaled: wait for the rest.
            return Err(self.suspend(&batch, &held).await);
        }
        let mut outcomes = outcomes.into_iter();
        let mut results = Vec::with_capacity(batch.calls.len());
        for call in executed(&batch) {
            let Some((_, Some(outcome), deferred)) = outcomes.next() else {
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
    /// (`None`) while undecided.
    pub(super) async fn run_tools(
        &self,
        batch: &ToolBatch,
        checkpoint: u32,
        calls_in_batch: u32,
        resumed: Option<Vec<CallState>>,
        held: &[Option<HeldCall>],
    ) -> Result<Vec<(usize, Option<ToolOutcome>, Option<Record>)>, RunError> {
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
                let decision = held.get(j).and_then(Option::as_ref).map(|h| &h.decision);
                // An approved call not yet started gets its intent now, before it runs.
                let intent = matches!(
                    (&state, decision),
                    (CallState::NotStarted, Some(Some(Decision::Approve)))
                );
                let known = match state {
                    CallState::Done(result) => Some(result.outcome),
                    CallState::InDoubt { idempotent: false } => Some(in_doubt_outcome(&call.name)),
                    CallState::NotStarted | CallState::InDoubt { idempotent: true } => {
                        match decision {
                            Some(Some(decision)) => decision.outcome(&call.name),
                            _ => None,
                        }
                    }
                };
                let undecided = known.is_none() && matches!(decision, Some(None));
                // Arguments must be a JSON object (every provider's tool calls and every tool
                // schema say so); anything else, such as the text of arguments a model sent as
                // broken JSON, is answered `invalid_arguments` without calling the tool.
                let malformed = known.is_none() && !call.arguments.is_object();
                let started = match known {
                    Some(_) => None,
                    None if malformed || undecided => None,
                    None => self
                        .env
                        .tools
                        .get(&call.name)
                        .map(|tool| tool.call(call.arguments.value().clone())),
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
                        return Ok::<_, RunError>((i, None, None));
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
                        return Ok::<_, RunError>((i, Some(outcome), deferred));
                    }
                    if intent {
                        let j = u32::try_from(j).unwrap_or(u32::MAX);
                        self.put(Record {
                            key: Key::intent(checkpoint, j),
                            entry: Entry::ToolCall {
                                call: call.clone(),
                                idempotent,
                            },
                        })
                        .await?;
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
                    spans::end_tool(&tracing::Span::current(), &outcome);
                    let result = ToolResult {
                        call_id: call.id.clone(),
                        name: call.name.clone(),
                        outcome: outcome.clone(),
                    };
                    let deferred = self.put_result(key, result, defer).await?;
                    Ok::<_, RunError>((i, Some(outcome), deferred))
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
        let mut out: Vec<(usize, Option<ToolOutcome>, Option<Record>)> =
            Vec::with_capacity(calls.len());
        let mut running = futures_util::stream::iter(calls).buffer_unordered(limit);
        while let Some(result) = running.next().await {
            out.push(result?);
        }
        out.sort_unstable_by_key(|(i, _, _)| *i);
        Ok(out)
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
