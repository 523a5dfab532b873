//! Questions a tool's call asks a person while it runs (an MCP server's elicitation), when
//! nobody can answer them then: the call's run ends without its effect, the call is held
//! ([`Hold::Elicitation`](terminus_kernel::Hold::Elicitation)) and the run is suspended until
//! the person replies; then the call runs again, and its question gets the reply.
//!
//! The runtime runs each tool call inside [`scope`], which carries the reply for the call's
//! second run and collects the question its first run asked. The tool reads and reports them
//! with [`reply`] and [`ask`] from the task that runs the call, so the tool port
//! ([`Tool::call`](crate::Tool::call)) and every layer around it stay as they are: a layer sees
//! both runs of the call, as the calls they are.

use std::sync::{Arc, Mutex, PoisonError};
pub use terminus_kernel::Question;
use terminus_kernel::{Decision, ToolOutcome};

/// A person's reply to a [`Question`].
#[derive(Debug, Clone, PartialEq)]
pub enum Reply {
    /// The form is accepted with this content (a JSON object).
    Accept(serde_json::Value),
    /// The form is accepted with the defaults its schema gives.
    Defaults,
    /// The person declined to answer.
    Decline,
}

impl Reply {
    /// The reply a decision on a held call gives its question: an answer accepts the form with
    /// its content (an error answer declines it), a denial declines, an approval accepts the
    /// form's defaults (the hosts refuse edited arguments for a call that asked; one that came
    /// anyway is an approval).
    pub fn of(decision: &Decision) -> Reply {
        match decision {
            Decision::Answer {
                outcome: ToolOutcome::Ok(content),
            } => Reply::Accept(content.value().clone()),
            Decision::Answer { .. } | Decision::Deny { .. } => Reply::Decline,
            Decision::Approve | Decision::Edit { .. } => Reply::Defaults,
        }
    }
}

/// What one call's run carries: the reply for the question it asked before, and the question
/// this run asked (if nobody could answer it).
#[derive(Debug, Default)]
struct Slot {
    reply: Option<(Question, Reply)>,
    asked: Option<Question>,
}

tokio::task_local! {
    static ASKING: Arc<Mutex<Slot>>;
}

/// Runs `call` (one tool call's run) with `reply` for the question its earlier run asked, and
/// returns its output with the question this run asked that nobody answered, if any.
pub async fn scope<F: Future>(
    reply: Option<(Question, Reply)>,
    call: F,
) -> (F::Output, Option<Question>) {
    let slot = Arc::new(Mutex::new(Slot { reply, asked: None }));
    let out = ASKING.scope(slot.clone(), call).await;
    let asked = slot
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .asked
        .take();
    (out, asked)
}

/// The reply this run of a call carries for the question its earlier run asked: `None` on a
/// first run (or outside a run).
pub fn reply() -> Option<(Question, Reply)> {
    ASKING
        .try_with(|slot| {
            slot.lock()
                .unwrap_or_else(PoisonError::into_inner)
                .reply
                .clone()
        })
        .ok()
        .flatten()
}

/// Whether this call runs inside a run that can hold it for a person ([`scope`]): outside one
/// (`terminus tools call`) nobody will reply to its questions.
pub fn held_here() -> bool {
    ASKING.try_with(|_| ()).is_ok()
}

/// Reports that this run of a call asked `question` and nobody could answer it (the tool
/// cancelled the question): the runtime holds the call for a person instead of keeping its
/// result. `false` outside a run, where nobody will reply: the tool declines instead.
pub fn ask(question: Question) -> bool {
    ASKING
        .try_with(|slot| {
            slot.lock().unwrap_or_else(PoisonError::into_inner).asked = Some(question);
        })
        .is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn question() -> Question {
        Question {
            message: "Delete?".into(),
            schema: json!({"type": "object"}),
        }
    }

    #[tokio::test]
    async fn a_call_knows_whether_a_run_can_hold_it() {
        assert!(!held_here(), "outside a run");
        let (inside, _) = scope(None, async { held_here() }).await;
        assert!(inside);
    }

    #[tokio::test]
    async fn a_scope_carries_the_reply_in_and_the_question_out() {
        let (seen, asked) = scope(Some((question(), Reply::Decline)), async {
            let seen = reply();
            assert!(ask(question()));
            seen
        })
        .await;
        assert_eq!(seen, Some((question(), Reply::Decline)));
        assert_eq!(asked, Some(question()));
        // Outside a scope nobody replies, and asking says so.
        assert_eq!(reply(), None);
        assert!(!ask(question()));
        let (_, none) = scope(None, async {}).await;
        assert_eq!(none, None);
    }

    #[test]
    fn each_decision_is_a_reply() {
        let content = json!({"confirm": true});
        let answer = Decision::Answer {
            outcome: ToolOutcome::Ok(content.clone().into()),
        };
        assert_eq!(Reply::of(&answer), Reply::Accept(content));
        assert_eq!(Reply::of(&Decision::Deny { reason: None }), Reply::Decline);
        assert_eq!(Reply::of(&Decision::Approve), Reply::Defaults);
        let error = Decision::Answer {
            outcome: ToolOutcome::Error {
                kind: terminus_kernel::ToolErrorKind::Failed,
                message: "no".into(),
            },
        };
        assert_eq!(Reply::of(&error), Reply::Decline);
    }
}
