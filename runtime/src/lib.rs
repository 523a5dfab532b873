//! # terminus-runtime
//!
//! The async runtime of Terminus: it drives the sans-IO kernel [`terminus_kernel::Machine`]
//! against a [`Model`], a [`ToolSet`], a [`Verifier`] and a journal [`Store`], and owns
//! everything the kernel leaves to its host: the clock, the run's wall-clock deadline, per-call
//! timeouts, the kill switch, tool concurrency, the conversation and the journal.
//!
//! ## The loop
//!
//! One [`Run`] is one loop, in the shape of quinn's connection driver:
//!
//! 1. drain the machine's commands: `Notice` and `Nudge` become messages of the kernel's own
//!    (never shown to the verifier, rule 4); the one remaining command is the action;
//! 2. carry out the action (`CallModel` after its backoff delay, `RunTools` with the non-refused
//!    calls running concurrently up to [`RuntimeConfig::max_concurrent_tools`], `Verify`), racing
//!    the kill switch and the deadline timer ([`Machine::poll_timeout`]), which become
//!    `Event::Cancel` and `Event::Tick`;
//! 3. feed the resulting event to the machine and journal it together with the step and
//!    its commands, report the transition to the [`Observer`]; repeat until `Stop`, then store
//!    the [`Report`] with the execution.
//!
//! All time is [`tokio::time::Instant`], so tests run under tokio's paused clock. The hot path
//! borrows the conversation (the model gets `&[Message]`), appends to it, and clones only what
//! it journals (the event, the step's guidance and tool calls): no step does work proportional
//! to the history.
//!
//! ## Layers
//!
//! A [`Layer`] is middleware around every model, tool and verifier call (recording, journaling
//! each call as a durable step, a policy on tool calls): one method sees the [`Call`] and the
//! [`Next`] step and gives the [`Answer`]. See [`layer`].
//!
//! ## Journal
//!
//! See [`journal`]: the runtime writes the kernel's journal model
//! ([`terminus_kernel::Record`] under deterministic `cp{checkpoint}:e{index}` keys): the event of
//! each step before the machine sees it, the step's transition, guidance, stop and tool intents
//! before any of it is carried out, and each tool result as it arrives.
//! [`terminus_kernel::recover`] rebuilds the machine from the records.
//!
//! [`Machine::poll_timeout`]: terminus_kernel::Machine::poll_timeout

#![forbid(unsafe_code)]

pub mod asking;
mod budget;
mod config;
pub mod context;
mod conversation;
mod driver;
mod error;
pub mod explain;
mod fault;
pub mod host;
pub mod jobs;
pub mod journal;
pub mod json_path;
mod kill;
pub mod layer;
mod message;
pub mod meters;
mod model;
mod observer;
mod output;
mod report;
mod run_state;
pub mod semconv;
pub mod suspend;
mod tool;
mod verifier;

pub use crate::budget::{
    Budget, BudgetWarning, ToolBudgetEvent, ToolBudgetKind, WARN_PERCENT, Warned, budgets_state,
    tool_budget_events, tool_budget_state,
};
pub use crate::config::{AutoCheckpoint, InDoubt, RuntimeConfig};
pub use crate::context::{
    ContextPolicy, ContextPolicyError, ContextPrune, ContextStats, ContextWindow, Heuristic,
    SystemCut, Tokenizer,
};
pub use crate::conversation::{budget_warning_text, refusal_text};
pub use crate::driver::{
    Adapters, Replayed, Resume, Run, Setup, in_doubt_outcome, lost_job_outcome,
};
pub use crate::error::RunError;
pub use crate::fault::{Fault, FaultKind};
pub use crate::journal::{
    Appended, Cause, Cell, Cells, Claims, ExecutionFilter, ExecutionStatus, ExecutionSummary,
    Failure, Journal, Lease, MemoryStore, Queue, RunSpec, Store, StoreError, Suspension,
};
pub use crate::kill::KillSwitch;
pub use crate::layer::{Answer, Call, Layer, Next, Site};
pub use crate::message::{Author, Evidence, Message, Role, Transcript};
pub use crate::model::{Model, ModelError, ModelFailure, ModelInfo, ModelRequest, Purpose};
pub use crate::observer::{Observer, Transition};
pub use crate::report::{Report, ScaleReport};
pub use crate::run_state::{StateParts, ended_state, json_patch, machine_state, run_state};
pub use crate::suspend::{HeldState, PendingCall, Suspended, held_calls};
pub use crate::tool::{
    Tool, ToolSet, ToolSource, ToolSpec, ToolsChanged, WriteTodos, render_outcome,
};
pub use crate::verifier::{
    LLM_VERIFIER_PROMPT, LlmVerifier, RuleVerifier, Verification, Verifier, missing_by_rules,
    parse_verdict,
};
