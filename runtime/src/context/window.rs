//! [`ContextWindow`]: the model's view of a run's conversation, kept up to date turn by turn.
//!
//! The runtime's conversation (and the journal) keep everything; the window only decides what
//! the model is sent. Each message is counted once, when it first appears (a turn costs only its
//! new messages). A tool result over the policy's limit is cut in the view, with a marker. A
//! turn's reported usage is preferred over the tokenizer: the reply's size becomes its output
//! tokens, and the prompt's input tokens recalibrate the tokens the messages do not show (tool
//! definitions, the provider's framing, the tokenizer's error). While the view plus the new
//! messages stays under `prune_at` they are appended to it (the prompt's prefix stays the same
//! from turn to turn); past it, the whole conversation is pruned again by [`prune`].

use super::policy::ContextPolicy;
use super::prune::{Exhausted, Plan, prune};
use super::tokenizer::{MESSAGE_OVERHEAD, Tokenizer, message_tokens};
use crate::message::{Author, Message, Role};
use serde::{Deserialize, Serialize};
use std::sync::Arc;
use terminus_kernel::Usage;

/// What the window did during a run, for the report.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct ContextStats {
    /// Times the view was pruned.
    pub prunes: u32,
    /// Tool results cut to `max_tool_result_tokens` in the view.
    pub truncated_results: u32,
    /// The largest view sent, in tokens (as estimated before the call).
    pub peak_tokens: u64,
    /// The last view sent, in messages.
    pub view_messages: u32,
}

/// The model's view of one run's conversation.
pub struct ContextWindow {
    policy: ContextPolicy,
    tokenizer: Arc<dyn Tokenizer>,
    /// The size in the view of each message of the conversation counted so far.
    sizes: Vec<u32>,
    /// Cut copies of the tool results over the limit, by conversation index.
    cut: Vec<(usize, Message)>,
    /// Tokens of a request outside its messages: estimated from the tool definitions until a
    /// turn reports usage, then the reported input minus the messages' own count.
    fixed: i64,
    /// The output tokens the last turn reported: the size of the reply it added.
    reply: Option<u32>,
    /// Messages of the conversation the view covers.
    covered: usize,
    /// The rendered view when it differs from the conversation (pruned or cut).
    view: Vec<Message>,
    /// Whether `view` is what the model is sent (otherwise the conversation itself is).
    owned: bool,
    /// Tokens of the messages of the current view (without `fixed`).
    view_tokens: u64,
    stats: ContextStats,
}

impl std::fmt::Debug for ContextWindow {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ContextWindow")
            .field("policy", &self.policy)
            .field("tokenizer", &self.tokenizer.name())
            .field("messages", &self.sizes.len())
            .field("stats", &self.stats)
            .finish_non_exhaustive()
    }
}

impl ContextWindow {
    /// A window for `policy`, counting with `tokenizer`; `fixed` is the first estimate of the
    /// tokens a request holds outside its messages (the tool definitions, the reply priming).
    pub fn new(policy: ContextPolicy, tokenizer: Arc<dyn Tokenizer>, fixed: u32) -> ContextWindow {
        ContextWindow {
            policy,
            tokenizer,
            sizes: Vec::with_capacity(64),
            cut: Vec::new(),
            fixed: i64::from(fixed),
            reply: None,
            covered: 0,
            view: Vec::new(),
            owned: false,
            view_tokens: 0,
            stats: ContextStats::default(),
        }
    }

    /// The policy.
    pub fn policy(&self) -> &ContextPolicy {
        &self.policy
    }

    /// The tokenizer.
    pub fn tokenizer(&self) -> &dyn Tokenizer {
        &*self.tokenizer
    }

    /// What the window did so far.
    pub fn stats(&self) -> ContextStats {
        self.stats
    }

    /// The size in the view of each message counted so far (after a [`ContextWindow::prepare`]:
    /// every message of the conversation).
    pub fn sizes(&self) -> &[u32] {
        &self.sizes
    }

    /// Tokens of the next request outside its messages, as now estimated.
    pub fn fixed(&self) -> u64 {
        u64::try_from(self.fixed).unwrap_or(0)
    }

    /// Tokens of the view last prepared, the tokens outside the messages included.
    pub fn tokens(&self) -> u64 {
        self.total(self.view_tokens)
    }

    /// A request of messages counting `messages` tokens: those plus the tokens outside them. A
    /// provider's report can make the latter negative (the tokenizer overcounts); the total is
    /// never taken below half the messages' own count, so one odd report cannot switch pruning
    /// off.
    fn total(&self, messages: u64) -> u64 {
        messages.saturating_add_signed(self.fixed).max(messages / 2)
    }

    /// Brings the view up to date with `conversation` (which only ever grows). `notice` writes
    /// the state notice when a prune is needed; it is called at most once. On success the view
    /// is [`ContextWindow::messages`].
    pub fn prepare(
        &mut self,
        conversation: &[Message],
        notice: impl FnOnce() -> String,
    ) -> Result<(), Exhausted> {
        self.count_new(conversation);
        let new: u64 = self.sizes[self.covered..]
            .iter()
            .map(|&s| u64::from(s))
            .sum();
        let candidate = self.view_tokens + new;
        if self.total(candidate) <= u64::from(self.policy.prune_at) {
            self.append(conversation, candidate);
            return Ok(());
        }
        let notice = Message::kernel(notice());
        let notice_tokens = message_tokens(&*self.tokenizer, &notice);
        let plan = prune(
            conversation,
            &self.sizes,
            self.fixed(),
            notice_tokens,
            &self.policy,
        )?;
        self.view_tokens = plan.tokens.saturating_sub(self.fixed());
        if plan.pruned() {
            self.stats.prunes += 1;
        }
        self.render(conversation, &plan, &notice);
        Ok(())
    }

