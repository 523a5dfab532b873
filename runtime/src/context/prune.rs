//! Pruning: which messages of a conversation the model sees once it no longer fits.
//!
//! [`prune`] is a pure function of the messages, their token sizes, the tokens outside the
//! messages and the policy. It works on *units*: an assistant message with tool calls and the
//! tool results that answer it form one unit (kept or dropped together, since providers reject a
//! call without its result and a result without its call); every other message is a unit of its
//! own. Kept always:
//!
//! - every system message and the first user message from the host (the task);
//! - the unit holding the latest result of every distinct tool;
//! - the last [`ContextPolicy::keep_recent_turns`] model turns and everything after them;
//! - a state notice, inserted after the task (its text is the caller's: iteration, budgets,
//!   tools already run from the ledger, open todos).
//!
//! Units are ranked: those holding a result a later assistant message refers to first
//! ([`referred`]: the agent used it), then the others, each group newest first. The units
//! holding a result of a tool marked `keep` are added back in rank order, each that still fits
//! [`ContextPolicy::limit`]. Then the other older units are added back in rank order while the
//! view stays under [`ContextPolicy::prune_to`]; the first that does not fit ends it. If what
//! must be kept exceeds [`ContextPolicy::limit`], the answer is [`Exhausted`] and the run stops
//! with `context_exhausted`. When nothing can be dropped, or what could be dropped costs no
//! more than the notice, the view is the conversation itself, without a notice, if it fits (so
//! `Exhausted` means that no view the rules allow fits). A conversation under
//! [`ContextPolicy::prune_at`] is returned whole, so pruning a pruned view changes nothing.

use super::policy::ContextPolicy;
use super::salience::referred;
use crate::message::{Author, Message, Role};
use std::collections::{BTreeSet, HashMap};
use std::ops::Range;

/// The first line of every state notice; a notice found in the input (an earlier prune's) is
/// replaced, never kept.
pub const NOTICE_HEADER: &str = "[terminus: context pruned]";

/// Which messages the model sees.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Plan {
    /// Indices of the kept messages, in order.
    pub keep: Vec<usize>,
    /// Where the state notice goes: before `keep[notice_at]` (`keep.len()`: at the end).
    /// `None`: nothing was pruned and there is no notice.
    pub notice_at: Option<usize>,
    /// The view's tokens: the kept messages, the notice and the tokens outside the messages.
    pub tokens: u64,
}

impl Plan {
    /// Whether the plan drops anything.
    pub fn pruned(&self) -> bool {
        self.notice_at.is_some()
    }

    /// The view: the kept messages (through `message`, which may substitute a truncated copy)
    /// with the notice in its place.
    pub fn render<'a>(
        &self,
        message: impl Fn(usize) -> &'a Message,
        notice: &Message,
        out: &mut Vec<Message>,
    ) {
        out.clear();
        out.reserve(self.keep.len() + 1);
        for (at, &i) in self.keep.iter().enumerate() {
            if self.notice_at == Some(at) {
                out.push(notice.clone());
            }
            out.push(message(i).clone());
        }
        if self.notice_at == Some(self.keep.len()) {
            out.push(notice.clone());
        }
    }
}

/// What must be kept does not fit the window.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Exhausted {
    /// Tokens of the smallest view the invariants allow.
    pub needed: u64,
    /// [`ContextPolicy::limit`].
    pub limit: u64,
}

/// Whether `m` is a state notice of an earlier prune.
pub fn is_notice(m: &Message) -> bool {
    m.author == Author::Kernel && m.role == Role::User && m.content.starts_with(NOTICE_HEADER)
}

