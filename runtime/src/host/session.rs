//! The host core: what a framework adapter decides that is not its framework's API, once, for
//! every adapter (LangChain in Python and JS, the AI SDK, OpenAI Agents, Pydantic AI).
//!
//! A [`Session`] is one run: the [`Host`] and what the run awaits (the calls of the tool turn
//! out, the refusals and warnings for them, the next model call's settings, whether it ended).
//! An adapter's hooks give it the framework's messages as they are (see [`super::messages`] for
//! the shapes it reads) and carry out the [`Step`] it answers: go on, add the kernel's texts as
//! messages (nudges, and notices with no tool result to ride on), append these notices to the
//! turn's last tool result, answer these calls instead of running
//! them, rewrite the reply (calls written in its text), drop an empty reply, or stop with the
//! report. The session is pure: the host passes the clock (`now_ms`) for the policy's deadline.
//!
//! ```text
//! start(policy, messages)     -> Step { jump: model }
//! reply(message, offered)     -> Step { jump: tools | model | end, nudges, answers, written, ... }
//! results(messages)           -> Step { jump: model | end, notices (for notice_to), nudges }
//! model_error(kind, retry)    -> Step { jump: model (after delay_ms) | end }
//! finish(messages)            -> Step { jump: end, report }  (a run something else ended)
//! gate(turn, call_id, has)    -> Gate { refuse(answer) | run(warning) }  (a tool about to run)
//! ```
//!
//! A step with `checkpoint` (`policy.auto_checkpoints`) has the host ask its model for a summary
//! before the next model call ([`Checkpoint`]); the message it adds is
//! [`messages::checkpoint_message`]'s.
//!
//! A `verify` command pauses the step: it comes back with `verify` set, and the host's verifier
//! answers with [`Session::verdict`], which goes on with the same step.

use std::collections::BTreeMap;
use std::io::{Read, Write};

use flate2::Compression;
use flate2::read::ZlibDecoder;
use flate2::write::ZlibEncoder;

use serde::{Deserialize, Serialize};
use serde_json::Value;
use terminus_kernel::{ModelErrorKind, Phase, Policy, ScaleError, Todo};

use super::Host;
use super::messages::{self, Found, Reply};
use super::wire::{CallOut, CommandOut, EventIn, InputError, ModelErrorIn, Offered, VerdictIn};

/// `policy` scaled for a task of `scale` units (its `budget_scale`), as `terminus run --scale`
/// scales it; `None` leaves it as it is. A scale the policy has no `budget_scale` for would change
/// nothing: refused, naming `scale`, as a bad one is.
pub fn scaled(policy: Policy, scale: Option<u64>) -> Result<Policy, InputError> {
    let Some(units) = scale else {
        return Ok(policy);
    };
    policy.scaled_to(units).map_err(|e| match e {
        ScaleError::Nothing => InputError::at("scale", ScaleError::NOTHING),
        ScaleError::Policy(e) => InputError::from(e),
    })
}

/// `policy` as every run of a framework adapter takes it, checked and scaled once, when the
/// adapter is built (so a bad field fails there, not mid-run, and no run scales it again): scaled
/// for `scale` units ([`scaled`]) and valid. What [`Session::start`] refuses, this refuses the
/// same way.
pub fn checked(policy: Policy, scale: Option<u64>) -> Result<Policy, InputError> {
    let policy = scaled(policy, scale)?;
    policy.validate()?;
    Ok(policy)
}

/// From this size (bytes) on, [`Session::pack`] compresses the snapshot.
pub const PACK_AT: usize = 1024;

/// Where the host goes after a step.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Jump {
    /// Call the model (after [`Step::delay_ms`]; without tools when [`Step::tools`] is false).
    Model,
    /// Run the reply's tool calls (but the ones [`Step::answers`] answers).
    Tools,
    /// The run ended: [`Step::report`].
    End,
}

/// A call the host answers itself instead of running it: a tool message with `status: error`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Answer {
    /// The call it answers.
    pub tool_call_id: String,
    /// The tool.
    pub name: String,
    /// The text.
    pub content: String,
    /// The kernel's error class, for the message's metadata (`terminus_error`), when it has one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// Calls the model wrote in its text: the reply becomes this text and these calls.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Written {
    /// The reply's prose without the calls.
    pub text: String,
    /// The calls, with the ids the kernel gave them.
    pub tool_calls: Vec<CallOut>,
}

