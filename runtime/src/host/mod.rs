//! Driving the kernel from a host that keeps its own model client and tools: the JSON vocabulary
//! of the embedding contract (events in, commands out), and the run's journal, report and
//! explanation exactly as [`crate::Run`] would give them. The Python binding is a thin layer over
//! [`Host`]; it is pure (no clock, no IO), so the same events always give the same commands.
//!
//! Events ([`EventIn`], one key each):
//! `{"model_turn": {"text", "tool_calls": [{"id", "name", "arguments"}], "needs_more_work",
//! "usage": {"input_tokens", "output_tokens"}, "finish", "reasoning", "tools"}}` (every key
//! optional but a tool call's `name`; `tools`: the tools offered with the call, names or
//! `{"name", "parameters"}` ([`Offered`]), for a tool call written in the text, see
//! [`terminus_kernel::textcall`]), `{"model_error": {"kind", "retry_after_ms"}}`,
//! `{"tool_results": [{"call_id", "name", "ok": ANY} | {"call_id", "name", "error": KIND,
//! "message"}]}`, `{"verdict": {"complete", "feedback", "missing"}}`, `{"tick": NOW_MS}`,
//! `{"cancel": true}`.
//!
//! Commands ([`CommandOut`]): `call_model` (with its backoff `delay_ms` and whether the model may
//! call `tools`), `run_tools` (only the calls to run; the refused ones with the text the model is
//! given instead, the budget warnings to append to results, and `written`, the reply's prose,
//! when the calls were written in its text), `verify` (the claim, the todos,
//! and what the rules say is missing), `nudge` and `notice` (text for the conversation),
//! `checkpoint` (with `policy.auto_checkpoints`: ask the model for a summary and add it to the
//! conversation after the kernel's note), and `stop` with the report.
//!
//! The journal the host keeps has the records [`crate::Run`] writes for the same events (the
//! task, then per step its event, transition, guidance, stop, tool intents and results, under
//! the same keys), so the report's `entries` and [`crate::explain`]'s explanation are those of
//! `terminus run` and `terminus inspect` for the same run. It leaves out the payloads the
//! explanation never reads (turns' texts and calls, tool arguments and outputs): the host has
//! the machine itself and never replays its journal, and snapshots stay small. It keeps only
//! the last [`JOURNAL_STEPS`] steps by default, with the tally of those it let go, so that a
//! snapshot's size does not grow with the run (see [`Host::keep_journal`] and `drive`'s docs).

mod drive;
pub mod messages;
pub mod provider;
mod session;
mod wire;

pub use drive::{Host, JOURNAL_STEPS};
pub use session::{
    Answer, Checkpoint, Gate, Jump, PACK_AT, Session, Step, Turn, Verify, Written, checked, scaled,
};
pub use wire::{
    CallIn, CallOut, CommandOut, EventIn, Handle, InputError, ModelErrorIn, Offered, RefusedOut,
    ResultIn, TurnIn, VerdictIn, WarningOut, policy_from_json, verdict_of,
};