/// The units of a conversation, as index ranges in order. A tool message that follows no call
/// of its own (an orphan) is a unit alone and is marked `false` in the second vector: it is
/// dropped whenever the conversation is pruned.
pub fn units(messages: &[Message]) -> Vec<(Range<usize>, bool)> {
    let mut units = Vec::with_capacity(messages.len());
    let mut i = 0;
    while i < messages.len() {
        let m = &messages[i];
        if m.role == Role::Assistant && !m.tool_calls.is_empty() {
            let mut end = i + 1;
            while let Some(next) = messages.get(end) {
                let answers = next.role == Role::Tool
                    && next
                        .tool_call_id
                        .as_deref()
                        .is_some_and(|id| m.tool_calls.iter().any(|c| c.id == id));
                if !answers {
                    break;
                }
                end += 1;
            }
            units.push((i..end, true));
            i = end;
        } else {
            units.push((i..i + 1, m.role != Role::Tool && !is_notice(m)));
            i += 1;
        }
    }
    units
}

/// The plan for `messages` whose sizes in tokens are `sizes` (one per message), with `fixed`
/// tokens outside the messages (tool definitions, framing), a state notice of `notice` tokens,
/// and `keep_tools` the tools whose results are kept while the view can hold them. See the
/// module documentation for the rules.
pub fn prune(
    messages: &[Message],
    sizes: &[u32],
    fixed: u64,
    notice: u32,
    policy: &ContextPolicy,
    keep_tools: &BTreeSet<String>,
) -> Result<Plan, Exhausted> {
    prune_with(
        messages,
        sizes,
        fixed,
        notice,
        policy,
        keep_tools,
        &referred(messages),
    )
}

