//! The journal model (pure): what a durable run records, and the deterministic idempotency keys
//! that make a replayed append find the entry it already wrote.
//!
//! Layout. Checkpoint `n` holds what happened at step `n` of the machine: entry `e0` is the event
//! that made the step (or, at checkpoint 0, the task), `e1` the transition, then the commands the
//! step emitted: guidance, then one intent per executed tool call (`e2 + j`), then, as they
//! arrive, one result per executed call (`e2 + k + j`, where `k` calls were executed). Keys are a
//! function of the step and the call's position only, never of arrival order or of a counter
//! kept across processes, so replaying a journal writes exactly the same keys: scheduled tool
//! executions are keyed from 0 on every replay.

use crate::command::{Command, Notice, Nudge, Stop, ToolBatch};
use crate::event::{Event, ModelErrorKind, ModelTurn, ToolCall, ToolResult, Verdict};
use crate::hold::{Decision, HeldCall, Hold, Question};
use crate::json::Json;
use crate::machine::Machine;
use crate::policy::{Policy, PolicyError};
use crate::raise::Raise;
use crate::step::{Handled, StepRecord};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::fmt;
use std::str::FromStr;

/// A deterministic idempotency key, `cp{checkpoint}:e{index}`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(into = "String", try_from = "String")]
pub struct Key {
    /// The machine step the entry belongs to (0: before the first step).
    pub checkpoint: u32,
    /// The entry's position within its checkpoint.
    pub index: u32,
}

impl Key {
    /// `cp{checkpoint}:e{index}`.
    pub const fn new(checkpoint: u32, index: u32) -> Key {
        Key { checkpoint, index }
    }

    /// The key of the event that made step `checkpoint` (or the task at checkpoint 0).
    pub const fn event(checkpoint: u32) -> Key {
        Key::new(checkpoint, 0)
    }

    /// The key of the transition record of step `checkpoint`.
    pub const fn transition(checkpoint: u32) -> Key {
        Key::new(checkpoint, 1)
    }

    /// The key of guidance entry `i` (nudges, notices) emitted by step `checkpoint`. Guidance uses
    /// indexes from 2 up to the stop record's, so `i` < [`Key::MAX_GUIDANCE`]; one step emits at
    /// most two guidance commands (results: one notice of every tool the step excluded and one of
    /// a first repeat; a turn or a verdict: one nudge), far below the limit.
    pub const fn guidance(checkpoint: u32, i: u32) -> Key {
        debug_assert!(i < Self::MAX_GUIDANCE, "guidance index out of range");
        Key::new(checkpoint, 2 + i)
    }

    /// The key of the checkpoint written for the agent after step `checkpoint` (its
    /// [`Command::Checkpoint`]), once the host has the summary: after the step's guidance.
    pub const fn written_checkpoint(checkpoint: u32) -> Key {
        Key::new(checkpoint, Self::FIRST_CALL - 2)
    }

    /// The key of the stop record written by the final step `checkpoint`.
    pub const fn stop(checkpoint: u32) -> Key {
        Key::new(checkpoint, Self::FIRST_CALL - 1)
    }

    /// Index of the first tool intent of a checkpoint (guidance entries come before it).
    pub const FIRST_CALL: u32 = 16;

    /// How many guidance entries one step can key: indexes 2 to 13 (a written checkpoint is 14,
    /// the stop record 15).
    pub const MAX_GUIDANCE: u32 = Self::FIRST_CALL - 4;

    /// The key of the intent of executed call `j` of step `checkpoint`.
    pub const fn intent(checkpoint: u32, j: u32) -> Key {
        Key::new(checkpoint, Self::FIRST_CALL + j)
    }

    /// The key of the result of executed call `j` of `calls` executed calls of step `checkpoint`.
    pub const fn result(checkpoint: u32, calls: u32, j: u32) -> Key {
        Key::new(checkpoint, Self::FIRST_CALL + calls + j)
    }

    /// The key of the hold of executed call `j` of `calls` (a call held for a decision: written
    /// instead of its intent).
    pub const fn held(checkpoint: u32, calls: u32, j: u32) -> Key {
        Key::new(checkpoint, Self::FIRST_CALL + 2 * calls + j)
    }

    /// The key of the decision on held call `j` of `calls`.
    pub const fn decision(checkpoint: u32, calls: u32, j: u32) -> Key {
        Key::new(checkpoint, Self::FIRST_CALL + 3 * calls + j)
    }

    /// The key of the second intent of executed call `j` of `calls`: a call held after it ran
    /// ([`Hold::Elicitation`]) runs again once decided, and this intent is written before it
    /// does (its first intent is at [`Key::intent`]).
    pub const fn rerun(checkpoint: u32, calls: u32, j: u32) -> Key {
        Key::new(checkpoint, Self::FIRST_CALL + 4 * calls + j)
    }

    /// The key of the job executed call `j` of `calls` started ([`Entry::Started`]): a call that
    /// starts a job outliving the process (an MCP task) journals its handle here, after its
    /// intent and before it waits, so a resume waits for that job instead of starting another.
    pub const fn started(checkpoint: u32, calls: u32, j: u32) -> Key {
        Key::new(checkpoint, Self::FIRST_CALL + 5 * calls + j)
    }
}

impl fmt::Display for Key {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "cp{}:e{}", self.checkpoint, self.index)
    }
}

impl From<Key> for String {
    fn from(k: Key) -> String {
        k.to_string()
    }
}

/// A string that is not a `cp{n}:e{i}` key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyError(pub String);

impl fmt::Display for KeyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "not an idempotency key of the form cp{{n}}:e{{i}}: {:?}",
            self.0
        )
    }
}

impl std::error::Error for KeyError {}

