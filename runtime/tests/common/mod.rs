//! Test adapters shared by the runtime's integration tests.

#![allow(dead_code, unreachable_pub, missing_docs)]

use async_trait::async_trait;
use serde_json::{Value, json};
use std::collections::VecDeque;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use terminus_kernel::{ModelTurn, ToolCall, ToolOutcome, Usage, Verdict};
use terminus_runtime::{
    Fault, Message, Model, ModelError, ModelFailure, ModelRequest, Tool, Verification, Verifier,
};

/// One scripted answer of [`Script`].
#[derive(Debug, Clone)]
pub enum Answer {
    Turn(ModelTurn),
    Fail(ModelFailure),
    /// Never answers (for timeouts and interruptions).
    Hang,
}

/// A model that plays a queue of answers and records every request.
#[derive(Debug, Default)]
pub struct Script {
    answers: Mutex<VecDeque<Answer>>,
    /// The messages of every request, in order.
    pub seen: Mutex<Vec<Vec<Message>>>,
    /// Whether tools were enabled, per request.
    pub tools_enabled: Mutex<Vec<bool>>,
}

impl Script {
    pub fn new(answers: impl IntoIterator<Item = Answer>) -> Arc<Script> {
        Arc::new(Script {
            answers: Mutex::new(answers.into_iter().collect()),
            ..Script::default()
        })
    }

    pub fn requests(&self) -> usize {
        self.seen.lock().map(|s| s.len()).unwrap_or(0)
    }

    pub fn last_messages(&self) -> Vec<Message> {
        self.seen
            .lock()
            .ok()
            .and_then(|s| s.last().cloned())
            .unwrap_or_default()
    }
}

#[async_trait]
impl Model for Script {
    async fn complete(&self, request: ModelRequest<'_>) -> Result<ModelTurn, ModelError> {
        if let Ok(mut seen) = self.seen.lock() {
            seen.push(request.messages.to_vec());
        }
        if let Ok(mut t) = self.tools_enabled.lock() {
            t.push(request.tools_enabled);
        }
        let next = self.answers.lock().ok().and_then(|mut a| a.pop_front());
        match next {
            Some(Answer::Turn(turn)) => Ok(turn),
            Some(Answer::Fail(f)) => Err(ModelError::Failure(f)),
            Some(Answer::Hang) => std::future::pending().await,
            None => Err(ModelError::Fault(Fault::invalid_input(
                "test model script exhausted",
            ))),
        }
    }
}

pub fn text(s: &str) -> Answer {
    Answer::Turn(ModelTurn {
        text: s.into(),
        ..ModelTurn::default()
    })
}

pub fn done(s: &str) -> Answer {
    Answer::Turn(ModelTurn {
        text: s.into(),
        needs_more_work: Some(false),
        ..ModelTurn::default()
    })
}

pub fn empty() -> Answer {
    Answer::Turn(ModelTurn {
        usage: Some(Usage::default()),
        ..ModelTurn::default()
    })
}

/// A turn calling `calls` (name, arguments); ids left empty for the runtime to fill in.
pub fn calls(calls: &[(&str, Value)]) -> Answer {
    Answer::Turn(ModelTurn {
        tool_calls: calls
            .iter()
            .map(|(name, args)| ToolCall {
                id: "".into(),
                name: (*name).into(),
                arguments: args.clone().into(),
            })
            .collect(),
        ..ModelTurn::default()
    })
}

pub fn todos(items: &[(&str, &str)]) -> Value {
    json!({ "todos": items.iter().map(|(c, s)| json!({ "content": c, "status": s })).collect::<Vec<_>>() })
}

/// A tool that answers with its arguments after `delay`, and tracks how many of its calls run
/// at once.
#[derive(Debug, Default)]
pub struct Echo {
    pub delay: Duration,
    pub running: AtomicUsize,
    pub max_running: AtomicUsize,
    pub calls: AtomicUsize,
}

impl Echo {
    pub fn new(delay: Duration) -> Arc<Echo> {
        Arc::new(Echo {
            delay,
            ..Echo::default()
        })
    }
}

#[async_trait]
impl Tool for Echo {
    async fn call(&self, arguments: Value) -> Result<ToolOutcome, Fault> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        let now = self.running.fetch_add(1, Ordering::SeqCst) + 1;
        self.max_running.fetch_max(now, Ordering::SeqCst);
        if !self.delay.is_zero() {
            tokio::time::sleep(self.delay).await;
        }
        self.running.fetch_sub(1, Ordering::SeqCst);
        Ok(ToolOutcome::ok(arguments))
    }
}

/// A tool that always fails with `kind`.
#[derive(Debug)]
pub struct Failing(pub terminus_kernel::ToolErrorKind);

#[async_trait]
impl Tool for Failing {
    async fn call(&self, _arguments: Value) -> Result<ToolOutcome, Fault> {
        Ok(ToolOutcome::Error {
            kind: self.0,
            message: "it failed".into(),
        })
    }
}

/// A verifier that answers from a queue and records the transcript text it was shown.
#[derive(Debug, Default)]
pub struct Recorder {
    verdicts: Mutex<VecDeque<Verdict>>,
    pub transcripts: Mutex<Vec<String>>,
    pub claims: Mutex<Vec<String>>,
}

impl Recorder {
    pub fn new(verdicts: impl IntoIterator<Item = bool>) -> Arc<Recorder> {
        Arc::new(Recorder {
            verdicts: Mutex::new(
                verdicts
                    .into_iter()
                    .map(|complete| Verdict {
                        complete,
                        missing: if complete {
                            Vec::new()
                        } else {
                            vec!["the summary".into()]
                        },
                    })
                    .collect(),
            ),
            ..Recorder::default()
        })
    }
}

#[async_trait]
impl Verifier for Recorder {
    async fn verify(&self, v: Verification<'_>) -> Result<Verdict, Fault> {
        if let Ok(mut t) = self.transcripts.lock() {
            t.push(v.transcript.render());
        }
        if let Ok(mut c) = self.claims.lock() {
            c.push(v.claim.to_owned());
        }
        self.verdicts
            .lock()
            .ok()
            .and_then(|mut q| q.pop_front())
            .ok_or_else(|| Fault::invalid_input("test verifier exhausted"))
    }
}