/// A verification the host's verifier answers ([`Session::verdict`]).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Verify {
    /// The model's completion claim.
    pub claim: String,
    /// The todos the kernel tracks.
    pub todos: Vec<Todo>,
    /// What the rules say is missing (empty: the rules accept the claim).
    pub missing: Vec<String>,
}

/// A checkpoint to write for the agent (`policy.auto_checkpoints`) before the next model call:
/// the host asks its model, with the conversation so far (the step's nudges included) and
/// `prompt` as a last user message, and no tools; then adds the user message
/// [`messages::checkpoint_message`] makes of `note` and the reply (or of why there is none).
/// The kernel has counted it and reset the budgets it lifts; nothing is fed back.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Checkpoint {
    /// What to ask the model.
    pub prompt: String,
    /// The kernel's words before the summary.
    pub note: String,
}

/// What the host does now.
#[derive(Debug, Clone, PartialEq, Default, Serialize)]
pub struct Step {
    /// Where it goes; `None`: nothing changes (the event was already fed, or ignored).
    pub jump: Option<Jump>,
    /// Wait this long before the model call.
    pub delay_ms: u64,
    /// Whether the model call offers tools (false: the final-answer call of a spent budget).
    pub tools: bool,
    /// User messages to add before the next model call: the kernel's guidance (nudges) and its
    /// notices, in the order it gave them, but for the notices that ride on a tool result
    /// ([`Step::notices`]). A notice with no result to ride on (a token warning after a nudge
    /// or a model error) is one of these: never dropped.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub nudges: Vec<String>,
    /// Texts to append to the turn's last tool result ([`Step::notice_to`]): the notices of a
    /// step of tool results that found one.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub notices: Vec<String>,
    /// The id of the tool message (else the call id) the notices go to.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub notice_to: Option<String>,
    /// Which of [`Step::nudges`] are notices, by place (a notice moves to [`Step::notices`]
    /// when a tool result takes it).
    #[serde(skip)]
    notice_at: Vec<usize>,
    /// Calls to answer with these tool messages instead of running them.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub answers: Vec<Answer>,
    /// The calls of output tools (a structured answer) the kernel did not take as the run's
    /// answer, with what each gets as its result: "Not accepted yet." before the nudge, or "not
    /// run" when the run stopped. For a framework that does not answer those calls itself
    /// (Pydantic AI); one that does (LangChain's `response_format`) has answered them already.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub claims: Vec<Answer>,
    /// The reply rewritten as a tool turn (its calls were written in its text).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub written: Option<Written>,
    /// The reply is empty: remove it from the conversation (chat APIs refuse it).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub drop_reply: bool,
    /// Write this checkpoint before the next model call (after the nudges).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub checkpoint: Option<Checkpoint>,
    /// Ask the verifier, then [`Session::verdict`].
    #[serde(skip_serializing_if = "Option::is_none")]
    pub verify: Option<Verify>,
    /// The report, once the run ended.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub report: Option<Value>,
}

impl Step {
    /// Moves the step's notices from [`Step::nudges`] onto the tool result `target`.
    fn ride_on(&mut self, target: String) {
        if self.notice_at.is_empty() {
            return;
        }
        let at = std::mem::take(&mut self.notice_at);
        let mut place = 0;
        let (notices, nudges): (Vec<String>, Vec<String>) =
            std::mem::take(&mut self.nudges).into_iter().partition(|_| {
                let notice = at.contains(&place);
                place += 1;
                notice
            });
        self.nudges = nudges;
        self.notices = notices;
        self.notice_to = Some(target);
    }
}

/// What a tool call about to run gets ([`Session::gate`]).
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Gate {
    /// Not run: answered with this.
    Refuse(Answer),
    /// Run it; append the warning (a budget's) to its result.
    Run {
        /// The warning, when there is one.
        #[serde(skip_serializing_if = "Option::is_none")]
        warning: Option<String>,
    },
}