impl FromStr for Key {
    type Err = KeyError;
    fn from_str(s: &str) -> Result<Key, KeyError> {
        let bad = || KeyError(s.to_owned());
        let rest = s.strip_prefix("cp").ok_or_else(bad)?;
        let (cp, e) = rest.split_once(":e").ok_or_else(bad)?;
        let digits = |t: &str| !t.is_empty() && t.bytes().all(|b| b.is_ascii_digit());
        if !digits(cp) || !digits(e) {
            return Err(bad());
        }
        Ok(Key {
            checkpoint: cp.parse().map_err(|_| bad())?,
            index: e.parse().map_err(|_| bad())?,
        })
    }
}

impl TryFrom<String> for Key {
    type Error = KeyError;
    fn try_from(s: String) -> Result<Key, KeyError> {
        s.parse()
    }
}

/// One journal entry. In JSON the entry kind is the `"entry"` field (not `"kind"`: payloads such
/// as [`Nudge`] have a `kind` field of their own).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "entry", rename_all = "snake_case")]
pub enum Entry {
    /// The task (checkpoint 0).
    User {
        /// The task text.
        task: String,
    },
    /// A model turn (the event of its step).
    Assistant(ModelTurn),
    /// A failed model call (the event of its step).
    ModelError {
        /// The class.
        error: ModelErrorKind,
        /// The provider's requested delay.
        retry_after_ms: Option<u64>,
    },
    /// The batch of tool results fed as one event.
    ToolResults {
        /// The results, in call order.
        results: Vec<ToolResult>,
    },
    /// A verdict (the event of its step).
    Verdict(Verdict),
    /// A clock reading that made a step (the deadline passed).
    Tick {
        /// Milliseconds since the start of the run.
        now_ms: u64,
    },
    /// The kill switch (the event of its step).
    Cancel,
    /// The transition a step took.
    Transition(StepRecord),
    /// Guidance the kernel sent.
    Nudge(Nudge),
    /// A notice the kernel sent (journals of the first edition hold one-tool notices: read too).
    Notice(#[serde(deserialize_with = "crate::command::any_notice")] Notice),
    /// A tool call about to execute (written before it runs).
    ToolCall {
        /// The call.
        call: ToolCall,
        /// Whether running it twice is harmless.
        idempotent: bool,
    },
    /// The result of one executed call (written when it arrives).
    ToolResult(ToolResult),
    /// A call held for a decision from outside (written instead of its intent): it runs, or is
    /// answered, only once decided. A call held after it ran ([`Hold::Elicitation`]) has its
    /// intent too, and this record, written when its run ended with the question, says that run
    /// had no effect: the call runs again once decided, after a [`Key::rerun`] intent.
    Held {
        /// The call.
        call: ToolCall,
        /// Why it is held.
        hold: Hold,
        /// The question the call asked ([`Hold::Elicitation`] only).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        question: Option<Question>,
    },
    /// The decision on a held call (written by whoever decided, while the run was suspended).
    Decided {
        /// The held call's id.
        call_id: crate::name::CallId,
        /// The decision.
        decision: Decision,
    },
    /// A checkpoint written for the agent (`policy.auto_checkpoints`), answering the step's
    /// [`Command::Checkpoint`]: what the conversation says before it, and the model's summary.
    Checkpoint {
        /// The kernel's words before the summary ([`crate::CheckpointRequest::note`]).
        note: String,
        /// The summary of the findings so far.
        text: String,
    },
    /// The job a running call started (an MCP task), written once the tool has its handle and
    /// before it waits for it ([`Key::started`]): a resume finds the call
    /// [`CallState::Started`] and waits for this job, never calling the tool again.
    Started {
        /// The call's id.
        call_id: crate::name::CallId,
        /// The job's handle, as the tool gave it (for an MCP task: its server and task id).
        job: Value,
    },
    /// The end of the run.
    Stop(Stop),
    /// Budgets raised after a budget stop (`terminus resume --raise`): the event of the step
    /// that takes the pre-empted step (see [`Machine::raise`]).
    Raised {
        /// The raised fields, with their new values.
        raises: Vec<Raise>,
    },
}

impl Entry {
    /// The entry for an event fed to the machine.
    pub fn from_event(event: &Event) -> Entry {
        match event {
            Event::ModelTurn(t) => Entry::Assistant(t.clone()),
            Event::ModelError {
                kind,
                retry_after_ms,
            } => Entry::ModelError {
                error: *kind,
                retry_after_ms: *retry_after_ms,
            },
            Event::ToolResults(r) => Entry::ToolResults { results: r.clone() },
            Event::Verdict(v) => Entry::Verdict(v.clone()),
            Event::Tick { now_ms } => Entry::Tick { now_ms: *now_ms },
            Event::Cancel => Entry::Cancel,
        }
    }

    /// The event this entry replays, if it is one of the machine's inputs.
    pub fn to_event(&self) -> Option<Event> {
        Some(match self {
            Entry::Assistant(t) => Event::ModelTurn(t.clone()),
            Entry::ModelError {
                error,
                retry_after_ms,
            } => Event::ModelError {
                kind: *error,
                retry_after_ms: *retry_after_ms,
            },
            Entry::ToolResults { results } => Event::ToolResults(results.clone()),
            Entry::Verdict(v) => Event::Verdict(v.clone()),
            Entry::Tick { now_ms } => Event::Tick { now_ms: *now_ms },
            Entry::Cancel => Event::Cancel,
            _ => return None,
        })
    }

    /// The snake_case kind name.
    pub const fn kind(&self) -> &'static str {
        match self {
            Entry::User { .. } => "user",
            Entry::Assistant(_) => "assistant",
            Entry::ModelError { .. } => "model_error",
            Entry::ToolResults { .. } => "tool_results",
            Entry::Verdict(_) => "verdict",
            Entry::Tick { .. } => "tick",
            Entry::Cancel => "cancel",
            Entry::Transition(_) => "transition",
            Entry::Nudge(_) => "nudge",
            Entry::Notice(_) => "notice",
            Entry::ToolCall { .. } => "tool_call",
            Entry::ToolResult(_) => "tool_result",
            Entry::Held { .. } => "held",
            Entry::Decided { .. } => "decided",
            Entry::Checkpoint { .. } => "checkpoint",
            Entry::Started { .. } => "started",
            Entry::Stop(_) => "stop",
            Entry::Raised { .. } => "raised",
        }
    }
}

