//! Scripted adapters: a model, tools and a verifier that answer from a scenario's scripts.

use crate::format::{
    ModelScript, Repeat, ResultSpec, ToolScript, TurnSpec, VerdictSpec, VerifierScript,
};
use async_trait::async_trait;
use serde_json::Value;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Mutex, PoisonError};
use std::time::Duration;
use terminus_kernel::{ModelTurn, ToolCall, ToolOutcome, Verdict};
use terminus_runtime::{
    Fault, Message, Model, ModelError, ModelFailure, ModelInfo, ModelRequest, Tool, Verification,
    Verifier,
};

/// A script and how far it has been read.
#[derive(Debug)]
struct Cursor<T> {
    entries: Vec<T>,
    repeat: Repeat,
    used: Mutex<usize>,
}

impl<T: Clone> Cursor<T> {
    fn new(entries: Vec<T>, repeat: Repeat) -> Cursor<T> {
        Cursor {
            entries,
            repeat,
            used: Mutex::new(0),
        }
    }

    /// Marks the first `n` entries as used (a resumed run's journal already holds their answers).
    fn skip(&self, n: u64) {
        let mut used = self.used.lock().unwrap_or_else(PoisonError::into_inner);
        *used = usize::try_from(n).unwrap_or(usize::MAX);
    }

    /// The next entry and its number (1-based), or `Err(n)` when a `none` script of `n` entries
    /// is exhausted.
    fn next(&self) -> Result<(usize, T), usize> {
        let mut used = self.used.lock().unwrap_or_else(PoisonError::into_inner);
        let len = self.entries.len();
        let index = match self.repeat {
            _ if *used < len => *used,
            Repeat::None => return Err(len),
            Repeat::Last => len.saturating_sub(1),
            Repeat::Cycle => *used % len.max(1),
        };
        let entry = self.entries.get(index).cloned().ok_or(len)?;
        *used += 1;
        Ok((*used, entry))
    }
}

fn plural(n: usize, what: &str) -> String {
    if n == 1 {
        format!("1 {what}")
    } else {
        format!("{n} {what}s")
    }
}

/// The scripted model: each call answers with the next turn of the script. Tool calls without
/// an `id` get `call-{call}-{index}` (the model call's number, from 1, and the call's index in
/// the turn, from 0).
#[derive(Debug)]
pub struct ScriptedModel {
    turns: Cursor<TurnSpec>,
    log: Option<std::path::PathBuf>,
    /// The run's kill switch, pulled by a `cancelled` turn.
    kill: Option<terminus_runtime::KillSwitch>,
    /// Whether a turn checks what the request shows (`sees`, `not_sees`).
    reads: bool,
    /// Where every request's messages are recorded, when someone reads them.
    sent: Option<crate::sent::Sent>,
}

impl ScriptedModel {
    /// A model that plays `script`.
    pub fn new(script: &ModelScript) -> ScriptedModel {
        ScriptedModel {
            turns: Cursor::new(script.turns.clone(), script.repeat),
            log: None,
            kill: None,
            reads: script
                .turns
                .iter()
                .any(|t| !t.sees.is_empty() || !t.not_sees.is_empty()),
            sent: None,
        }
    }

    /// Records the messages of every request into `sent` (the host suite's transcripts).
    #[must_use]
    pub fn with_sent(mut self, sent: crate::sent::Sent) -> ScriptedModel {
        self.sent = Some(sent);
        self
    }

    /// Appends the number of every turn served (one line each) to `path`: crash tests count the
    /// model calls made across processes with it.
    #[must_use]
    pub fn with_log(mut self, path: impl Into<std::path::PathBuf>) -> ScriptedModel {
        self.log = Some(path.into());
        self
    }

    /// The run's kill switch, which a `cancelled` turn pulls (as the host did during the call a
    /// recording ends with).
    #[must_use]
    pub fn with_kill_switch(mut self, kill: terminus_runtime::KillSwitch) -> ScriptedModel {
        self.kill = Some(kill);
        self
    }

    fn record(&self, call: usize) -> Result<(), Fault> {
        match &self.log {
            Some(path) => append_line(path, &format!("{call}\n"), "model log"),
            None => Ok(()),
        }
    }
}

/// Appends `line` to the log at `path` in one write: `writeln!` on a `File` may write the text
/// and the newline separately, and a process killed between the two leaves a torn line that the
/// next process's line is glued to (`7` + `7\n` read as `77`).
fn append_line(path: &std::path::Path, line: &str, what: &str) -> Result<(), Fault> {
    use std::io::Write as _;
    std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .and_then(|mut f| f.write_all(line.as_bytes()))
        .map_err(|e| Fault::internal(format!("{what} {}: {e}", path.display())))
}

impl ScriptedModel {
    /// Moves past `answered` turns (a resumed run has them in its journal).
    pub fn skip(&self, answered: u64) {
        self.turns.skip(answered);
    }
}