/// What the run awaits, kept with the session (and, small, where tool hooks read it).
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct Turn {
    /// When the run started (the host's clock, milliseconds), for the deadline.
    pub started_ms: u64,
    /// The calls of the tool turn out, in order: `(id, name)`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub awaiting: Vec<(String, String)>,
    /// Calls not to run, with the text they get instead.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub refused: BTreeMap<String, String>,
    /// Budget warnings for calls' results.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub warnings: BTreeMap<String, String>,
    /// A tool turn is out (even one whose calls were all refused).
    #[serde(default)]
    pub batch: bool,
    /// The next model call's backoff.
    #[serde(default)]
    pub delay_ms: u64,
    /// Whether the next model call offers tools.
    #[serde(default = "yes")]
    pub tools: bool,
    /// The run ended.
    #[serde(default)]
    pub ended: bool,
    /// Why it ended (the report's `reason`), once it has.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stopped: Option<String>,
    /// The id of the last reply fed (a hook that sees it again does nothing).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fed: Option<String>,
}

fn yes() -> bool {
    true
}

/// One run of a framework adapter: the host and what it awaits.
#[derive(Debug, Clone, PartialEq)]
pub struct Session {
    host: Host,
    turn: Turn,
    deadline: bool,
    /// A step paused on `verify`, and the reply it is about.
    paused: Option<(Step, Option<Reply>)>,
}

#[derive(Serialize)]
struct SavedRef<'a> {
    turn: &'a Turn,
    host: &'a serde_json::value::RawValue,
}

#[derive(Deserialize)]
struct Saved<'a> {
    turn: Turn,
    #[serde(borrow)]
    host: &'a serde_json::value::RawValue,
}

impl Session {
    /// A run of the task of `messages` (the first user message) under `policy`, started at
    /// `now_ms`; its first step calls the model.
    pub fn start(
        policy: Policy,
        messages: &[Value],
        now_ms: u64,
    ) -> Result<(Session, Step), InputError> {
        let deadline = policy.deadline_ms.is_some();
        let host = Host::new(policy, messages::task_of(messages), None)?;
        let mut session = Session {
            host,
            turn: Turn {
                started_ms: now_ms,
                tools: true,
                ..Turn::default()
            },
            deadline,
            paused: None,
        };
        let step = session.drain(Step::default(), None)?;
        Ok((session, step))
    }

    /// The host (machine, journal, report).
    pub fn host(&self) -> &Host {
        &self.host
    }

    /// What the run awaits.
    pub fn turn(&self) -> &Turn {
        &self.turn
    }

    /// Whether the run ended.
    pub fn ended(&self) -> bool {
        self.turn.ended
    }

    /// Whether a tool turn waits for its results.
    pub fn batch_out(&self) -> bool {
        self.turn.batch || !self.turn.awaiting.is_empty()
    }

    /// The model's reply (`offered`: the tools the call offered, when the host knows them, with
    /// their schemas when it has them). `None` when this reply was fed already.
    pub fn reply(
        &mut self,
        message: &Value,
        offered: Option<Vec<Offered>>,
        now_ms: u64,
    ) -> Result<Option<Step>, InputError> {
        self.answer_reply(message, offered, &[], now_ms)
    }

    /// [`Session::reply`] for a reply that may give a structured answer: a call of one of
    /// `output_tools` (the framework's output tools, Pydantic AI's `final_result`, LangChain's
    /// `response_format`) is the model's completion claim, not a tool call; its arguments' JSON
    /// is the reply's text.
    pub fn answer_reply(
        &mut self,
        message: &Value,
        offered: Option<Vec<Offered>>,
        output_tools: &[String],
        now_ms: u64,
    ) -> Result<Option<Step>, InputError> {
        let mut reply = messages::reply_of(message, "message")?;
        reply.claim_outputs(output_tools);
        if reply.id.is_some() && reply.id == self.turn.fed {
            return Ok(None);
        }
        if self.turn.ended {
            // The run ended before this reply (on the results before it): its calls are
            // answered "not run", an empty one dropped.
            let mut step = Step {
                jump: Some(Jump::End),
                report: Some(self.host.report_json()),
                ..Step::default()
            };
            self.answer(&mut step, &reply);
            return Ok(Some(step));
        }
        let mut turn = reply.turn.clone();
        turn.tools = offered;
        let id = reply.id.clone();
        let step = self.feed(EventIn::ModelTurn(turn), now_ms, Some(reply))?;
        // Fed only once the kernel took it: a reply refused (a verdict pending) can come again.
        self.turn.fed = id;
        Ok(Some(step))
    }

