//! # terminus-kernel
//!
//! The completion state machine of Terminus: one `statig` machine with the states `Exploring`,
//! `Acting`, `Verifying`, `Nudged`, `Complete` and `Aborted`, in which every way an agent run can
//! stop is a named, counted and bounded transition.
//!
//! The crate is **sans-IO and fully deterministic**: it does no networking, reads no clock and
//! draws no random numbers. Time arrives as [`Event::Tick`] readings, and backoff jitter comes from
//! the seed in the [`Policy`], so the same policy and the same events give the same path, byte for
//! byte. The async runtime that drives it against real models and tools is a separate crate.
//!
//! ## Driving the machine
//!
//! A [`Machine`] has three kinds of methods, used in this order:
//!
//! 1. [`Machine::handle`] feeds one [`Event`] (a model turn, a model error, tool results, a verdict,
//!    a clock reading, the kill switch) and says what happened ([`Handled`]);
//!    [`Machine::handle_results`] feeds tool results the host keeps.
//! 2. [`Machine::poll_command`] returns the next [`Command`]; drain it until `None`.
//! 3. [`Machine::poll_timeout`] gives the deadline to arm a timer for; when it fires, feed
//!    `Event::Tick`.
//!
//! Getters ([`Machine::phase`], [`Machine::stats`], [`Machine::ledger`], ...) can be read at any time.
//!
//! ```
//! use serde_json::json;
//! use terminus_kernel::{
//!     Command, Event, Machine, ModelTurn, Outcome, CompleteReason, Policy, ToolCall, ToolOutcome,
//!     ToolResult,
//! };
//!
//! let policy = Policy { completion_requires: vec!["write_file".into()], ..Policy::default() };
//! let mut machine = Machine::new(policy).expect("a valid policy");
//!
//! // A scripted model: first it writes a file, then it claims it is done.
//! let mut turns = vec![
//!     ModelTurn { text: "Done: plan.md is written.".into(), needs_more_work: Some(false), ..Default::default() },
//!     ModelTurn {
//!         // The arguments are hashed once, here, where they enter (see `Json`).
//!         tool_calls: vec![ToolCall::new("call-1", "write_file", json!({ "path": "plan.md", "content": "..." }))],
//!         ..Default::default()
//!     },
//! ];
//!
//! let stop = loop {
//!     let Some(command) = machine.poll_command() else { panic!("a live machine always has a command") };
//!     match command {
//!         Command::CallModel(_) => {
//!             let turn = turns.pop().expect("the script covers the run");
//!             machine.handle(Event::ModelTurn(turn));
//!         }
//!         Command::RunTools(batch) => {
//!             let results: Vec<ToolResult> = batch.calls.iter().map(|call| ToolResult {
//!                 call_id: call.id.clone(),
//!                 name: call.name.clone(),
//!                 outcome: ToolOutcome::ok(json!("written")),
//!             }).collect();
//!             // The host keeps its results (to journal them, to show them to the model).
//!             machine.handle_results(&results);
//!         }
//!         Command::Stop(stop) => break stop,
//!         _ => {} // guidance (nudges, notices) goes into the conversation
//!     }
//! };
//! assert_eq!(stop.outcome, Outcome::Complete(CompleteReason::Explicit));
//! assert_eq!(stop.stats.model_calls, 2);
//! assert_eq!(stop.stats.tool_calls, 1);
//! assert_eq!(stop.result.as_deref(), Some("Done: plan.md is written."));
//! // Terminal states absorb every later event and say so.
//! assert!(matches!(machine.handle(Event::Cancel), terminus_kernel::Handled::Ignored { .. }));
//! ```
//!
//! The transition table, the termination argument and the step bound are in `spec/machine.md`,
//! generated from the stop [`catalog`] (the rules' rows and the table of limits) and the transitions the exhaustive model
//! check observes, and checked by a snapshot test.
//!
//! ## Reading the code
//!
//! - `desk.rs`: the one pure classification step, a concrete [`Event`] and what the machine knows
//!   (ledger, todos, repeat detector) to one abstract [`Input`].
//! - `core.rs`: the `statig` machine; every rule is decided there, and each state pushes the
//!   finished commands of its transition.
//! - [`catalog`]: the stop catalog, every way a run can stop and every run-wide bound, as tables
//!   the guards, the invariants, the spec and the runtime's explanation read.
//! - `loops.rs`: the repeat detector (loops of any period up to `max_loop_period`).
//! - `json.rs`: [`Json`], a JSON payload with its fingerprint, hashed once where it enters (the
//!   adapter that parsed it, the journal it was read from), so no event is hashed by the machine.
//!
//! The feature `testing` adds `testing`: the exhaustive model check and the invariant checkers
//! the property tests, the fuzz targets and the simulation run after every event.

#![forbid(unsafe_code)]

pub mod answer;
mod backoff;
pub mod catalog;
mod command;
mod core;
mod desk;
mod event;
#[cfg(feature = "testing")]
mod explore;
mod fingerprint;
mod hash;
mod hold;
mod input;
mod invariants;
mod journal;
mod json;
mod ledger;
mod loops;
mod machine;
mod name;
mod phase;
mod policy;
pub mod raise;
mod reason;
pub mod repetition;
mod rule;
mod scale;
mod stats;
mod step;
#[cfg(feature = "testing")]
pub mod testing;
pub mod textcall;
mod todo;
mod tool_budget;
mod validate;

pub use crate::backoff::backoff_ms;
pub use crate::command::{
    BudgetWarning, CHECKPOINT_NOTE_START, CheckpointRequest, Command, ModelCall, Notice, Nudge,
    NudgeKind, Stop, ToolBatch, VerifyRequest,
};
pub use crate::event::{
    Event, Finish, ModelErrorKind, ModelTurn, ToolCall, ToolErrorKind, ToolOutcome, ToolResult,
    Usage, Verdict,
};
pub use crate::fingerprint::calls_fingerprint;
pub use crate::hash::value_fingerprint;
pub use crate::hold::{Decision, HeldCall, Hold, Question, edited_note};
pub use crate::input::{Batch, EmptyKind, ErrorClass, Gate, Input, NoOpKind, TurnKind};
pub use crate::journal::{
    CallState, Entry, Key, KeyError, Record, RecoverError, Recovery, Replay, decision_records,
    executed, held_decision_records, lean_decision_records, recover, step_records,
};
pub use crate::json::Json;
pub use crate::ledger::{Block, BlockedBy, Exclusion, Ledger, ToolRecord};
pub use crate::loops::{MAX_LOOP_PERIOD, Repetition};
pub use crate::machine::{Machine, RestoreError};
pub use crate::name::{CallId, Name};
pub use crate::phase::{CallReason, Ignored, Phase};
pub use crate::policy::{BudgetScale, OnUnrecoverable, OnVerificationLimit, Policy, PolicyError};
pub use crate::raise::{Raise, RaiseError};
pub use crate::reason::{AbortReason, CompleteReason, Outcome};
pub use crate::rule::{Rule, RuleSpec};
pub use crate::scale::ScaleError;
pub use crate::stats::{Stats, Streaks};
pub use crate::step::{Handled, StepRecord};
pub use crate::textcall::{TextCalls, TextToolCalls};
pub use crate::todo::{Todo, TodoStatus, WRITE_TODOS, open_todos, parse_todos};
pub use crate::tool_budget::{MAX_TIERS, Tier, TierCount, TierMarks, ToolBudget};
