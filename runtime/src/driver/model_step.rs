//! The model action: prepare the view, call the model (racing the kill switch and the deadline),
//! and turn its answer into an event.

use super::{Driver, EventAndDetail};
use crate::context::state_notice;
use crate::error::RunError;
use crate::fault::Fault;
use crate::model::{ModelError, ModelFailure, ModelRequest, Purpose};
use std::time::Duration;
use terminus_kernel::{Event, ModelCall, ModelErrorKind, ModelTurn};
use tokio::time::{sleep, timeout};

impl Driver {
    pub(super) async fn model_step(&mut self, call: ModelCall) -> Result<EventAndDetail, RunError> {
        self.model_calls = self.model_calls.saturating_add(1);
        let number = self.model_calls;
        if let Some(window) = &mut self.window {
            let machine = &self.machine;
            if let Err(e) = window.prepare(self.conversation.messages(), || state_notice(machine)) {
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
}