    /// The results of the tool turn out, read from the conversation after its last reply (a
    /// call with none failed: no result came back). `None` when no tool turn is out.
    pub fn results(&mut self, messages: &[Value], now_ms: u64) -> Result<Option<Step>, InputError> {
        if !self.batch_out() || self.turn.ended {
            return Ok(None);
        }
        let found = messages::last_results(messages);
        let mut by_id: BTreeMap<&str, &Found> = BTreeMap::new();
        for f in &found {
            by_id.entry(f.call_id.as_str()).or_insert(f);
        }
        let before = self.turn.clone();
        let awaiting = std::mem::take(&mut self.turn.awaiting);
        let pollers = &self.host.machine().policy().pollers;
        let results = awaiting
            .iter()
            .map(|(id, name)| {
                // A declared poller's result goes as its text: the kernel quotes it to a model
                // that stops polling (docs/design.md, "Long-running tools").
                let quoted = pollers.iter().any(|p| p.as_str() == name.as_str());
                messages::result_of(id, name, by_id.get(id.as_str()).copied(), quoted)
            })
            .collect();
        // The last result answering an awaited call: where the notices go.
        let notice_to = found
            .iter()
            .find(|f| awaiting.iter().any(|(id, _)| *id == f.call_id))
            .map(|f| f.id.clone().unwrap_or_else(|| f.call_id.clone()));
        self.turn.refused.clear();
        self.turn.warnings.clear();
        self.turn.batch = false;
        let mut step = match self.feed(EventIn::ToolResults(results), now_ms, None) {
            Ok(step) => step,
            Err(e) => {
                // Refused (a verdict pending): the tool turn is still out, as it was.
                self.turn = before;
                return Err(e);
            }
        };
        if step.verify.is_none()
            && let Some(target) = notice_to
        {
            step.ride_on(target);
        }
        Ok(Some(step))
    }

    /// A failed model call, of the kernel's class (`retry_after_ms`: the delay the provider
    /// asked for): call again after `delay_ms`, or the run ended `model_error`.
    pub fn model_error(
        &mut self,
        kind: ModelErrorKind,
        retry_after_ms: Option<u64>,
        now_ms: u64,
    ) -> Result<Step, InputError> {
        self.feed(
            EventIn::ModelError(ModelErrorIn {
                kind,
                retry_after_ms,
            }),
            now_ms,
            None,
        )
    }

    /// The verifier's verdict on the paused step's `verify`: the step goes on.
    pub fn verdict(&mut self, verdict: VerdictIn) -> Result<Step, InputError> {
        let (mut step, reply) = match self.paused.take() {
            Some(paused) => paused,
            // A session restored while a verification was pending (a snapshot keeps the
            // machine, not the paused step): the verdict goes on with a fresh step.
            None if self.host.phase() == Phase::Verifying => (Step::default(), None),
            None => return Err(InputError::at("verdict", "no verification is pending")),
        };
        if let Err(e) = self.host.handle(EventIn::Verdict(verdict)) {
            self.paused = Some((step, reply));
            return Err(e);
        }
        step.verify = None;
        let step = self.drain(step, reply.as_ref())?;
        Ok(self.answered(step, reply.as_ref()))
    }

    /// The rules' verdict on the pending verification, for a host without a verifier: complete
    /// when the kernel says nothing is missing (todos closed, `completion_requires` met, the
    /// output schema's first error), the missing items one by one, as `terminus run`'s rule
    /// verifier journals them. The step goes on as with [`Session::verdict`].
    pub fn verdict_by_rules(&mut self) -> Result<Step, InputError> {
        let missing = match &self.paused {
            Some((step, _)) => step.verify.as_ref().map(|v| v.missing.clone()),
            None => None,
        };
        let missing = missing.unwrap_or_else(|| {
            // Restored mid-verification: the rules read again from the machine.
            let machine = self.host.machine();
            crate::verifier::missing_by_rules(
                machine.todos(),
                machine.ledger(),
                &machine.policy().completion_requires,
            )
        });
        self.verdict(VerdictIn {
            complete: missing.is_empty(),
            feedback: None,
            missing: Some(missing),
        })
    }

