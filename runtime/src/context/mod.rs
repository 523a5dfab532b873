//! Context management: token counting, the context policy and pruning of the model's view.
//!
//! - [`Tokenizer`]: counts tokens; [`Heuristic`] is the fallback, exact tokenizers for OpenAI
//!   models are in the `terminus-tokenizer` adapter.
//! - [`ContextPolicy`]: the window, when pruning starts and how far it goes, the per-result limit.
//! - [`prune`]: the pure pruning function and its invariants; [`referred`]: which tool results
//!   a later assistant message names (the agent used them), which pruning drops last.
//! - [`ContextWindow`]: the per-run state the runtime keeps (per-message counts, provider usage,
//!   the current view).
//!
//! The conversation the runtime keeps, the journal and the verifier's transcript are never
//! pruned: only what the model is sent.

mod notice;
mod policy;
mod prune;
mod salience;
mod tokenizer;
mod window;

pub use notice::state_notice;
pub use policy::{ContextPolicy, ContextPolicyError};
pub use prune::{Exhausted, NOTICE_HEADER, Plan, is_notice, prune, prune_with, units};
pub use salience::{MAX_SCAN_BYTES, MAX_TOKENS, Referrals, referred, salient, salient_tokens};
pub use tokenizer::{CALL_OVERHEAD, Heuristic, MESSAGE_OVERHEAD, Tokenizer, message_tokens};
pub use window::{ContextPrune, ContextStats, ContextWindow, SystemCut, cut_result, cut_system};