#[async_trait]
impl Model for ScriptedModel {
    async fn complete(&self, request: ModelRequest<'_>) -> Result<ModelTurn, ModelError> {
        if let Some(sent) = &self.sent {
            sent.record(request.messages);
        }
        let served = self.turns.next();
        if let Ok((call, _)) = &served {
            self.record(*call).map_err(ModelError::Fault)?;
        }
        let (call, spec) = served.map_err(|n| {
            Fault::invalid_input(format!(
                "model script exhausted after {} (repeat: \"none\")",
                plural(n, "turn")
            ))
        })?;
        check_view(call, &spec, request.messages)?;
        if spec.cancelled == Some(true) {
            let Some(kill) = &self.kill else {
                return Err(ModelError::Fault(Fault::invalid_input(format!(
                    "model turn {call} is cancelled, but the run has no kill switch to pull"
                ))));
            };
            // The host pulls the switch while the model answers: the run takes the cancel at
            // once and drops this call. A host that gave the run a switch of its own (a durable
            // engine's) never sees this one: then the call fails instead of hanging.
            kill.kill();
            tokio::time::sleep(Duration::from_secs(1)).await;
            return Err(ModelError::Fault(Fault::invalid_input(format!(
                "model turn {call} is cancelled, but the run did not take the cancel (its host \
                 keeps a kill switch of its own)"
            ))));
        }
        if let Some(kind) = spec.error {
            return Err(ModelError::Failure(ModelFailure {
                kind,
                retry_after_ms: spec.retry_after_ms,
                message: spec
                    .message
                    .unwrap_or_else(|| format!("scripted {} error", kind.as_str())),
            }));
        }
        let tool_calls = spec
            .tool_calls
            .unwrap_or_default()
            .into_iter()
            .enumerate()
            .map(|(i, c)| ToolCall {
                id: c.id.unwrap_or_else(|| format!("call-{call}-{i}")).into(),
                name: c.name.into(),
                arguments: c.arguments.into(),
            })
            .collect();
        Ok(ModelTurn {
            text: spec.text.unwrap_or_default(),
            tool_calls,
            needs_more_work: spec.needs_more_work,
            usage: spec.usage,
            finish: spec.finish.unwrap_or_default(),
            reasoning: spec.reasoning.unwrap_or(false),
            text_calls: None,
        })
    }

    fn info(&self) -> ModelInfo {
        ModelInfo {
            provider: "terminus.scripted".into(),
            model: "scripted".into(),
        }
    }

    /// Only a turn's `sees` and `not_sees` look at the request.
    fn reads_messages(&self) -> bool {
        self.reads || self.sent.is_some()
    }
}

/// Checks a turn's `sees` and `not_sees` against the messages the model was sent.
fn check_view(call: usize, spec: &TurnSpec, messages: &[Message]) -> Result<(), Fault> {
    let shown = |text: &str| messages.iter().any(|m| m.content.contains(text));
    for text in &spec.sees {
        if !shown(text) {
            return Err(Fault::internal(format!(
                "model turn {call}: the request does not show {text:?} (the turn's \"sees\"); it \
                 has {} messages",
                messages.len()
            )));
        }
    }
    for text in &spec.not_sees {
        if shown(text) {
            return Err(Fault::internal(format!(
                "model turn {call}: the request shows {text:?} (the turn's \"not_sees\")"
            )));
        }
    }
    Ok(())
}

/// A scripted tool: each call answers with the next result of its script, after the result's
/// `delay_ms` (a real sleep on tokio's clock).
#[derive(Debug)]
pub struct ScriptedTool {
    name: String,
    description: String,
    parameters: Option<Value>,
    idempotent: bool,
    results: Cursor<ResultSpec>,
    log: Option<std::path::PathBuf>,
    /// The run's kill switch, pulled by a `cancelled` result.
    kill: Option<terminus_runtime::KillSwitch>,
}

impl ScriptedTool {
    /// Appends `{name} {n}` to `path` each time the tool carries out its `n`-th result (when the
    /// call's future runs, not when it is called): crash tests count the tool calls carried out
    /// across processes with it.
    #[must_use]
    pub fn with_log(mut self, path: impl Into<std::path::PathBuf>) -> ScriptedTool {
        self.log = Some(path.into());
        self
    }

    /// The run's kill switch, which a `cancelled` result pulls (as the host did during the
    /// tool call a recording ends with).
    #[must_use]
    pub fn with_kill_switch(mut self, kill: terminus_runtime::KillSwitch) -> ScriptedTool {
        self.kill = Some(kill);
        self
    }

    /// Moves past `answered` results (a resumed run has them in its journal).
    pub fn skip(&self, answered: u64) {
        self.results.skip(answered);
    }

    /// The tool `name` playing `script`.
    pub fn new(name: &str, script: &ToolScript) -> ScriptedTool {
        ScriptedTool {
            name: name.to_owned(),
            description: script
                .description
                .clone()
                .unwrap_or_else(|| format!("The scripted tool `{name}`.")),
            parameters: script.parameters.clone(),
            idempotent: script.idempotent,
            results: Cursor::new(script.results.clone(), script.repeat),
            log: None,
            kill: None,
        }
    }

