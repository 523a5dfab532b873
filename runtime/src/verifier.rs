//! The verifier port and two verifiers: the rule verifier (todos and required tools) and the
//! LLM verifier (asks a model whether the task is done).
//!
//! A verifier sees the task, the model's claim, the todo list, the tool ledger and the
//! [`Transcript`]: the conversation without the kernel's nudges, notices and warnings
//! (`docs/design.md`, rule 4), so the kernel's own "you are not done" text can never count as
//! evidence against completion.

use crate::context::Tokenizer;
use crate::fault::Fault;
use crate::message::{Message, Transcript};
use crate::model::{Model, ModelError, ModelRequest, Purpose};
use async_trait::async_trait;
use serde::Deserialize;
use std::sync::Arc;
use terminus_kernel::{Gate, Ledger, ModelErrorKind, Todo, Verdict};

/// Everything a verifier may look at.
#[derive(Debug, Clone, Copy)]
pub struct Verification<'a> {
    /// The task of the run.
    pub task: &'a str,
    /// The model's completion claim (its last substantive content).
    pub claim: &'a str,
    /// The todo list the kernel tracks.
    pub todos: &'a [Todo],
    /// The kernel's tool ledger (rule 8: which tools ran and succeeded).
    pub ledger: &'a Ledger,
    /// The tools that must have succeeded once (`completion_requires`).
    pub completion_requires: &'a [String],
    /// The conversation without the kernel's text.
    pub transcript: Transcript<'a>,
}

impl Verification<'_> {
    /// What the claim still lacks by the rules (open todos, required tools not yet succeeded):
    /// the same [`Gate`] the kernel computes with `Machine::gate`.
    pub fn gate(&self) -> Gate {
        Gate {
            open_todos: self.todos.iter().any(|t| t.status.is_open()),
            missing_required: self
                .completion_requires
                .iter()
                .any(|t| !self.ledger.succeeded(t)),
        }
    }

    /// The open todos and missing required tools, in words.
    pub fn missing_by_rules(&self) -> Vec<String> {
        missing_by_rules(self.todos, self.ledger, self.completion_requires)
    }
}

/// What a completion claim lacks by the rules, in words: each open todo (`todo not done: ...`),
/// then each `completion_requires` tool the ledger has no success of. The rule verifier's
/// `missing`; a host that drives the machine itself gives it as its verdict.
pub fn missing_by_rules(
    todos: &[Todo],
    ledger: &Ledger,
    completion_requires: &[String],
) -> Vec<String> {
    let todos = todos
        .iter()
        .filter(|t| t.status.is_open())
        .map(|t| format!("todo not done: {}", t.content));
    let tools = completion_requires
        .iter()
        .filter(|t| !ledger.succeeded(t))
        .map(|t| format!("required tool not yet run successfully: {t}"));
    todos.chain(tools).collect()
}

/// Decides whether a completion claim is true.
#[async_trait]
pub trait Verifier: Send + Sync {
    /// The verdict on `verification.claim`. `Err` is a fault of the verifier itself (it cannot
    /// decide at all) and stops the run; a rejection is `Ok(Verdict { complete: false, .. })`.
    async fn verify(&self, verification: Verification<'_>) -> Result<Verdict, Fault>;

    /// Whether [`Verifier::verify`] reads [`Verification::transcript`]. Default: true. A
    /// verifier that decides from the ledger and todos alone says false (see
    /// [`crate::Model::reads_messages`]).
    fn reads_transcript(&self) -> bool {
        true
    }
}

/// The verifier used when verification is on and the host gives none: the claim is true when no
/// todo is open and every `completion_requires` tool has succeeded once.
#[derive(Debug, Clone, Copy, Default)]
pub struct RuleVerifier;

#[async_trait]
impl Verifier for RuleVerifier {
    async fn verify(&self, verification: Verification<'_>) -> Result<Verdict, Fault> {
        let missing = verification.missing_by_rules();
        Ok(Verdict {
            complete: missing.is_empty(),
            missing,
        })
    }

