//! # terminus-scenario
//!
//! Scenario files: the offline, deterministic way to run the Terminus kernel (`docs/design.md`,
//! "Scenario files"; the format with every field is in `spec/scenarios/README.md`).
//!
//! - [`Scenario::parse`] / [`Scenario::load`] read a file and validate it. Every error names the
//!   JSON path at fault and the problem (`$.model.turns[2]: unknown field `txt`, expected one
//!   of ...`), with the line and column when the JSON reader knows them.
//! - [`Scenario::run`] gives a runtime [`terminus_runtime::Run`] wired to scripted adapters
//!   ([`ScriptedModel`], [`ScriptedTool`], [`ScriptedVerifier`]); a tool the scenario does not
//!   define answers `not_found`, and running out of a `repeat: "none"` script stops the run with
//!   a fault that names the script (`model script exhausted after 6 turns`).
//! - [`sent::Sent`], given to [`Scenario::with_sent`], records what the scripted model was sent,
//!   call by call, in the host suite's transcript shape (`spec/hosts/README.md`).
//! - [`Expect`] is the optional `expect` block: outcome, reason, rule, result, excluded tools and
//!   bounds on every counter, checked against a report with [`Expect::check`].
//!
//! ```
//! use terminus_scenario::Scenario;
//!
//! let scenario = Scenario::parse(r#"{
//!     "task": "Say hello",
//!     "model": { "turns": [ { "text": "Hello!" } ] },
//!     "expect": { "outcome": "complete", "reason": "answered", "model_calls": 1 }
//! }"#).expect("a valid scenario");
//! # tokio::runtime::Builder::new_current_thread().enable_time().build().unwrap().block_on(async {
//! let report = scenario.run().execute().await.expect("the run reaches a stop");
//! assert_eq!(report.result.as_deref(), Some("Hello!"));
//! assert!(scenario.expect().expect("it has one").check(&report).is_empty());
//! # });
//!
//! let error = Scenario::parse(r#"{ "task": "t", "model": { "turns": [ { "txt": "hi" } ] } }"#)
//!     .unwrap_err();
//! assert_eq!(error.path, "$.model.turns[0].txt");
//! ```

#![forbid(unsafe_code)]

mod error;
mod expect;
mod format;
pub mod in_process;
#[cfg(feature = "plan")]
pub mod plan;
mod scenario;
mod script;
pub mod sent;

pub use crate::error::{LoadError, ScenarioError};
pub use crate::expect::{Bound, Expect, OutcomeName, ReasonName};
pub use crate::format::{
    AutoCheckpointSpec, CallSpec, ContextSpec, ModelScript, Repeat, ResultSpec, ScenarioFile,
    ToolScript, TurnSpec, VerdictSpec, VerifierScript,
};
pub use crate::scenario::{Scenario, read_json};
pub use crate::script::{ScriptedModel, ScriptedTool, ScriptedVerifier};