/// A keyed entry as stored.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Record {
    /// Its idempotency key.
    pub key: Key,
    /// The entry.
    pub entry: Entry,
}

/// The records one step writes before its commands are carried out: the event (`e0`), the
/// transition (`e1`), guidance (`e2..`), the stop record, and an intent per executed tool call.
/// `idempotent` says, per tool name, whether running a call twice is harmless.
pub fn step_records(
    event: &Event,
    step: &StepRecord,
    commands: &[Command],
    idempotent: impl Fn(&str) -> bool,
) -> Vec<Record> {
    let mut out = vec![Record {
        key: Key::event(step.step),
        entry: Entry::from_event(event),
    }];
    out.extend(decision_records(step, commands, idempotent));
    out
}

/// The records of [`step_records`] after the event: what the step decided. A host that writes
/// the event ahead (before the machine sees it) writes these once the step is taken.
pub fn decision_records(
    step: &StepRecord,
    commands: &[Command],
    idempotent: impl Fn(&str) -> bool,
) -> Vec<Record> {
    held_decision_records(step, commands, |name| (idempotent(name), None))
}

/// [`decision_records`] for a host with held tools: `tool` says, per tool name, whether running
/// a call twice is harmless and whether its calls are held for a decision. A held call gets a
/// [`Entry::Held`] record under [`Key::held`] instead of an intent: it is not about to run.
pub fn held_decision_records(
    step: &StepRecord,
    commands: &[Command],
    tool: impl Fn(&str) -> (bool, Option<Hold>),
) -> Vec<Record> {
    decisions(step, commands, tool, ToolCall::clone)
}

/// [`decision_records`] without the calls' arguments (each intent's `arguments` is `null`), for
/// a host that keeps its records only to explain a run and would copy each call's arguments
/// just to drop them; every key and every other field is that of [`decision_records`].
pub fn lean_decision_records(step: &StepRecord, commands: &[Command]) -> Vec<Record> {
    decisions(
        step,
        commands,
        |_| (true, None),
        |call| ToolCall {
            id: call.id.clone(),
            name: call.name.clone(),
            arguments: Json::from(Value::Null),
        },
    )
}

fn decisions(
    step: &StepRecord,
    commands: &[Command],
    tool: impl Fn(&str) -> (bool, Option<Hold>),
    copy: impl Fn(&ToolCall) -> ToolCall,
) -> Vec<Record> {
    let cp = step.step;
    let mut out = vec![Record {
        key: Key::transition(cp),
        entry: Entry::Transition(*step),
    }];
    let mut guidance = 0u32;
    for c in commands {
        match c {
            Command::Nudge(n) => {
                out.push(Record {
                    key: Key::guidance(cp, guidance),
                    entry: Entry::Nudge((**n).clone()),
                });
                guidance += 1;
            }
            Command::Notice(n) => {
                out.push(Record {
                    key: Key::guidance(cp, guidance),
                    entry: Entry::Notice(n.clone()),
                });
                guidance += 1;
            }
            Command::Stop(s) => out.push(Record {
                key: Key::stop(cp),
                entry: Entry::Stop((**s).clone()),
            }),
            Command::RunTools(batch) => {
                let k = u32::try_from(executed(batch).count()).unwrap_or(u32::MAX);
                for (j, call) in executed(batch).enumerate() {
                    let j = u32::try_from(j).unwrap_or(u32::MAX);
                    let (idempotent, hold) = tool(&call.name);
                    out.push(match hold {
                        Some(hold) => Record {
                            key: Key::held(cp, k, j),
                            entry: Entry::Held {
                                call: copy(call),
                                hold,
                                question: None,
                            },
                        },
                        None => Record {
                            key: Key::intent(cp, j),
                            entry: Entry::ToolCall {
                                call: copy(call),
                                idempotent,
                            },
                        },
                    });
                }
            }
            // The summary is journaled once the host has it (`Key::written_checkpoint`).
            Command::CallModel(_) | Command::Verify(_) | Command::Checkpoint(_) => {}
        }
    }
    out
}

/// The calls of a batch that are executed (not refused), in order; their position is `j`.
pub fn executed(batch: &ToolBatch) -> impl Iterator<Item = &ToolCall> {
    batch
        .calls
        .iter()
        .enumerate()
        .filter(|(i, _)| batch.refusal(*i).is_none())
        .map(|(_, c)| c)
}

/// Why a journal cannot be replayed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RecoverError {
    /// The journal does not start with the task at `cp0:e0`.
    NoTask,
    /// The policy is invalid.
    Policy(PolicyError),
    /// Replaying the journal took a different path than the one it recorded (a corrupt journal,
    /// or a journal written by an incompatible kernel).
    Diverged {
        /// The first record that disagrees.
        key: Key,
        /// What differs.
        detail: String,
    },
}

impl fmt::Display for RecoverError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RecoverError::NoTask => write!(f, "the journal does not start with the task at cp0:e0"),
            RecoverError::Policy(e) => write!(f, "{e}"),
            RecoverError::Diverged { key, detail } => {
                write!(f, "replay diverged from the journal at {key}: {detail}")
            }
        }
    }
}

impl std::error::Error for RecoverError {}