    fn reads_transcript(&self) -> bool {
        false
    }
}

/// The instructions of [`LlmVerifier`].
pub const LLM_VERIFIER_PROMPT: &str = "\
You check whether an AI agent has finished the task it was given. You get the task, a transcript \
of the agent's work (its messages, the tools it called and what they returned) and its final \
message. Decide from that evidence whether the task is complete.

- Judge the work, not the wording. A final message that ends with a courteous closing or an \
offer of more help (\"Let me know if you need anything else\", \"Happy to help further\", \"Feel \
free to ask if you have questions\") is ordinary politeness, not a sign that work remains.
- The task is incomplete only when something it asks for was not done or was done wrong, or \
when the agent itself says it stopped early (it promises to do a step later, or a tool it needed \
failed and it did not recover).
- Do not add requirements the task does not state.

Answer with one JSON object and nothing else:
{\"complete\": true}
or
{\"complete\": false, \"missing\": [\"what is still missing\", \"...\"]}";

/// A verifier that asks a model. Its prompt ([`LLM_VERIFIER_PROMPT`]) accepts courteous
/// closings as complete, and the transcript it sends never contains the kernel's nudges.
pub struct LlmVerifier {
    model: Arc<dyn Model>,
    /// The verifier's context window (tokens a prompt may take) and how to count them.
    within: Option<(u32, Arc<dyn Tokenizer>)>,
}

impl std::fmt::Debug for LlmVerifier {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LlmVerifier").finish_non_exhaustive()
    }
}

impl LlmVerifier {
    /// A verifier that asks `model`.
    pub fn new(model: Arc<dyn Model>) -> LlmVerifier {
        LlmVerifier {
            model,
            within: None,
        }
    }

    /// Bounds the prompt to `tokens` (the verifier model's window less its reply reserve), as
    /// counted by `tokenizer`: the instructions, the task, the claim and the todo list are always
    /// sent, and the transcript keeps its newest messages that fit, saying how many older ones
    /// were left out. Without it the whole transcript is sent.
    #[must_use]
    pub fn within(mut self, tokens: u32, tokenizer: Arc<dyn Tokenizer>) -> LlmVerifier {
        self.within = Some((tokens, tokenizer));
        self
    }

    /// The two messages sent to the model: the instructions and the evidence (the whole
    /// transcript).
    pub fn prompt(verification: &Verification<'_>) -> [Message; 2] {
        let transcript = verification.transcript.render();
        [
            Message::system(LLM_VERIFIER_PROMPT),
            Message::user(LlmVerifier::evidence(verification, &transcript)),
        ]
    }

    /// The prompt of [`LlmVerifier::prompt`] in at most `tokens` as `tokenizer` counts them,
    /// keeping the newest transcript messages that fit (see [`LlmVerifier::within`]).
    pub fn prompt_within(
        verification: &Verification<'_>,
        tokens: u32,
        tokenizer: &dyn Tokenizer,
    ) -> [Message; 2] {
        let blocks = verification.transcript.render_blocks();
        let note = |left_out: usize| {
            format!(
                "[{left_out} earlier messages left out to fit the verifier's context window]\n\n"
            )
        };
        // The fixed parts, with room for the note and the chat framing of two messages.
        let fixed = tokenizer
            .count(LLM_VERIFIER_PROMPT)
            .saturating_add(tokenizer.count(&LlmVerifier::evidence(verification, "")))
            .saturating_add(tokenizer.count(&note(blocks.len())))
            .saturating_add(8);
        let mut room = tokens.saturating_sub(fixed);
        let mut kept = 0;
        for block in blocks.iter().rev() {
            let cost = tokenizer.count(block);
            if cost > room {
                break;
            }
            room -= cost;
            kept += 1;
        }
        let left_out = blocks.len() - kept;
        let mut transcript = if left_out > 0 {
            note(left_out)
        } else {
            String::new()
        };
        for block in &blocks[left_out..] {
            transcript.push_str(block);
        }
        [
            Message::system(LLM_VERIFIER_PROMPT),
            Message::user(LlmVerifier::evidence(verification, &transcript)),
        ]
    }

    /// The evidence message around a rendered transcript.
    fn evidence(verification: &Verification<'_>, transcript: &str) -> String {
        let mut evidence = String::with_capacity(1024 + transcript.len());
        evidence.push_str("Task:\n");
        evidence.push_str(verification.task);
        evidence.push_str("\n\nTranscript:\n");
        evidence.push_str(transcript);
        evidence.push_str("Final message of the agent:\n");
        evidence.push_str(verification.claim);
        if !verification.todos.is_empty() {
            evidence.push_str("\n\nThe agent's todo list:\n");
            for todo in verification.todos {
                let status = match todo.status {
                    terminus_kernel::TodoStatus::Pending => "pending",
                    terminus_kernel::TodoStatus::InProgress => "in progress",
                    terminus_kernel::TodoStatus::Completed => "completed",
                    terminus_kernel::TodoStatus::Cancelled => "cancelled",
                };
                evidence.push_str("- ");
                evidence.push_str(&todo.content);
                evidence.push_str(" (");
                evidence.push_str(status);
                evidence.push_str(")\n");
            }
        }
        evidence
    }
}

#[async_trait]
impl Verifier for LlmVerifier {
    async fn verify(&self, verification: Verification<'_>) -> Result<Verdict, Fault> {
        let messages = match &self.within {
            Some((tokens, tokenizer)) => {
                LlmVerifier::prompt_within(&verification, *tokens, tokenizer.as_ref())
            }
            None => LlmVerifier::prompt(&verification),
        };
        let request = ModelRequest {
            messages: &messages,
            tools: &[],
            tools_enabled: false,
            purpose: Purpose::Verify,
        };
        let turn = match self.model.complete(request).await {
            Ok(turn) => turn,
            Err(ModelError::Failure(f)) => {
                let message = format!("the verifier's model failed: {f}");
                return Err(match f.kind {
                    ModelErrorKind::RateLimited
                    | ModelErrorKind::Server
                    | ModelErrorKind::Timeout => Fault::transient(message),
                    _ => Fault::internal(message),
                });
            }
            Err(ModelError::Fault(f)) => return Err(f),
        };
        parse_verdict(&turn.text).ok_or_else(|| {
            Fault::internal(format!(
                "the verifier's model did not answer with a verdict: {:?}",
                truncate(&turn.text, 200)
            ))
        })
    }
}

#[derive(Deserialize)]
struct VerdictReply {
    complete: bool,
    #[serde(default)]
    missing: Vec<String>,
}

/// Reads a verdict from a model reply: the first JSON object in it (fences and prose around it
/// are tolerated), or else a reply that starts with "complete" / "incomplete".
pub fn parse_verdict(reply: &str) -> Option<Verdict> {
    if let (Some(start), Some(end)) = (reply.find('{'), reply.rfind('}'))
        && let Some(json) = reply.get(start..=end)
        && let Ok(v) = serde_json::from_str::<VerdictReply>(json)
    {
        return Some(Verdict {
            complete: v.complete,
            missing: v.missing,
        });
    }
    let word = reply
        .trim_start_matches(|c: char| !c.is_alphanumeric())
        .to_ascii_lowercase();
    if word.starts_with("incomplete") || word.starts_with("not complete") {
        Some(Verdict {
            complete: false,
            missing: Vec::new(),
        })
    } else if word.starts_with("complete") {
        Some(Verdict {
            complete: true,
            missing: Vec::new(),
        })
    } else {
        None
    }
}

fn truncate(s: &str, max: usize) -> &str {
    match s.char_indices().nth(max) {
        Some((i, _)) => &s[..i],
        None => s,
    }
}
