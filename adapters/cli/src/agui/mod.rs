//! The AG-UI protocol as `terminus serve` speaks it (`docs/serve.md`): the request
//! (`RunAgentInput`, read with every problem naming its JSON path), the events of the answer's
//! server-sent event stream (camelCase fields, as AG-UI 1.0 gives them), the interrupts a
//! suspended run finishes with and the decisions a later `resume` makes of them, the run's state
//! (snapshot and RFC 6902 deltas), and [`Stream`], the observer that turns a run's steps into
//! events.
//!
//! Nothing here does IO: events go into a channel the HTTP layer (`crate::web`) drains.
//!
//! The rooms: `input` (the request), `interrupt` (interrupts and the decisions of a `resume`),
//! `state` (the snapshot and its deltas) and `stream` (the events).

mod input;
mod interrupt;
mod state;
mod stream;

pub(crate) use input::{ResumeEntry, RunInput, parse_input};
pub(crate) use interrupt::{decision, interrupt};
pub(crate) use state::{RunState, delta, ended_state, lock, suspended_state};
pub(crate) use stream::{Stream, messages, sse};