/// A tool call of the pending batch, as the journal knows it.
#[derive(Debug, Clone, PartialEq)]
pub enum CallState {
    /// No intent was written: the call never started.
    NotStarted,
    /// An intent and no result: the call may or may not have had its effect.
    InDoubt {
        /// Whether the tool said running twice is harmless.
        idempotent: bool,
    },
    /// An intent and the job the call started ([`Entry::Started`]), no result: the job may
    /// still run. A resume waits for it; the call is not made again.
    Started {
        /// Whether the tool said running twice is harmless (what a job its server no longer
        /// knows falls back on: the in-doubt rule).
        idempotent: bool,
        /// The job's handle, as journaled.
        job: Value,
    },
    /// The result is journaled: never run it again.
    Done(ToolResult),
}

/// A machine rebuilt from a journal, and what is left to do.
#[derive(Debug, Clone)]
pub struct Recovery {
    /// The machine, exactly as the original run left it after its last journaled event.
    pub machine: Machine,
    /// The task.
    pub task: String,
    /// Commands emitted after the last journaled event, not yet carried out.
    pub outstanding: Vec<Command>,
    /// For the outstanding `RunTools`, the state of each executed call `j`.
    pub calls: Vec<CallState>,
    /// For the outstanding `RunTools`, each executed call `j` held for a decision, with the
    /// decision once journaled (`None`: not held).
    pub held: Vec<Option<HeldCall>>,
    /// Records read.
    pub records: u64,
    /// Model calls answered in the journal (turns and errors): a scripted model resumes after them.
    pub model_answers: u64,
    /// Results journaled per tool name, of calls the tool answered (not those a decision
    /// answered): a scripted tool resumes after them.
    pub tool_answers: std::collections::BTreeMap<String, u64>,
}

/// Rebuilds a machine by feeding the journal's events to a fresh one. Records are consumed one at
/// a time in key order, so a long journal can be streamed in pages; only the machine and the
/// pending tool batch are held. Every transition record is compared with the replayed one.
pub fn recover(
    policy: Policy,
    records: impl IntoIterator<Item = Record>,
) -> Result<Recovery, RecoverError> {
    let mut it = records.into_iter();
    let first = it.next().ok_or(RecoverError::NoTask)?;
    let mut replay = Replay::start(policy, first)?;
    for record in it {
        replay.push(record)?;
    }
    Ok(replay.finish())
}

/// An incremental [`recover`]: [`Replay::push`] one record at a time, in key order (a host that
/// pages its journal out of a database feeds each page as it arrives), and read what the last
/// replayed event produced with [`Replay::outstanding`] (a host rebuilding its conversation
/// needs the nudges, notices and tool batches exactly as the live run carried them out).
#[derive(Debug, Clone)]
pub struct Replay {
    machine: Machine,
    task: String,
    outstanding: Vec<Command>,
    calls: Vec<CallState>,
    held: Vec<Option<HeldCall>>,
    last_step: Option<StepRecord>,
    records: u64,
    model_answers: u64,
    tool_answers: std::collections::BTreeMap<String, u64>,
}

impl Replay {
    /// Starts from the first record, which must be the task at `cp0:e0`.
    pub fn start(policy: Policy, first: Record) -> Result<Replay, RecoverError> {
        let task = match first {
            Record {
                key,
                entry: Entry::User { task },
            } if key == Key::event(0) => task,
            _ => return Err(RecoverError::NoTask),
        };
        let mut machine = Machine::new(policy).map_err(RecoverError::Policy)?;
        let outstanding: Vec<Command> = std::iter::from_fn(|| machine.poll_command()).collect();
        Ok(Replay {
            machine,
            task,
            outstanding,
            calls: Vec::new(),
            held: Vec::new(),
            last_step: None,
            records: 1,
            model_answers: 0,
            tool_answers: std::collections::BTreeMap::new(),
        })
    }

    /// The machine as replayed so far.
    pub fn machine(&self) -> &Machine {
        &self.machine
    }

    /// The commands the last replayed event produced (or the first command of the run).
    pub fn outstanding(&self) -> &[Command] {
        &self.outstanding
    }

