//! The verify action: ask the verifier (or the rule verifier) about a completion claim.

use super::{Driver, EventAndDetail};
use crate::error::RunError;
use crate::fault::Fault;
use crate::message::Transcript;
use crate::verifier::{RuleVerifier, Verification, Verifier};
use terminus_kernel::{Event, Verdict, VerifyRequest};
use tokio::time::timeout;

impl Driver {
    pub(super) async fn verify_step(
        &mut self,
        request: VerifyRequest,
    ) -> Result<EventAndDetail, RunError> {
        let (raced, renewal) = self.race(self.verify(&request)).await?;
        self.renewal = renewal;
        match self.interrupted(raced) {
            Ok(verdict) => Ok((Event::Verdict(verdict?), None)),
            Err(event) => Ok(event),
        }
    }

    pub(super) async fn verify(&self, request: &VerifyRequest) -> Result<Verdict, Fault> {
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
                Err(Fault::internal(format!(
                    "the verifier gave no verdict within {} ms",
                    limit.as_millis()
                )))
            }),
        }
    }
}