    /// Ends a run something else than the kernel ended (another middleware, a `return_direct`
    /// tool, a throw): the tool turn out gets its results from `messages`, then the run is
    /// cancelled. A verification still pending (the host's verifier threw) is not judged: the
    /// claim is neither accepted nor refused, the run is cancelled. `None` when it had ended.
    pub fn finish(&mut self, messages: &[Value], now_ms: u64) -> Result<Option<Step>, InputError> {
        if self.turn.ended {
            return Ok(None);
        }
        if self.paused.take().is_some() || self.host.phase() == Phase::Verifying {
            return self.feed(EventIn::Cancel(true), now_ms, None).map(Some);
        }
        let mut step = self.results(messages, now_ms)?.unwrap_or_default();
        while step.verify.is_some() {
            // Nobody is left to ask: the rules' verdict.
            step = self.verdict_by_rules()?;
        }
        if !self.turn.ended {
            step = self.feed(EventIn::Cancel(true), now_ms, None)?;
        }
        Ok(Some(step))
    }

    /// What a tool call about to run gets, read from the turn the tool hook has (`has_tool`:
    /// the agent has a tool of that name): the kernel's refusal of it; "Not run: the run
    /// stopped (REASON)." once the run ended; "Not run: the kernel did not ask for this call."
    /// for a call not of the tool turn out; `not_found` for an awaited call of a tool the agent
    /// lacks; else run, with its budget warning. Every adapter asks it, so none words these.
    pub fn gate(turn: &Turn, call_id: &str, name: &str, has_tool: bool) -> Gate {
        if let Some(text) = turn.refused.get(call_id) {
            return Gate::Refuse(Answer {
                tool_call_id: call_id.to_owned(),
                name: name.to_owned(),
                content: text.clone(),
                error: None,
            });
        }
        let refuse = |content: String| {
            Gate::Refuse(Answer {
                tool_call_id: call_id.to_owned(),
                name: name.to_owned(),
                content,
                error: None,
            })
        };
        if turn.ended {
            return refuse(not_run(turn.stopped.as_deref()));
        }
        let awaited = turn.awaiting.iter().any(|(id, _)| id == call_id);
        if !awaited && has_tool && !turn.awaiting.is_empty() {
            // While a tool turn is out, a call not of it (another middleware's, a framework's
            // retry of a call already answered) is not run: the kernel counts only what it
            // asked for. With no turn out the host is outside the kernel's steps: it runs.
            return refuse("Not run: the kernel did not ask for this call.".to_owned());
        }
        if awaited && !has_tool {
            return Gate::Refuse(Answer {
                tool_call_id: call_id.to_owned(),
                name: name.to_owned(),
                content: format!("there is no tool named `{name}`"),
                error: Some("not_found".to_owned()),
            });
        }
        Gate::Run {
            warning: turn.warnings.get(call_id).cloned(),
        }
    }

    /// The session as JSON text: the turn and the host's snapshot.
    pub fn snapshot(&self) -> String {
        let host = self.host.snapshot();
        let raw = serde_json::value::RawValue::from_string(host).ok();
        match raw {
            Some(raw) => serde_json::to_string(&SavedRef {
                turn: &self.turn,
                host: &raw,
            })
            .unwrap_or_default(),
            None => String::new(),
        }
    }

    /// The session as bytes for a host's state: [`Session::snapshot`]'s UTF-8 text, or that text
    /// zlib-compressed from [`PACK_AT`] bytes on (a JSON object starts with `{`, a zlib stream
    /// never does). The snapshot keeps the machine and the last steps of the journal, so its size
    /// does not grow with the run; a checkpointer may store it at every step, and compressed
    /// (about 6 times smaller) every checkpoint stays small.
    pub fn pack(&self) -> Vec<u8> {
        let text = self.snapshot().into_bytes();
        if text.len() < PACK_AT {
            return text;
        }
        let mut encoder = ZlibEncoder::new(Vec::with_capacity(text.len() / 4), Compression::fast());
        // Writing to a `Vec` cannot fail.
        match encoder.write_all(&text).and_then(|()| encoder.finish()) {
            Ok(packed) => packed,
            Err(_) => text,
        }
    }

