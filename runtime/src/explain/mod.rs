//! Why did a run stop, and what to change: the explanation `terminus inspect` prints, built
//! without IO from what a journal keeps of an execution.
//!
//! An [`Explanation`] is built from an execution's records (fed one at a time, in key order, to a
//! [`Builder`], so a long journal is read page by page), its [`RunSpec`](crate::RunSpec) (the
//! policy), its report, the failure a worker recorded and the claim conflicts ([`Stored`]). The
//! journal is replayed through the kernel ([`terminus_kernel::Replay`], pure) for what the records
//! do not say outright: the streaks at the stop, the tool ledger and the todos. It renders as text
//! ([`Explanation::text`]) and as JSON (serde). [`read`] explains an execution a store keeps,
//! reading its journal page by page (the command line's `inspect`, Restate's `explain`); an
//! embedding host (the Python and Node bindings) keeps the records of its own run and explains it
//! the same way.

mod prose;
mod replay;
mod types;

pub use replay::{Builder, Tally, read};
pub use types::{Budget, Explanation, Feedback, PathStep, RuleRow, Stored, ToolError, ToolView};