    /// Replays one record. Events step the machine; transition records are checked against the
    /// replayed step; intents and results classify the pending calls.
    pub fn push(&mut self, record: Record) -> Result<(), RecoverError> {
        let Record { key, entry } = record;
        self.records += 1;
        let diverged = |detail: String| RecoverError::Diverged { key, detail };
        match entry {
            Entry::Transition(recorded) => match self.last_step {
                Some(replayed) if replayed == recorded && key == Key::transition(replayed.step) => {
                }
                _ => {
                    return Err(diverged(format!(
                        "recorded {recorded}, replayed {:?}",
                        self.last_step
                    )));
                }
            },
            Entry::ToolCall { idempotent, .. } => {
                let k = self.calls.len() as u32;
                let j = key
                    .index
                    .checked_sub(Key::FIRST_CALL)
                    .ok_or_else(|| diverged("intent key out of range".into()))?;
                // `Key::rerun`: the second run of a call held after it ran, once decided.
                let rerun = k > 0 && j >= 4 * k;
                let j = if rerun { j - 4 * k } else { j };
                if rerun
                    && !self.held.get(j as usize).is_some_and(|h| {
                        h.as_ref()
                            .is_some_and(|h| h.hold == Hold::Elicitation && h.decision.is_some())
                    })
                {
                    return Err(diverged(
                        "a second intent of a call not decided after it ran".into(),
                    ));
                }
                let slot = self
                    .calls
                    .get_mut(j as usize)
                    .ok_or_else(|| diverged("intent for a call that was not scheduled".into()))?;
                // The result of the second run sorts before it (`Key::result`): a call done
                // stays done.
                if !matches!(slot, CallState::Done(_)) {
                    *slot = CallState::InDoubt { idempotent };
                }
            }
            Entry::ToolResult(result) => {
                let k = self.calls.len() as u32;
                let j = key
                    .index
                    .checked_sub(Key::FIRST_CALL + k)
                    .ok_or_else(|| diverged("result key out of range".into()))?;
                let slot = self
                    .calls
                    .get_mut(j as usize)
                    .ok_or_else(|| diverged("result for a call that was not scheduled".into()))?;
                *self
                    .tool_answers
                    .entry(result.name.as_str().to_owned())
                    .or_insert(0u64) += 1;
                *slot = CallState::Done(result);
            }
            Entry::Held {
                call,
                hold,
                question,
            } => {
                let k = self.calls.len() as u32;
                let j = key
                    .index
                    .checked_sub(Key::FIRST_CALL + 2 * k)
                    .ok_or_else(|| diverged("hold key out of range".into()))?;
                let slot = self
                    .held
                    .get_mut(j as usize)
                    .ok_or_else(|| diverged("hold of a call that was not scheduled".into()))?;
                *slot = Some(HeldCall {
                    call_id: call.id,
                    hold,
                    decision: None,
                    question,
                });
                if hold == Hold::Elicitation {
                    // Held after it ran: its intent came first, and that run ended without its
                    // effect. Unless its second run is done (its result sorts first), it has
                    // not started.
                    let state = &mut self.calls[j as usize];
                    match state {
                        CallState::InDoubt { .. } | CallState::Started { .. } => {
                            *state = CallState::NotStarted;
                        }
                        CallState::Done(_) => {}
                        CallState::NotStarted => {
                            return Err(diverged("a call held after it ran has no intent".into()));
                        }
                    }
                }
            }
            Entry::Decided { call_id, decision } => {
                let k = self.calls.len() as u32;
                let j = key.index.checked_sub(Key::FIRST_CALL + 3 * k);
                let held = j
                    .and_then(|j| self.held.get_mut(j as usize))
                    .and_then(Option::as_mut)
                    .filter(|held| held.call_id == call_id)
                    .ok_or_else(|| {
                        diverged(format!("a decision on `{call_id}`, not held there"))
                    })?;
                // A call decided without running has a journaled result the tool never gave (a
                // call held after it ran runs again, whatever the decision).
                if !decision.runs()
                    && held.hold != Hold::Elicitation
                    && let Some(CallState::Done(result)) =
                        j.and_then(|j| self.calls.get(j as usize))
                    && let Some(n) = self.tool_answers.get_mut(result.name.as_str())
                {
                    *n = n.saturating_sub(1);
                }
                held.decision = Some(decision);
            }
            Entry::Started { call_id, job } => {
                let k = self.calls.len() as u32;
                let j = key
                    .index
                    .checked_sub(Key::FIRST_CALL + 5 * k)
                    .ok_or_else(|| diverged("job key out of range".into()))?;
                let slot = self
                    .calls
                    .get_mut(j as usize)
                    .ok_or_else(|| diverged(format!("a job of `{call_id}`, not scheduled")))?;
                match slot {
                    CallState::InDoubt { idempotent } | CallState::Started { idempotent, .. } => {
                        *slot = CallState::Started {
                            idempotent: *idempotent,
                            job,
                        };
                    }
                    // Its result sorts first: the job is over.
                    CallState::Done(_) => {}
                    // Held after it ran, on a question its job asked (an MCP task's
                    // `input_required`): the job waits for the person's answer, and the call's
                    // second run gives it to that job, never starting another.
                    CallState::NotStarted
                        if self
                            .held
                            .get(j as usize)
                            .and_then(Option::as_ref)
                            .is_some_and(|h| {
                                h.call_id == call_id && h.hold == Hold::Elicitation
                            }) =>
                    {
                        *slot = CallState::Started {
                            idempotent: false,
                            job,
                        };
                    }
                    CallState::NotStarted => {
                        return Err(diverged(format!(
                            "a job of `{call_id}`, which has no intent"
                        )));
                    }
                }
            }
            Entry::Nudge(_) | Entry::Notice(_) | Entry::Stop(_) => {}
            Entry::Checkpoint { .. } => {
                let written = self
                    .last_step
                    .is_some_and(|s| key == Key::written_checkpoint(s.step))
                    && self
                        .outstanding
                        .iter()
                        .any(|c| matches!(c, Command::Checkpoint(_)));
                if !written {
                    return Err(diverged(
                        "a checkpoint no step of the journal asked for".into(),
                    ));
                }
                // Written: a resume does not ask for it again.
                self.outstanding
                    .retain(|c| !matches!(c, Command::Checkpoint(_)));
            }
            Entry::User { .. } => return Err(diverged("a second task entry".into())),
            Entry::Raised { raises } => {
                let handled = self
                    .machine
                    .raise(&raises)
                    .map_err(|e| diverged(format!("the journaled raise is refused: {e}")))?;
                self.stepped(key, handled)?;
            }
            other => {
                let Some(event) = other.to_event() else {
                    return Err(diverged(format!("unexpected {} entry", other.kind())));
                };
                if matches!(event, Event::ModelTurn(_) | Event::ModelError { .. }) {
                    self.model_answers += 1;
                }
                let handled = self.machine.handle(event);
                self.stepped(key, handled)?;
            }
        }
        Ok(())
    }

    /// The journaled event at `key` was replayed as `handled`, which must be that step: what it
    /// issued is outstanding, and its tool calls are not started.
    fn stepped(&mut self, key: Key, handled: Handled) -> Result<(), RecoverError> {
        match handled {
            Handled::Step(step) if key == Key::event(step.step) => {
                self.last_step = Some(step);
            }
            h => {
                return Err(RecoverError::Diverged {
                    key,
                    detail: format!("the journaled event was not step {}: {h:?}", key.checkpoint),
                });
            }
        }
        self.outstanding.clear();
        self.outstanding
            .extend(std::iter::from_fn(|| self.machine.poll_command()));
        let k = self
            .outstanding
            .iter()
            .find_map(|c| match c {
                Command::RunTools(b) => Some(executed(b).count()),
                _ => None,
            })
            .unwrap_or(0);
        self.calls = vec![CallState::NotStarted; k];
        self.held = vec![None; k];
        Ok(())
    }