    /// A session from [`Session::pack`]'s bytes (either form); bytes that are neither are an
    /// error naming `at`.
    pub fn unpack(bytes: &[u8], at: &str) -> Result<Session, InputError> {
        let not =
            |e: &dyn std::fmt::Display| InputError::at(at, format!("not a machine snapshot ({e})"));
        let text = if bytes.first() == Some(&b'{') {
            std::str::from_utf8(bytes).map_err(|e| not(&e))?.to_owned()
        } else {
            let mut text = String::new();
            ZlibDecoder::new(bytes)
                .read_to_string(&mut text)
                .map_err(|e| not(&e))?;
            text
        };
        Session::restore(&text).map_err(|e| not(&e))
    }

    /// A session saved by [`Session::snapshot`]; text from outside is checked as
    /// [`Host::restore`] checks it.
    pub fn restore(text: &str) -> Result<Session, InputError> {
        let de = &mut serde_json::Deserializer::from_str(text);
        let saved: Saved<'_> = serde_path_to_error::deserialize(de)
            .map_err(|e| InputError::from_serde("session", &e))?;
        let host = Host::restore(saved.host.get())?;
        let deadline = host.machine().policy().deadline_ms.is_some();
        Ok(Session {
            host,
            turn: saved.turn,
            deadline,
            paused: None,
        })
    }

    /// Feeds one event (after a clock reading when the policy has a deadline) and drains.
    fn feed(
        &mut self,
        event: EventIn,
        now_ms: u64,
        reply: Option<Reply>,
    ) -> Result<Step, InputError> {
        if self.paused.is_some() {
            return Err(InputError::at(
                "event",
                "a verification is pending: answer it with a verdict first",
            ));
        }
        let mut step = Step::default();
        if self.deadline {
            let now = now_ms.saturating_sub(self.turn.started_ms);
            self.host.handle(EventIn::Tick(now))?;
            step = self.drain(step, reply.as_ref())?;
            if self.turn.ended || step.verify.is_some() {
                return Ok(self.answered(step, reply.as_ref()));
            }
        }
        self.host.handle(event)?;
        let step = self.drain(step, reply.as_ref())?;
        Ok(self.answered(step, reply.as_ref()))
    }

    /// `step` with the reply's calls answered, unless it is paused on a verification.
    fn answered(&self, mut step: Step, reply: Option<&Reply>) -> Step {
        if let (Some(reply), None) = (reply, &step.verify) {
            self.answer(&mut step, reply);
        }
        step
    }

    /// Carries out the kernel's commands into `step`.
    fn drain(&mut self, mut step: Step, reply: Option<&Reply>) -> Result<Step, InputError> {
        let mut written = None;
        while let Some(command) = self.host.next_command() {
            match command {
                CommandOut::Nudge { text } => step.nudges.push(text),
                CommandOut::Notice { text } => {
                    step.notice_at.push(step.nudges.len());
                    step.nudges.push(text);
                }
                CommandOut::CallModel { delay_ms, tools } => {
                    self.turn.delay_ms = delay_ms;
                    self.turn.tools = tools;
                    step.jump = Some(Jump::Model);
                }
                CommandOut::RunTools {
                    calls,
                    refused,
                    warnings,
                    written: text,
                } => {
                    self.turn.awaiting = calls
                        .iter()
                        .map(|c| (c.id.clone(), c.name.clone()))
                        .collect();
                    self.turn.batch = true;
                    self.turn.refused = refused.into_iter().map(|r| (r.id, r.text)).collect();
                    self.turn.warnings = warnings.into_iter().map(|w| (w.id, w.text)).collect();
                    if let Some(text) = text {
                        written = Some(Written {
                            text,
                            tool_calls: calls,
                        });
                    }
                    step.jump = Some(Jump::Tools);
                }
                CommandOut::Verify {
                    claim,
                    todos,
                    missing,
                } => {
                    step.verify = Some(Verify {
                        claim,
                        todos,
                        missing,
                    });
                    step.written = written.or(step.written);
                    self.paused = Some((step.clone(), reply.cloned()));
                    return Ok(step);
                }
                CommandOut::Checkpoint { prompt, note, .. } => {
                    step.checkpoint = Some(Checkpoint { prompt, note });
                }
                CommandOut::Stop { report } => {
                    self.turn.ended = true;
                    self.turn.stopped = report
                        .get("reason")
                        .and_then(Value::as_str)
                        .map(str::to_owned);
                    step.report = Some(report);
                    step.jump = Some(Jump::End);
                }
            }
        }
        if written.is_some() {
            step.written = written;
        }
        step.delay_ms = self.turn.delay_ms;
        step.tools = self.turn.tools;
        Ok(step)
    }

