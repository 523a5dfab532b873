//! [`ContextWindow`]: the model's view of a run's conversation, kept up to date turn by turn.
//!
//! The runtime's conversation (and the journal) keep everything; the window only decides what
//! the model is sent. Each message is counted once, when it first appears (a turn costs only its
//! new messages). A tool result over the policy's limit is cut in the view, with a marker. A
//! turn's reported usage is preferred over the tokenizer: the reply's size becomes its output
//! tokens, and the prompt's input tokens recalibrate the tokens the messages do not show (tool
//! definitions, the provider's framing, the tokenizer's error). While the view plus the new
//! messages stays under `prune_at` they are appended to it (the prompt's prefix stays the same
//! from turn to turn); past it, the whole conversation is pruned again by [`prune`]. A system
//! prompt over the policy's `max_system_tokens` is cut in the view like a long tool result.

use super::policy::ContextPolicy;
use super::prune::{Exhausted, Plan, prune_with};
use super::salience::Referrals;
use super::tokenizer::{MESSAGE_OVERHEAD, Tokenizer, message_tokens};
use crate::message::{Author, Message, Role};
use serde::{Deserialize, Serialize};
use std::collections::BTreeSet;
use std::fmt;
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
    /// Tokens of the system prompt not shown: it was over `max_system_tokens` and cut to fit
    /// (0, and then absent from the JSON form, when it was not cut).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub system_cut_tokens: u32,
}

#[allow(clippy::trivially_copy_pass_by_ref)] // serde's `skip_serializing_if` passes a reference
const fn is_zero(n: &u32) -> bool {
    *n == 0
}

/// One prune of the model's view: before which model call, and how much it dropped.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct ContextPrune {
    /// The model call the pruned view was sent with (1-based, retries counted).
    pub model_call: u32,
    /// The kernel's step after which that call was made.
    pub step: u32,
    /// Messages of the conversation the view was pruned from.
    pub messages_before: u32,
    /// Messages of the view sent (the state notice included).
    pub messages_after: u32,
    /// Tokens of the whole conversation as one request (the tokens outside the messages and
    /// tool results at their cut size included).
    pub tokens_before: u64,
    /// Tokens of the view sent.
    pub tokens_after: u64,
}

impl fmt::Display for ContextPrune {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "context pruned for model call {} (after step {}): {} messages, {} tokens -> {} \
             messages, {} tokens",
            self.model_call,
            self.step,
            self.messages_before,
            self.tokens_before,
            self.messages_after,
            self.tokens_after
        )
    }
}

/// The system prompt was over `max_system_tokens` and was cut to fit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct SystemCut {
    /// Tokens of the whole system prompt.
    pub total: u32,
    /// Tokens of it still shown (before the marker).
    pub shown: u32,
    /// `max_system_tokens`.
    pub max: u32,
}