    /// The machine and what is left to do.
    pub fn finish(self) -> Recovery {
        Recovery {
            machine: self.machine,
            task: self.task,
            outstanding: self.outstanding,
            calls: self.calls,
            held: self.held,
            records: self.records,
            model_answers: self.model_answers,
            tool_answers: self.tool_answers,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A run whose one turn calls `read` and `deploy`, `deploy` held for approval: the records
    /// of its first step as a host journals them, and the task.
    fn held_turn() -> Vec<Record> {
        let mut machine = Machine::new(Policy::default()).unwrap_or_else(|e| panic!("{e}"));
        while machine.poll_command().is_some() {}
        let event = Event::ModelTurn(ModelTurn {
            tool_calls: vec![
                ToolCall::new("read-1", "read", serde_json::json!({})),
                ToolCall::new("deploy-1", "deploy", serde_json::json!({"env": "prod"})),
            ],
            ..ModelTurn::default()
        });
        let Handled::Step(step) = machine.handle(event.clone()) else {
            panic!("the turn is a step");
        };
        let commands: Vec<Command> = std::iter::from_fn(|| machine.poll_command()).collect();
        let mut records = vec![Record {
            key: Key::event(0),
            entry: Entry::User { task: "t".into() },
        }];
        records.push(Record {
            key: Key::event(step.step),
            entry: Entry::from_event(&event),
        });
        records.extend(held_decision_records(&step, &commands, |name| {
            (false, (name == "deploy").then_some(Hold::Approval))
        }));
        records
    }

    #[test]
    fn a_held_call_has_no_intent_and_replays_with_its_decision() {
        let mut records = held_turn();
        let kinds: Vec<(Key, &str)> = records.iter().map(|r| (r.key, r.entry.kind())).collect();
        // `read` (j = 0) has its intent; `deploy` (j = 1 of 2) its hold, and no intent.
        assert!(
            kinds.contains(&(Key::intent(1, 0), "tool_call")),
            "{kinds:?}"
        );
        assert!(kinds.contains(&(Key::held(1, 2, 1), "held")), "{kinds:?}");
        assert!(
            !kinds.contains(&(Key::intent(1, 1), "tool_call")),
            "{kinds:?}"
        );
        let undecided =
            recover(Policy::default(), records.clone()).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(undecided.held.len(), 2);
        assert!(undecided.held[0].is_none());
        let held = undecided.held[1]
            .clone()
            .unwrap_or_else(|| panic!("deploy is held"));
        assert_eq!(
            (held.call_id.as_str(), held.hold, held.decision),
            ("deploy-1", Hold::Approval, None)
        );
        assert_eq!(undecided.calls[1], CallState::NotStarted);

        // Denied: the decision's result is journaled as any result, and the tool never ran.
        let deny = Decision::Deny {
            reason: Some("freeze".into()),
        };
        let result = ToolResult {
            call_id: "deploy-1".into(),
            name: "deploy".into(),
            outcome: deny
                .outcome("deploy")
                .unwrap_or_else(|| panic!("a denial answers")),
        };
        records.push(Record {
            key: Key::result(1, 2, 1),
            entry: Entry::ToolResult(result),
        });
        records.push(Record {
            key: Key::decision(1, 2, 1),
            entry: Entry::Decided {
                call_id: "deploy-1".into(),
                decision: deny.clone(),
            },
        });
        let decided = recover(Policy::default(), records.clone()).unwrap_or_else(|e| panic!("{e}"));
        let held = decided.held[1]
            .clone()
            .unwrap_or_else(|| panic!("deploy is held"));
        assert_eq!(held.decision, Some(deny));
        assert!(matches!(decided.calls[1], CallState::Done(_)));
        // The tool never answered: a scripted `deploy` resumes at its first result.
        assert_eq!(decided.tool_answers.get("deploy").copied().unwrap_or(0), 0);

        // A decision on a call that is not held there is a corrupt journal.
        let mut wrong = held_turn();
        wrong.push(Record {
            key: Key::decision(1, 2, 0),
            entry: Entry::Decided {
                call_id: "read-1".into(),
                decision: Decision::Approve,
            },
        });
        assert!(matches!(
            recover(Policy::default(), wrong),
            Err(RecoverError::Diverged { .. })
        ));
    }

    /// `read` and `ask` (both run, neither held up front); `ask` asked a question nobody could
    /// answer while it ran: its intent, then its hold, written when that run ended.
    fn asked_turn() -> (Vec<Record>, ToolCall) {
        let mut machine = Machine::new(Policy::default()).unwrap_or_else(|e| panic!("{e}"));
        while machine.poll_command().is_some() {}
        let ask = ToolCall::new("ask-1", "ask", serde_json::json!({"branch": "main"}));
        let event = Event::ModelTurn(ModelTurn {
            tool_calls: vec![
                ToolCall::new("read-1", "read", serde_json::json!({"path": "a"})),
                ask.clone(),
            ],
            ..ModelTurn::default()
        });
        let Handled::Step(step) = machine.handle(event.clone()) else {
            panic!("the turn is a step");
        };
        let commands: Vec<Command> = std::iter::from_fn(|| machine.poll_command()).collect();
        let mut records = vec![
            Record {
                key: Key::event(0),
                entry: Entry::User { task: "t".into() },
            },
            Record {
                key: Key::event(step.step),
                entry: Entry::from_event(&event),
            },
        ];
        records.extend(decision_records(&step, &commands, |_| false));
        records.push(Record {
            key: Key::result(1, 2, 0),
            entry: Entry::ToolResult(ToolResult {
                call_id: "read-1".into(),
                name: "read".into(),
                outcome: crate::event::ToolOutcome::Ok(Json::from(serde_json::json!("text"))),
            }),
        });
        (records, ask)
    }

    #[test]
    fn a_call_held_after_it_ran_replays_as_not_started_until_its_second_intent() {
        let (mut records, ask) = asked_turn();
        let question = Question {
            message: "Delete branch main?".into(),
            schema: serde_json::json!({"type": "object", "properties": {"confirm": {"type": "boolean"}}}),
        };
        let held = Record {
            key: Key::held(1, 2, 1),
            entry: Entry::Held {
                call: ask.clone(),
                hold: Hold::Elicitation,
                question: Some(question.clone()),
            },
        };
        // Before the hold is written, the asking call is in doubt (it was running).
        let running = recover(Policy::default(), records.clone()).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(running.calls[1], CallState::InDoubt { idempotent: false });
        records.push(held.clone());
        let undecided =
            recover(Policy::default(), records.clone()).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            undecided.calls[1],
            CallState::NotStarted,
            "its run had no effect"
        );
        let h = undecided.held[1]
            .clone()
            .unwrap_or_else(|| panic!("ask is held"));
        assert_eq!(
            (h.hold, h.decision, h.question),
            (Hold::Elicitation, None, Some(question))
        );

        // A second intent before a decision is a corrupt journal.
        let mut early = records.clone();
        early.push(Record {
            key: Key::rerun(1, 2, 1),
            entry: Entry::ToolCall {
                call: ask.clone(),
                idempotent: false,
            },
        });
        assert!(matches!(
            recover(Policy::default(), early),
            Err(RecoverError::Diverged { .. })
        ));

        let answer = Decision::Answer {
            outcome: crate::event::ToolOutcome::Ok(Json::from(
                serde_json::json!({"confirm": true}),
            )),
        };
        records.push(Record {
            key: Key::decision(1, 2, 1),
            entry: Entry::Decided {
                call_id: "ask-1".into(),
                decision: answer.clone(),
            },
        });
        let decided = recover(Policy::default(), records.clone()).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            decided.calls[1],
            CallState::NotStarted,
            "decided, not yet run again"
        );
        records.push(Record {
            key: Key::rerun(1, 2, 1),
            entry: Entry::ToolCall {
                call: ask.clone(),
                idempotent: false,
            },
        });
        let rerunning =
            recover(Policy::default(), records.clone()).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            rerunning.calls[1],
            CallState::InDoubt { idempotent: false },
            "a crash in the second run leaves it in doubt"
        );