    /// The next result: its number, its outcome (none for a `cancelled` one), its delay and the
    /// job its call started.
    fn next(&self) -> Result<(usize, Option<ToolOutcome>, u64, Option<Value>), Fault> {
        let (number, spec) = self.results.next().map_err(|n| {
            Fault::invalid_input(format!(
                "tool `{}` script exhausted after {} (repeat: \"none\")",
                self.name,
                plural(n, "result")
            ))
        })?;
        if spec.cancelled == Some(true) {
            return Ok((number, None, 0, spec.job));
        }
        let outcome = match (spec.ok, spec.error) {
            (_, Some(kind)) => ToolOutcome::Error {
                kind,
                message: spec
                    .message
                    .unwrap_or_else(|| format!("scripted {} error", kind.as_str())),
            },
            (Some(value), None) => match spec.filler_tokens {
                None => ToolOutcome::ok(value),
                Some(n) => {
                    let mut text = match value {
                        Value::String(s) => s,
                        other => other.to_string(),
                    };
                    text.reserve(4 * n as usize);
                    for _ in 0..n {
                        text.push_str(" log");
                    }
                    ToolOutcome::ok(Value::String(text))
                }
            },
            // Validation rejects a result with neither; answer like an empty success.
            (None, None) => ToolOutcome::ok(Value::Null),
        };
        Ok((number, Some(outcome), spec.delay_ms.unwrap_or(0), spec.job))
    }
}

impl ScriptedTool {
    /// Carries out the `number`-th result, a `cancelled` one: pulls the kill switch, and waits
    /// for the run to take the cancel and drop this call.
    async fn cancel(&self, number: usize) -> Result<ToolOutcome, Fault> {
        let name = &self.name;
        let Some(kill) = &self.kill else {
            return Err(Fault::invalid_input(format!(
                "tool `{name}` result {number} is cancelled, but the run has no kill switch to pull"
            )));
        };
        // As for a cancelled model turn: a host with a switch of its own never sees this one,
        // and then the call fails instead of hanging.
        kill.kill();
        tokio::time::sleep(Duration::from_secs(1)).await;
        Err(Fault::invalid_input(format!(
            "tool `{name}` result {number} is cancelled, but the run did not take the cancel (its \
             host keeps a kill switch of its own)"
        )))
    }
}

impl Tool for ScriptedTool {
    fn description(&self) -> &str {
        &self.description
    }

    fn parameters(&self) -> Value {
        self.parameters
            .clone()
            .unwrap_or_else(|| serde_json::json!({ "type": "object" }))
    }

    fn idempotent(&self) -> bool {
        self.idempotent
    }

    // Written out instead of `async fn` so that the script advances when the runtime *calls*
    // the tool (in batch order), not when the future is first polled (in whatever order the
    // concurrent calls start): the same scenario gives the same results on every run.
    fn call<'life0, 'async_trait>(
        &'life0 self,
        _arguments: Value,
    ) -> Pin<Box<dyn Future<Output = Result<ToolOutcome, Fault>> + Send + 'async_trait>>
    where
        'life0: 'async_trait,
        Self: 'async_trait,
    {
        let next = self.next();
        Box::pin(async move {
            let (number, outcome, delay_ms, job) = next?;
            if let Some(path) = &self.log {
                append_line(path, &format!("{} {number}\n", self.name), "tool log")?;
            }
            if let Some(job) = job {
                // As the live call did: its job journaled before it waited.
                terminus_runtime::jobs::started(job).await;
            }
            let Some(outcome) = outcome else {
                return self.cancel(number).await;
            };
            if delay_ms > 0 {
                tokio::time::sleep(Duration::from_millis(delay_ms)).await;
            }
            Ok(outcome)
        })
    }
}

/// The scripted verifier: each verification answers with the next verdict.
#[derive(Debug)]
pub struct ScriptedVerifier {
    verdicts: Cursor<VerdictSpec>,
}

impl ScriptedVerifier {
    /// A verifier playing `script`.
    pub fn new(script: &VerifierScript) -> ScriptedVerifier {
        ScriptedVerifier {
            verdicts: Cursor::new(script.verdicts.clone(), script.repeat),
        }
    }
}

#[async_trait]
impl Verifier for ScriptedVerifier {
    fn reads_transcript(&self) -> bool {
        false
    }

    async fn verify(&self, _verification: Verification<'_>) -> Result<Verdict, Fault> {
        let (_, spec) = self.verdicts.next().map_err(|n| {
            Fault::invalid_input(format!(
                "verifier script exhausted after {} (repeat: \"none\")",
                plural(n, "verdict")
            ))
        })?;
        Ok(Verdict {
            complete: spec.complete,
            missing: spec.missing,
        })
    }
}