impl fmt::Display for SystemCut {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "the system prompt was cut to fit context.max_system_tokens = {}: {} of {} tokens \
             not shown",
            self.max,
            self.total.saturating_sub(self.shown),
            self.total
        )
    }
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
    /// The prune the last [`ContextWindow::prepare`] made, until taken.
    pruned: Option<ContextPrune>,
    /// The system prompt's cut, until taken.
    system_cut: Option<SystemCut>,
    /// The tools whose results are kept while the view can hold them.
    keep_tools: BTreeSet<String>,
    /// Which results a later assistant message referred to, kept as messages are counted.
    referrals: Referrals,
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
            pruned: None,
            system_cut: None,
            keep_tools: BTreeSet::new(),
            referrals: Referrals::default(),
        }
    }

    /// Keeps the results of the tools called `tools` in the view while it can hold them (the
    /// tools' `keep` flag): a prune drops one only when the view could not hold it under the
    /// limit, the ones nothing referred to and the oldest first. Each is still cut to
    /// `max_tool_result_tokens`.
    #[must_use]
    pub fn keeping(mut self, tools: impl IntoIterator<Item = String>) -> ContextWindow {
        self.keep_tools = tools.into_iter().collect();
        self
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

    /// The prune the last [`ContextWindow::prepare`] made, if it pruned, for the view sent with
    /// model call `model_call` after step `step`; taken (a second call answers `None`).
    pub fn take_prune(&mut self, model_call: u32, step: u32) -> Option<ContextPrune> {
        self.pruned.take().map(|p| ContextPrune {
            model_call,
            step,
            ..p
        })
    }

    /// The cut of the system prompt, once it was counted and found over `max_system_tokens`;
    /// taken (a second call answers `None`).
    pub fn take_system_cut(&mut self) -> Option<SystemCut> {
        self.system_cut.take()
    }

    /// The size in the view of each message counted so far (after a [`ContextWindow::prepare`]:
    /// every message of the conversation).
    pub fn sizes(&self) -> &[u32] {
        &self.sizes
    }

    /// Per message counted so far: whether it is a tool result a later assistant message
    /// referred to ([`super::referred`]), which a prune drops last.
    pub fn referred(&self) -> &[bool] {
        self.referrals.referred()
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
        let plan = prune_with(
            conversation,
            &self.sizes,
            self.fixed(),
            notice_tokens,
            &self.policy,
            &self.keep_tools,
            self.referrals.referred(),
        )?;
        self.view_tokens = plan.tokens.saturating_sub(self.fixed());
        if plan.pruned() {
            self.stats.prunes += 1;
        }
        self.render(conversation, &plan, &notice);
        if plan.pruned() {
            let whole: u64 = self.sizes.iter().map(|&s| u64::from(s)).sum();
            self.pruned = Some(ContextPrune {
                model_call: 0,
                step: 0,
                messages_before: u32::try_from(conversation.len()).unwrap_or(u32::MAX),
                messages_after: self.stats.view_messages,
                tokens_before: self.total(whole),
                tokens_after: self.tokens(),
            });
        }
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
            self.referrals.push(m);
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
        if m.role == Role::System
            && let Some(max) = self.policy.max_system_tokens
        {
            let total = self.tokenizer.count(&m.content);
            if total > max {
                let (cut, shown) = cut_system(&*self.tokenizer, m, max);
                let cut_size = message_tokens(&*self.tokenizer, &cut);
                self.cut.push((i, cut));
                self.stats.system_cut_tokens = self
                    .stats
                    .system_cut_tokens
                    .saturating_add(total.saturating_sub(shown));
                self.system_cut = Some(SystemCut { total, shown, max });
                return cut_size;
            }
        }
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
        cut_marker(
            total.saturating_sub(kept),
            total,
            &format!(
                "the journal keeps all of call {call}. For the rest, call {tool} for a narrower \
                 part."
            ),
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

/// The truncation marker: how much of `total` tokens was cut, then `tail` (where the rest is).
fn cut_marker(cut: u32, total: u32, tail: &str) -> String {
    format!("\n\n[terminus: cut to fit the context, {cut} of {total} tokens not shown; {tail}]")
}

/// A copy of the system message `m` whose text is cut to at most `max` tokens (counted with
/// `tokenizer`), with the truncation marker of a long tool result; and the tokens of the
/// original text still shown. A `max` smaller than the marker leaves the marker alone.
pub fn cut_system(tokenizer: &dyn Tokenizer, m: &Message, max: u32) -> (Message, u32) {
    let total = tokenizer.count(&m.content);
    let tail = format!("the system prompt is capped at context.max_system_tokens = {max}.");
    // The marker at its longest (every token cut), and a token for the seam.
    let room_for_marker = tokenizer
        .count(&cut_marker(total, total, &tail))
        .saturating_add(1);
    let budget = max.saturating_sub(room_for_marker);
    let mut at = tokenizer.prefix(&m.content, budget);
    let mut shown = tokenizer.count(&m.content[..at]);
    let marker = |shown: u32| cut_marker(total.saturating_sub(shown), total, &tail);
    // An exact tokenizer may merge tokens across the seam: shorten until the whole fits.
    while at > 0 && tokenizer.count(&format!("{}{}", &m.content[..at], marker(shown))) > max {
        let shorter = tokenizer.prefix(&m.content, shown.saturating_sub(1));
        at = if shorter < at {
            shorter
        } else {
            m.content[..at]
                .char_indices()
                .next_back()
                .map_or(0, |(i, _)| i)
        };
        shown = tokenizer.count(&m.content[..at]);
    }
    let mut content = String::with_capacity(at + tail.len() + 96);
    content.push_str(&m.content[..at]);
    let marker = marker(shown);
    content.push_str(if at == 0 {
        marker.trim_start_matches('\n')
    } else {
        &marker
    });
    let mut cut = Message::system(content);
    cut.author = m.author;
    (cut, shown)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::context::Heuristic;

    /// A system prompt of `tokens` heuristic tokens whose every part can be told apart.
    fn prompt(tokens: usize) -> String {
        let mut text = String::with_capacity(tokens * 4);
        let mut i = 0;
        while text.len() < tokens * 4 {
            text.push_str(&format!("rule {i:04}; "));
            i += 1;
        }
        text.truncate(tokens * 4);
        text
    }

    #[test]
    fn a_system_prompt_over_max_system_tokens_is_cut_with_the_marker_in_the_view_only() {
        let policy = ContextPolicy {
            max_system_tokens: Some(200),
            ..ContextPolicy::for_window(100_000)
        };
        let mut window = ContextWindow::new(policy, Arc::new(Heuristic), 0);
        let whole = prompt(1_000);
        let mut conversation = vec![Message::system(whole.clone()), Message::user("The task.")];
        window
            .prepare(&conversation, String::new)
            .expect("the view fits");
        let cut = window.take_system_cut().expect("the prompt was cut");
        assert_eq!((cut.total, cut.max), (1_000, 200));
        let hidden = 1_000 - cut.shown;
        let view = window.messages(&conversation);
        assert_eq!(view.len(), 2);
        let system = &view[0];
        assert_eq!((system.role, system.author), (Role::System, Author::Host));
        assert!(
            Heuristic.count(&system.content) <= 200,
            "{} tokens",
            Heuristic.count(&system.content)
        );
        let marker = format!(
            "\n\n[terminus: cut to fit the context, {hidden} of 1000 tokens not shown; the system \
             prompt is capped at context.max_system_tokens = 200.]"
        );
        let head = system
            .content
            .strip_suffix(&marker)
            .unwrap_or_else(|| panic!("no marker at the end of {:?}", system.content));
        assert!(!head.is_empty() && whole.starts_with(head), "{head:?}");
        assert_eq!(Heuristic.count(head), cut.shown);
        assert!(cut.shown > 100, "most of the room is the prompt's: {cut:?}");
        assert_eq!(window.stats().system_cut_tokens, hidden);
        assert_eq!(window.sizes()[0], message_tokens(&Heuristic, system));
        // The conversation keeps the whole prompt; the cut is said once.
        assert_eq!(conversation[0].content, whole);
        assert_eq!(window.take_system_cut(), None);
        conversation.push(Message::assistant("Working on it.", Vec::new()));
        conversation.push(Message::user("Go on."));
        window
            .prepare(&conversation, String::new)
            .expect("the view fits");
        assert_eq!(window.take_system_cut(), None);
        assert_eq!(window.stats().system_cut_tokens, hidden);
        let view = window.messages(&conversation);
        assert_eq!(view.len(), 4);
        assert!(view[0].content.ends_with(&marker));

        // At or under the limit the prompt is sent as it is.
        let policy = ContextPolicy {
            max_system_tokens: Some(1_000),
            ..ContextPolicy::for_window(100_000)
        };
        let mut window = ContextWindow::new(policy, Arc::new(Heuristic), 0);
        window
            .prepare(&conversation, String::new)
            .expect("the view fits");
        assert_eq!(window.take_system_cut(), None);
        assert_eq!(window.stats().system_cut_tokens, 0);
        assert_eq!(window.messages(&conversation)[0].content, whole);
    }

    #[test]
    fn a_limit_smaller_than_the_marker_leaves_the_marker_alone() {
        let m = Message::system(prompt(1_000));
        let (cut, shown) = cut_system(&Heuristic, &m, 5);
        assert_eq!(shown, 0);
        assert!(
            cut.content
                .starts_with("[terminus: cut to fit the context, 1000 of 1000 tokens not shown;"),
            "{}",
            cut.content
        );
    }

    #[test]
    fn a_prune_is_taken_once_with_the_sizes_before_and_after() {
        let policy = ContextPolicy::for_window(2_000);
        let mut window = ContextWindow::new(policy, Arc::new(Heuristic), 0);
        let mut conversation = vec![Message::system("Be brief."), Message::user("The task.")];
        window
            .prepare(&conversation, String::new)
            .expect("the view fits");
        assert_eq!(window.take_prune(1, 0), None, "nothing pruned");
        for i in 0..20 {
            conversation.push(Message::assistant(
                format!("{i:03} {}", "w".repeat(396)),
                Vec::new(),
            ));
            conversation.push(Message::user(format!("go on {i}")));
        }
        window
            .prepare(&conversation, || {
                format!(
                    "{NOTICE} where the run is",
                    NOTICE = crate::context::NOTICE_HEADER
                )
            })
            .expect("the view fits");
        assert_eq!(window.stats().prunes, 1);
        let prune = window.take_prune(5, 9).expect("a prune");
        assert_eq!((prune.model_call, prune.step), (5, 9));
        assert_eq!(prune.messages_before, 42);
        assert_eq!(
            prune.messages_after as usize,
            window.messages(&conversation).len()
        );
        assert!(prune.messages_after < prune.messages_before, "{prune:?}");
        assert!(
            prune.tokens_before > u64::from(policy.prune_at),
            "{prune:?}"
        );
        assert_eq!(prune.tokens_after, window.tokens());
        assert!(
            prune.tokens_after <= u64::from(policy.prune_to),
            "{prune:?}"
        );
        assert_eq!(window.take_prune(6, 11), None, "taken once");
        assert_eq!(
            prune.to_string(),
            format!(
                "context pruned for model call 5 (after step 9): 42 messages, {} tokens -> {} \
                 messages, {} tokens",
                prune.tokens_before, prune.messages_after, prune.tokens_after
            )
        );
    }
}