    /// What the reply's calls get when they are not all run by the framework: an empty reply is
    /// dropped, a tool turn the run stopped on has each call answered "not run", calls whose
    /// arguments did not parse are answered (an error the model can fix, or the refusal).
    fn answer(&self, step: &mut Step, reply: &Reply) {
        let calls: Vec<(String, String)> = match &step.written {
            Some(w) => w
                .tool_calls
                .iter()
                .map(|c| (c.id.clone(), c.name.clone()))
                .collect(),
            None => reply
                .turn
                .tool_calls
                .iter()
                .flatten()
                .map(|c| (c.id.clone().unwrap_or_default(), c.name.clone()))
                .collect(),
        };
        let text = reply.turn.text.as_deref().unwrap_or_default();
        if calls.is_empty() && text.trim().is_empty() {
            step.drop_reply = true;
        }
        match step.jump {
            Some(Jump::End) => {
                let report = step.report.as_ref();
                let field = |key| report.and_then(|r| r.get(key)).and_then(Value::as_str);
                let reason = field("reason").unwrap_or("stopped").to_owned();
                // A structured answer the kernel accepted is the run's answer, unless other
                // calls came with it: then nothing of the reply runs, the claim neither.
                let accepted = field("outcome") == Some("complete") && calls.is_empty();
                let not_run = |(id, name): (String, String)| Answer {
                    tool_call_id: id,
                    name,
                    content: not_run(Some(&reason)),
                    error: None,
                };
                step.answers = calls.into_iter().map(not_run).collect();
                if !accepted {
                    step.claims = reply.claims.iter().cloned().map(not_run).collect();
                }
            }
            Some(Jump::Tools) if step.written.is_none() => {
                for (id, name, answer) in &reply.invalid {
                    let (content, kind) = if let Some(text) = self.turn.refused.get(id) {
                        (text.clone(), None)
                    } else if self.turn.awaiting.iter().any(|(a, _)| a == id) {
                        (answer.clone(), Some("invalid_arguments".to_owned()))
                    } else {
                        continue;
                    };
                    step.answers.push(Answer {
                        tool_call_id: id.clone(),
                        name: name.clone(),
                        content,
                        error: kind,
                    });
                }
                let valid = calls.len() > reply.invalid.len();
                if !valid {
                    // Nothing left for the framework to run: back to the model, with the answers.
                    step.jump = Some(Jump::Model);
                }
            }
            _ => {}
        }
        if step.jump == Some(Jump::Model) {
            // A structured answer the kernel refused: each claim gets its answer (the history
            // stays valid), and the nudge that follows says why.
            step.claims
                .extend(reply.claims.iter().map(|(id, name)| Answer {
                    tool_call_id: id.clone(),
                    name: name.clone(),
                    content: NOT_ACCEPTED.to_owned(),
                    error: None,
                }));
        }
    }
}

/// What the call of an output tool (a structured answer) the kernel refused gets as its result;
/// the kernel's nudge follows it.
const NOT_ACCEPTED: &str = "Not accepted yet.";

/// What a call the run stopped before gets instead of a result.
fn not_run(reason: Option<&str>) -> String {
    format!(
        "Not run: the run stopped ({}).",
        reason.unwrap_or("stopped")
    )
}