    /// The view prepared last: `conversation` itself while nothing is pruned or cut.
    pub fn messages<'a>(&'a self, conversation: &'a [Message]) -> &'a [Message] {
        if self.owned { &self.view } else { conversation }
    }

    /// Records a turn's reported usage for the view just sent: its input tokens recalibrate the
    /// tokens outside the messages, its output tokens become the size of the reply.
    pub fn observe(&mut self, usage: Option<Usage>) {
        let Some(usage) = usage.filter(|u| !u.is_zero()) else {
            return;
        };
        let input = i64::try_from(usage.input_tokens).unwrap_or(i64::MAX);
        let sent = i64::try_from(self.view_tokens).unwrap_or(i64::MAX);
        self.fixed = input - sent;
        self.reply = Some(u32::try_from(usage.output_tokens).unwrap_or(u32::MAX));
    }

    /// Counts the messages not counted yet, cutting long tool results.
    fn count_new(&mut self, conversation: &[Message]) {
        let reply = self.reply.take();
        let first = self.sizes.len();
        for (i, m) in conversation.iter().enumerate().skip(first) {
            let size = match (reply, m.role) {
                // The reply the provider just counted: its output tokens (its tool calls
                // included) are exact.
                (Some(out), Role::Assistant) if i == first => MESSAGE_OVERHEAD.saturating_add(out),
                _ => self.count_or_cut(i, m),
            };
            self.sizes.push(size);
        }
    }

    fn count_or_cut(&mut self, i: usize, m: &Message) -> u32 {
        let size = message_tokens(&*self.tokenizer, m);
        let Some(max) = self.policy.max_tool_result_tokens else {
            return size;
        };
        if m.role != Role::Tool || m.author != Author::Tool || size <= max {
            return size;
        }
        let cut = cut_result(&*self.tokenizer, m, max);
        let cut_size = message_tokens(&*self.tokenizer, &cut);
        self.cut.push((i, cut));
        self.stats.truncated_results += 1;
        cut_size
    }

    fn message<'a>(&'a self, conversation: &'a [Message], i: usize) -> &'a Message {
        match self.cut.binary_search_by_key(&i, |(k, _)| *k) {
            Ok(at) => &self.cut[at].1,
            Err(_) => &conversation[i],
        }
    }

    /// Appends the messages after the covered ones to the current view.
    fn append(&mut self, conversation: &[Message], tokens: u64) {
        let start = self.covered;
        self.covered = conversation.len();
        self.view_tokens = tokens;
        let first_cut = self.cut.partition_point(|(k, _)| *k < start);
        if !self.owned && first_cut == self.cut.len() {
            // Nothing pruned and nothing cut: the conversation is the view.
            self.note_sent();
            return;
        }
        if !self.owned {
            self.view.clear();
            self.view.extend(conversation[..start].iter().cloned());
            self.owned = true;
        }
        for i in start..conversation.len() {
            let m = self.message(conversation, i).clone();
            self.view.push(m);
        }
        self.note_sent();
    }

    fn render(&mut self, conversation: &[Message], plan: &Plan, notice: &Message) {
        self.covered = conversation.len();
        let mut view = std::mem::take(&mut self.view);
        plan.render(|i| self.message(conversation, i), notice, &mut view);
        self.view = view;
        self.owned = plan.pruned() || !self.cut.is_empty();
        self.note_sent();
    }

    fn note_sent(&mut self) {
        let tokens = self.tokens();
        self.stats.peak_tokens = self.stats.peak_tokens.max(tokens);
        let messages = if self.owned {
            self.view.len()
        } else {
            self.covered
        };
        self.stats.view_messages = u32::try_from(messages).unwrap_or(u32::MAX);
    }
}

/// A copy of the tool result `m` cut to about `max` tokens, with a marker
/// saying how much was cut and how to get the rest. Kernel text after the evidence (a budget
/// warning) is kept after the marker.
pub fn cut_result(tokenizer: &dyn Tokenizer, m: &Message, max: u32) -> Message {
    let evidence = m.evidence();
    let suffix = m.content.get(evidence.len()..).unwrap_or("");
    let total = tokenizer.count(evidence);
    let call = m.tool_call_id.as_deref().unwrap_or("?");
    let tool = m.tool_name.as_deref().unwrap_or("?");
    let marker = |kept: u32| {
        format!(
            "\n\n[terminus: cut to fit the context, {} of {total} tokens not shown; the journal \
             keeps all of call {call}. For the rest, call {tool} for a narrower part.]",
            total.saturating_sub(kept)
        )
    };
    let room_for_marker = tokenizer
        .count(&marker(0))
        .saturating_add(MESSAGE_OVERHEAD + 8);
    let budget = max.saturating_sub(room_for_marker);
    let at = tokenizer.prefix(evidence, budget);
    let kept = tokenizer.count(&evidence[..at]);
    let mut content = String::with_capacity(at + 256 + suffix.len());
    content.push_str(&evidence[..at]);
    content.push_str(&marker(kept));
    let mut cut = Message::tool_result(
        call.to_owned(),
        tool.to_owned(),
        content,
        (!suffix.is_empty()).then_some(suffix.trim_start_matches('\n')),
    );
    cut.tool_call_id.clone_from(&m.tool_call_id);
    cut
}