/// [`prune`], with `used` what [`referred`] answers for `messages` (a
/// [`Referrals`](super::Referrals) keeps it as the conversation grows, so that a prune scans no
/// text).
pub fn prune_with(
    messages: &[Message],
    sizes: &[u32],
    fixed: u64,
    notice: u32,
    policy: &ContextPolicy,
    keep_tools: &BTreeSet<String>,
    used: &[bool],
) -> Result<Plan, Exhausted> {
    debug_assert_eq!(messages.len(), sizes.len());
    debug_assert_eq!(messages.len(), used.len());
    let size = |r: &Range<usize>| -> u64 { sizes[r.clone()].iter().map(|&s| u64::from(s)).sum() };
    let total = fixed + size(&(0..messages.len()));
    if total <= u64::from(policy.prune_at) {
        return Ok(Plan {
            keep: (0..messages.len()).collect(),
            notice_at: None,
            tokens: total,
        });
    }
    let units = units(messages);
    let mut pinned = vec![false; units.len()];
    let mut unit_of = vec![0usize; messages.len()];
    for (u, (range, _)) in units.iter().enumerate() {
        for i in range.clone() {
            unit_of[i] = u;
        }
    }
    // The system messages and the task.
    let mut task = None;
    for (i, m) in messages.iter().enumerate() {
        match (m.role, m.author) {
            (Role::System, _) => pinned[unit_of[i]] = true,
            (Role::User, Author::Host) if task.is_none() => {
                task = Some(i);
                pinned[unit_of[i]] = true;
            }
            _ => {}
        }
    }
    // The latest result of every distinct tool.
    let mut latest: HashMap<&str, usize> = HashMap::new();
    for (i, m) in messages.iter().enumerate() {
        if m.role == Role::Tool
            && let Some(name) = m.tool_name.as_deref()
        {
            latest.insert(name, i);
        }
    }
    for &i in latest.values() {
        pinned[unit_of[i]] = true;
    }
    // The latest checkpoint written for the agent: the findings it stands for.
    if let Some(i) = messages.iter().rposition(|m| {
        m.author == Author::Kernel
            && m.role == Role::User
            && m.content
                .starts_with(terminus_kernel::CHECKPOINT_NOTE_START)
    }) {
        pinned[unit_of[i]] = true;
    }
    // The most recent turns and everything after them.
    let turns = usize::try_from(policy.keep_recent_turns).unwrap_or(usize::MAX);
    if turns > 0 {
        let start = messages
            .iter()
            .enumerate()
            .rev()
            .filter(|(_, m)| m.role == Role::Assistant)
            .nth(turns - 1)
            .map_or(0, |(i, _)| i);
        for p in &mut pinned[unit_of.get(start).copied().unwrap_or(units.len())..] {
            *p = true;
        }
    }
    // Orphan tool results and old notices are never kept.
    for (u, (_, keepable)) in units.iter().enumerate() {
        if !keepable {
            pinned[u] = false;
        }
    }
    let limit = u64::from(policy.limit());
    // Nothing to drop (the recent turns are the whole conversation): the view is the
    // conversation, if it fits.
    let whole = || {
        if total > limit {
            return Err(Exhausted {
                needed: total,
                limit,
            });
        }
        Ok(Plan {
            keep: (0..messages.len()).collect(),
            notice_at: None,
            tokens: total,
        })
    };
    if pinned.iter().all(|p| *p) {
        return whole();
    }
    let mut kept = pinned.clone();
    let mut tokens = fixed + u64::from(notice);
    for (u, (range, _)) in units.iter().enumerate() {
        if pinned[u] {
            tokens += size(range);
        }
    }
    // What pruning could drop costs no more than the notice: the conversation itself is the
    // smallest view (unless it holds an orphan result or an old notice, which a view never
    // shows). Without this, a conversation that fits the limit could be refused as exhausted.
    if tokens >= total && units.iter().all(|(_, keepable)| *keepable) {
        return whole();
    }
    if tokens > limit {
        return Err(Exhausted {
            needed: tokens,
            limit,
        });
    }
    // Which units hold a result of a kept tool, and which a result the agent referred to
    // later (the tool's own results: a kernel refusal is neither).
    let mut keeps = vec![false; units.len()];
    let mut cited = vec![false; units.len()];
    for (i, m) in messages.iter().enumerate() {
        if m.role == Role::Tool && m.author == Author::Tool {
            let u = unit_of[i];
            keeps[u] |= m
                .tool_name
                .as_deref()
                .is_some_and(|n| keep_tools.contains(n));
            cited[u] |= used.get(i).copied().unwrap_or(false);
        }
    }
    // Units in rank order: those whose results the agent referred to first, then the others,
    // each group newest first (the sort is stable).
    let ranked = |keep: bool| {
        let mut order: Vec<usize> = (0..units.len())
            .rev()
            .filter(|&u| !pinned[u] && units[u].1 && keeps[u] == keep)
            .collect();
        order.sort_by_key(|&u| !cited[u]);
        order
    };
    // A kept tool's results, in rank order, each that fits the limit: the host said the agent
    // needs them, so they may take the view past `prune_to` (it is then pruned again sooner),
    // and one too large to fit does not keep a smaller one out.
    for u in ranked(true) {
        let s = size(&units[u].0);
        if tokens + s <= limit {
            tokens += s;
            kept[u] = true;
        }
    }
    // Older units back while under `prune_to`, in rank order. The first unit that does not fit
    // ends it, so each rank comes back as a contiguous run, newest first.
    for u in ranked(false) {
        let s = size(&units[u].0);
        if tokens + s > u64::from(policy.prune_to) {
            break;
        }
        tokens += s;
        kept[u] = true;
    }
    if kept.iter().all(|k| *k) {
        return whole();
    }
    let mut keep = Vec::with_capacity(messages.len());
    let mut notice_at = None;
    let anchor = task.or_else(|| messages.iter().rposition(|m| m.role == Role::System));
    for (u, (range, _)) in units.iter().enumerate() {
        if kept[u] {
            keep.extend(range.clone());
        }
        if anchor.is_some_and(|a| range.contains(&a)) {
            notice_at = Some(keep.len());
        }
    }
    Ok(Plan {
        keep,
        notice_at: Some(notice_at.unwrap_or(0)),
        tokens,
    })
}
