//! The model action: prepare the view, call the model (racing the kill switch and the deadline),
//! and turn its answer into an event.

use super::{Driver, EventAndDetail, spans};
use crate::context::state_notice;
use crate::error::RunError;
use crate::fault::Fault;
use crate::meters;
use crate::model::{ModelError, ModelFailure, ModelRequest, Purpose};
use crate::observer::Observer;
use std::time::Duration;
use terminus_kernel::{Event, ModelCall, ModelErrorKind, ModelTurn, textcall};
use tokio::time::{Instant, sleep, timeout};
use tracing::Instrument as _;

impl Driver {
    pub(super) async fn model_step(
        &mut self,
        call: ModelCall,
        observer: &mut Option<Box<dyn Observer>>,
    ) -> Result<EventAndDetail, RunError> {
        self.model_calls = self.model_calls.saturating_add(1);
        let number = self.model_calls;
        // A source's new tool list is taken here, between tool batches: the model is offered
        // it, and a call of a tool that is gone is answered `not_found`.
        if let Some(mut change) = self.env.tools.refresh().await {
            change.model_call = number;
            self.env.specs = self.env.tools.specs();
            spans::tools_changed(&change);
            if let Some(observer) = observer.as_mut() {
                observer.on_tools_changed(&change);
            }
            self.tools_changed.push(change);
        }
        if let Some(window) = &mut self.window {
            let machine = &self.machine;
            let prepared = window.prepare(self.conversation.messages(), || state_notice(machine));
            // What the window did is said before the call is made: the system prompt's cut
            // (at the first call), and a prune of this call's view.
            if let Some(cut) = window.take_system_cut() {
                spans::system_cut(&cut);
                meters::system_cut();
                if let Some(observer) = observer.as_mut() {
                    observer.on_system_cut(&cut);
                }
            }
            if let Some(prune) = window.take_prune(number, machine.stats().steps) {
                spans::context_pruned(&prune);
                meters::context_pruned();
                if let Some(observer) = observer.as_mut() {
                    observer.on_prune(&prune);
                }
                self.prunes.push(prune);
            }
            if let Err(e) = prepared {
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
        let tools_enabled = call.tools;
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
                        call.id = format!("call-{number}-{i}").into();
                    }
                }
                // A tool call the model wrote in its text: run (an offered tool, object
                // arguments) or left for the kernel to nudge, before the turn is journaled.
                let specs = if tools_enabled {
                    &self.env.specs[..]
                } else {
                    &[]
                };
                let offered: Vec<&str> = specs.iter().map(|s| s.name.as_str()).collect();
                // Values a format wrote as text (XML parameters) typed by the tool's schema.
                let schemas: Vec<(&str, &serde_json::Value)> = specs
                    .iter()
                    .map(|s| (s.name.as_str(), &s.parameters))
                    .collect();
                let mode = self.machine.policy().text_tool_calls;
                let ids = format!("text-{number}-");
                if let Some(recovery) =
                    textcall::recover_typed(&mut turn, Some(&offered), &schemas, mode, &ids)
                {
                    spans::text_tool_calls(number, &recovery);
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

    pub(super) async fn call_model(
        &self,
        call: ModelCall,
        number: u32,
    ) -> Result<Result<ModelTurn, ModelFailure>, Fault> {
        if call.delay_ms > 0 {
            // Backoff before a retry: a real sleep, so the deadline and the kill switch apply.
            sleep(Duration::from_millis(call.delay_ms)).await;
        }
        let messages = match &self.window {
            Some(window) => window.messages(self.conversation.messages()),
            None => self.conversation.messages(),
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
        let mut pending = Pending {
            span: spans::chat(&self.env, number, call.reason, messages),
            started: Instant::now(),
            outcome: None,
        };
        let answer = self.env.model.complete(request);
        let answer = async {
            match self.env.config.model_timeout {
                None => answer.await,
                Some(limit) => timeout(limit, answer).await.unwrap_or_else(|_| {
                    Err(ModelError::Failure(ModelFailure::new(
                        ModelErrorKind::Timeout,
                        format!("no answer within {} ms", limit.as_millis()),
                    )))
                }),
            }
        }
        .instrument(pending.span.clone())
        .await;
        match answer {
            Ok(turn) => {
                spans::end_chat(&pending.span, self.env.config.capture_content, &turn);
                pending.outcome = Some("ok");
                Ok(Ok(turn))
            }
            Err(ModelError::Failure(failure)) => {
                spans::fail(&pending.span, spans::model_error(failure.kind));
                pending.outcome = Some("error");
                Ok(Err(failure))
            }
            Err(ModelError::Fault(fault)) => {
                spans::fail(&pending.span, "fault");
                pending.outcome = Some("error");
                Err(fault)
            }
        }
    }
}

/// A model call under way: its span, and its latency for the metric. A call the kill switch or
/// the deadline interrupted is dropped here unanswered and recorded as `interrupted`.
struct Pending {
    span: tracing::Span,
    started: Instant,
    outcome: Option<&'static str>,
}

impl Drop for Pending {
    fn drop(&mut self) {
        let outcome = self.outcome.unwrap_or_else(|| {
            spans::fail(&self.span, "interrupted");
            "interrupted"
        });
        meters::model_call(outcome, self.started.elapsed());
    }
}
