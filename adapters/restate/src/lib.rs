//! Terminus agents as durable [Restate](https://restate.dev) services.
//!
//! [`TerminusAgent`] is a Restate virtual object keyed by execution id. Its `run` handler
//! drives the kernel through the runtime, and every model call, tool call and verification is
//! a journaled `ctx.run` step named after the journal checkpoint it answers for (`cp3:e0` for
//! the model's answer that makes step 3, `cp2:tool0:read_file` for the first tool call step 2
//! issued). Restate's journal replaces Terminus's own on this path: a retried or restarted
//! invocation replays the steps, the kernel recomputes its decisions from them (it is
//! deterministic), and nothing journaled is asked for again. A second invocation for the same
//! execution waits for the first (one writer per key) and answers its stored report.
//!
//! What a replay must reproduce exactly is journaled as well: the run's first start (its
//! deadline spans restarts), and for each step whichever came first of its answer, the
//! `cancel` handler, the deadline and its timeout. A step the runtime stopped waiting for is
//! stored as abandoned, and a replay stops the run the same way instead of carrying it out. The
//! start of a non-idempotent tool call is a step of its own, holding the attempt's id: a call
//! whose start an earlier attempt journaled and whose answer Restate does not have is not run
//! again; the model is told it is in doubt, as on `terminus resume`.
//!
//! [`serve`] runs the HTTP/2 endpoint Restate calls; a [`Blueprint`] builds the run a request
//! asks for. [`endpoint`] takes Restate's request-identity keys: with them, only requests
//! Restate signed reach a handler.

mod bridge;
mod decisions;
mod journaled;
mod service;

pub use bridge::OnReplay;
pub use restate_sdk::endpoint::Endpoint;
pub use service::{Blueprint, Built, TerminusAgent, Unbuildable, endpoint, serve};
