//! # terminus-orchestrator
//!
//! Multi-agent plans (`docs/plans.md`): each agent one kernel run, scheduled by
//! dependency, with every way a plan of the seed system could loop, hang or drop an agent
//! closed and named:
//!
//! - [`Plan`]: the plan file, validated before anything runs, every problem reported together
//!   (duplicate ids, missing dependencies, every cycle with its path, unsatisfiable
//!   dependencies, limits out of range) with its JSON path;
//! - [`Limits`]: the seed's limits and defaults, overridden by its environment variables and by
//!   the plan, a bad value an error naming its source;
//! - [`Breaker`]: the circuit breaker of an agent id, an explicit state machine whose table is
//!   `spec/breaker.md`;
//! - [`Scheduler`]: the plan's scheduler, sans IO: starts, retries with backoff, budget
//!   inheritance, early termination, the execution timeout and the phase cap;
//! - [`Generator`]: a plan written by a model, sans IO: each rejected plan goes back to the
//!   model with its problems, a bounded number of times, then the fallback or `no_valid_plan`;
//! - [`Orchestration`]: the executor that carries the scheduler's commands out on the runtime,
//!   journaling progress so that a crashed orchestration resumes without re-running what
//!   completed.
//!
//! The crate sits beside the runtime rather than under `adapters/`: like the runtime it is a
//! library hosts embed (the command line is one of them) and it binds no outside system; its
//! pure parts (plan, limits, breaker, scheduler) do no IO, so they are proven the way the
//! kernel is, and only [`Orchestration`] touches tokio and the store.

#![forbid(unsafe_code)]

mod breaker;
mod conduct;
mod error;
mod generate;
mod graph;
mod inspect;
mod limits;
mod local;
mod meters;
mod plan;
mod report;
mod run;
mod schedule;
mod spans;
mod split;

pub use crate::breaker::{
    Admission, Breaker, BreakerConfig, BreakerInput, BreakerRule, BreakerStep,
};
pub use crate::conduct::{
    Act, Attempted, Begin, Conductor, OutOfTurn, WATCHDOG_GRACE_MS, attempt_execution,
};
pub use crate::error::OrchestrateError;
pub use crate::generate::{
    DEFAULT_PLAN_ATTEMPTS, GenerateFile, Generation, Generator, GeneratorSpec, MAX_PLAN_ATTEMPTS,
    Member, PlanSource, Rejection, Reply, Step, Written, read_reply,
};
pub use crate::graph::{Graph, MAX_CYCLES, cycles, levels};
pub use crate::inspect::{AgentInspection, PlanInspection, inspect_plan};
pub use crate::limits::{
    AGENT_TIMEOUT_MAX_MS, AGENT_TIMEOUT_MIN_MS, DEFAULT_ESTIMATE_MS, LimitError, LimitRow, Limits,
    LimitsSpec, RETRY_DELAY_MAX_MS, Source, limit_rows,
};
pub use crate::local::{LocalPlan, PlanJournal};
pub use crate::plan::{
    Agent, AgentExpect, AgentSpec, CheckLive, Context, Node, OnError, Own, Plan, PlanExpect,
    PlanFile, Problem, Program, ReadScript, Script, ScriptError, fill, placeholders,
};
pub use crate::report::{AgentReport, PlanEvent, PlanReport};
pub use crate::run::{
    Clock, Launch, Launcher, Orchestration, SystemClock, TokioClock, breaker, breaker_key,
    report_key, stored_generation, stored_plan,
};
pub use crate::schedule::{
    Command, End, Grant, Input, PLAN_STOP_MARGIN_MS, PlanReason, Ran, Saved, Scheduler, Status,
    Usage, Warning, Why,
};
pub use crate::split::{MAX_SPLIT_PHASES, PhaseProgram, Split, split};
