//! The verify action: ask the verifier (or the rule verifier) about a completion claim.

use super::{Driver, EventAndDetail, spans};
use crate::error::RunError;
use crate::fault::{Fault, FaultKind};
use crate::message::Transcript;
use crate::verifier::{RuleVerifier, Verification, Verifier};
use std::time::Duration;
use terminus_kernel::{Event, Verdict, VerifyRequest, backoff_ms};
use tokio::time::{sleep, timeout};
use tracing::Instrument as _;

impl Driver {
    pub(super) async fn verify_step(
        &mut self,
        request: VerifyRequest,
    ) -> Result<EventAndDetail, RunError> {
        let span = spans::verify();
        let (raced, renewal) = self
            .race(self.verify(&request).instrument(span.clone()))
            .await?;
        self.renewal = renewal;
        match self.interrupted(raced) {
            Ok(Ok(verdict)) => {
                spans::end_verify(&span, &verdict);
                Ok((Event::Verdict(verdict), None))
            }
            Ok(Err(fault)) => {
                spans::fail(&span, "fault");
                Err(fault.into())
            }
            Err(event) => {
                spans::fail(&span, "interrupted");
                Ok(event)
            }
        }
    }

    /// Asks the verifier, again after a transient fault (its model rate limited, failing or
    /// timing out), with the policy's backoff, up to `max_model_retries` retries, as the kernel
    /// does for the agent's own model calls.
    pub(super) async fn verify(&self, request: &VerifyRequest) -> Result<Verdict, Fault> {
        let policy = self.machine.policy();
        let mut attempt = 0u32;
        loop {
            match self.verify_once(request).await {
                Err(fault) if fault.kind == FaultKind::Transient => {
                    if attempt >= policy.max_model_retries {
                        return Err(Fault::internal(format!(
                            "{} (after {attempt} retries)",
                            fault.message
                        )));
                    }
                    attempt += 1;
                    let delay = backoff_ms(
                        policy.retry_base_ms,
                        policy.retry_max_ms,
                        policy.seed,
                        attempt,
                        None,
                    );
                    sleep(Duration::from_millis(delay)).await;
                }
                answer => return answer,
            }
        }
    }

    async fn verify_once(&self, request: &VerifyRequest) -> Result<Verdict, Fault> {
        // The output schema first: a claim that does not meet it is rejected with the first
        // error, and a schema without `verify_completion` needs nothing more.
        let policy = self.machine.policy();
        if let Some(schema) = &policy.output_schema {
            match crate::output::check_claim(schema, &request.claim).map_err(Fault::internal)? {
                Err(rejected) => return Ok(rejected),
                Ok(_) if !policy.verify_completion => {
                    return Ok(Verdict {
                        complete: true,
                        missing: Vec::new(),
                    });
                }
                Ok(_) => {}
            }
        }
        let verification = Verification {
            task: &self.env.task,
            claim: &request.claim,
            todos: &request.todos,
            ledger: self.machine.ledger(),
            completion_requires: &self.machine.policy().completion_requires,
            transcript: Transcript::new(self.conversation.messages()),
        };
        let verifier: &dyn Verifier = match &self.env.verifier {
            Some(v) => v.as_ref(),
            None => &RuleVerifier,
        };
        let verdict = verifier.verify(verification);
        match self.env.config.verifier_timeout {
            None => verdict.await,
            Some(limit) => timeout(limit, verdict).await.unwrap_or_else(|_| {
                Err(Fault::transient(format!(
                    "the verifier gave no verdict within {} ms",
                    limit.as_millis()
                )))
            }),
        }
    }
}