        // The second run's result, at the call's result key, sorts before the hold.
        let result = ToolResult {
            call_id: "ask-1".into(),
            name: "ask".into(),
            outcome: crate::event::ToolOutcome::Ok(Json::from(serde_json::json!("deleted main"))),
        };
        let at = records
            .iter()
            .position(|r| r.key == Key::held(1, 2, 1))
            .unwrap_or_else(|| panic!("the hold"));
        records.insert(
            at,
            Record {
                key: Key::result(1, 2, 1),
                entry: Entry::ToolResult(result.clone()),
            },
        );
        assert!(records.windows(2).all(|w| w[0].key < w[1].key), "key order");
        let done = recover(Policy::default(), records).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(done.calls[1], CallState::Done(result));
        assert_eq!(
            done.held[1].as_ref().map(|h| h.decision.clone()),
            Some(Some(answer))
        );
        // The tool gave that result: a scripted `ask` resumes after it.
        assert_eq!(done.tool_answers.get("ask").copied(), Some(1));
    }

    #[test]
    fn lean_decisions_are_the_decisions_without_arguments() {
        let mut machine = Machine::new(Policy::default()).unwrap_or_else(|e| panic!("{e}"));
        while machine.poll_command().is_some() {}
        let Handled::Step(step) = machine.handle(Event::ModelTurn(ModelTurn {
            tool_calls: vec![
                ToolCall::new("a-1", "read", serde_json::json!({"path": "a"})),
                ToolCall::new(
                    "b-1",
                    "write",
                    serde_json::json!({"path": "b", "text": "x"}),
                ),
            ],
            ..ModelTurn::default()
        })) else {
            panic!("the turn is a step");
        };
        let commands: Vec<Command> = std::iter::from_fn(|| machine.poll_command()).collect();
        let mut full = decision_records(&step, &commands, |_| true);
        let lean = lean_decision_records(&step, &commands);
        let mut intents = 0;
        for record in &mut full {
            if let Entry::ToolCall { call, .. } = &mut record.entry {
                assert_ne!(call.arguments.value(), &Value::Null);
                call.arguments = Json::from(Value::Null);
                intents += 1;
            }
        }
        assert_eq!(intents, 2);
        assert_eq!(lean, full);
    }

    #[test]
    fn a_denial_is_a_permission_denied_failure_carrying_the_reason() {
        let Some(crate::event::ToolOutcome::Error { kind, message }) = (Decision::Deny {
            reason: Some("not on Fridays".into()),
        })
        .outcome("deploy") else {
            panic!("a denial answers with an error");
        };
        assert_eq!(kind, crate::event::ToolErrorKind::PermissionDenied);
        assert!(
            kind.is_unrecoverable(),
            "rule 7 bounds a model that keeps asking"
        );
        assert!(
            message.contains("not on Fridays") && message.contains("`deploy`"),
            "{message}"
        );
        assert_eq!(Decision::Approve.outcome("deploy"), None);
        // Decisions as journaled: a tagged object.
        let text = serde_json::to_string(&Decision::Deny { reason: None }).unwrap_or_default();
        assert_eq!(text, r#"{"kind":"deny"}"#);
    }

    #[test]
    fn notices_of_the_first_edition_still_read() {
        let old = r#"{"entry":"notice","tool":"deploy","exclusion":{"why":"failures","count":3},"text":"The tool `deploy` is now excluded."}"#;
        let entry: Entry = serde_json::from_str(old).unwrap_or_else(|e| panic!("{e}"));
        let Entry::Notice(Notice::Excluded { tools, text }) = &entry else {
            panic!("not an exclusion notice: {entry:?}");
        };
        assert_eq!(
            tools,
            &[("deploy".to_owned(), crate::Exclusion::Failures { count: 3 })]
        );
        assert_eq!(text, "The tool `deploy` is now excluded.");
        // Today's form round-trips.
        let now = serde_json::to_string(&entry).unwrap_or_default();
        assert!(now.contains(r#""kind":"excluded""#), "{now}");
        let again: Entry = serde_json::from_str(&now).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(again, entry);
    }

    #[test]
    fn keys_round_trip_and_reject_garbage() {
        for k in [
            Key::new(0, 0),
            Key::new(12, 3),
            Key::new(u32::MAX, u32::MAX),
        ] {
            assert_eq!(k.to_string().parse::<Key>(), Ok(k));
        }
        assert_eq!(Key::new(3, 7).to_string(), "cp3:e7");
        for bad in [
            "",
            "cp",
            "cp1",
            "cp1:e",
            "cpx:e1",
            "cp1:ex",
            "cp-1:e2",
            "cp1:e2:e3",
            "cp99999999999:e0",
            " cp1:e2",
        ] {
            assert!(bad.parse::<Key>().is_err(), "{bad:?} parsed");
        }
    }

    #[test]
    fn intent_and_result_keys_do_not_collide() {
        let calls = 3;
        let mut keys: Vec<Key> = (0..calls).map(|j| Key::intent(5, j)).collect();
        for slot in [
            Key::result,
            Key::held,
            Key::decision,
            Key::rerun,
            Key::started,
        ] {
            keys.extend((0..calls).map(|j| slot(5, calls, j)));
        }
        keys.extend([
            Key::event(5),
            Key::transition(5),
            Key::guidance(5, 0),
            Key::guidance(5, Key::MAX_GUIDANCE - 1),
            Key::stop(5),
        ]);
        let unique: std::collections::BTreeSet<_> = keys.iter().collect();
        assert_eq!(unique.len(), keys.len());
    }

    #[test]
    fn a_job_that_asked_a_question_is_waited_for_after_the_answer_never_started_again() {
        // An MCP task's `input_required`: the call started its job, the job asked, the call was
        // held for the person. The job stays the call's, before and after the decision.
        let (mut records, ask) = asked_turn();
        let job = serde_json::json!({"mcp_task": {"server": "deploys", "task_id": "t-7"}});
        records.push(Record {
            key: Key::held(1, 2, 1),
            entry: Entry::Held {
                call: ask.clone(),
                hold: Hold::Elicitation,
                question: Some(Question {
                    message: "Deploy to which environment?".into(),
                    schema: serde_json::json!({"type": "object"}),
                }),
            },
        });
        records.push(Record {
            key: Key::started(1, 2, 1),
            entry: Entry::Started {
                call_id: ask.id.clone(),
                job: job.clone(),
            },
        });
        let waiting = CallState::Started {
            idempotent: false,
            job,
        };
        let held = recover(Policy::default(), records.clone()).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(held.calls[1], waiting, "held: the job waits for its answer");
        records.push(Record {
            key: Key::decision(1, 2, 1),
            entry: Entry::Decided {
                call_id: ask.id.clone(),
                decision: Decision::Answer {
                    outcome: crate::event::ToolOutcome::Ok(Json::from(
                        serde_json::json!({"environment": "staging"}),
                    )),
                },
            },
        });
        let decided = recover(Policy::default(), records).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            decided.calls[1], waiting,
            "answered: its job gets the answer"
        );
        assert!(
            decided.held[1]
                .as_ref()
                .is_some_and(|h| h.decision.is_some())
        );
    }

    #[test]
    fn a_started_job_replays_as_started_until_its_result() {
        let (mut records, ask) = asked_turn();
        let job = serde_json::json!({"mcp_task": {"server": "builds", "task_id": "t-1"}});
        let started = Record {
            key: Key::started(1, 2, 1),
            entry: Entry::Started {
                call_id: ask.id.clone(),
                job: job.clone(),
            },
        };
        records.push(started.clone());
        let waiting = recover(Policy::default(), records.clone()).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            waiting.calls[1],
            CallState::Started {
                idempotent: false,
                job: job.clone()
            },
            "the job is waited for, not started again"
        );
        // Its result, journaled before the crash, ends the wait (it sorts before the job).
        let result = ToolResult {
            call_id: ask.id.clone(),
            name: ask.name.clone(),
            outcome: crate::event::ToolOutcome::Ok(Json::from(serde_json::json!("built"))),
        };
        let mut done = records.clone();
        done.insert(
            done.len() - 1,
            Record {
                key: Key::result(1, 2, 1),
                entry: Entry::ToolResult(result.clone()),
            },
        );
        let finished = recover(Policy::default(), done).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(finished.calls[1], CallState::Done(result));
        // A job for a call never started, or not in the batch, is a divergence naming the call.
        let (mut bare, _) = asked_turn();
        bare.retain(|r| r.key != Key::intent(1, 1));
        bare.push(started);
        let e = recover(Policy::default(), bare)
            .map(|_| ())
            .expect_err("a job with no intent diverges");
        assert!(e.to_string().contains("which has no intent"), "{e}");
        let (mut beyond, _) = asked_turn();
        beyond.push(Record {
            key: Key::started(1, 2, 2),
            entry: Entry::Started {
                call_id: "nope".into(),
                job,
            },
        });
        let e = recover(Policy::default(), beyond)
            .map(|_| ())
            .expect_err("a job of no call diverges");
        assert!(
            e.to_string().contains("a job of `nope`, not scheduled"),
            "{e}"
        );
    }
}
