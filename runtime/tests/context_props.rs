//! The pruning rules of `spec/context.md`, proved over random conversations, and the per-run
//! [`ContextWindow`] on examples.
//!
//! The generator builds conversations as a host does: system prompt(s), the task, then model
//! turns with 0 to 4 tool calls, each call answered at once by its result (sometimes a kernel
//! refusal, sometimes with a budget warning appended), and kernel nudges between turns. Tool
//! names come from a pool of five, so that tools repeat and "the latest result of each tool" is
//! not "every result". Every property recomputes what it checks from the messages themselves
//! (which results answer which call, which messages are mandatory), never from the pruner's own
//! helpers.
//!
//! Some results carry an identifier (`obj007k1`) that a later assistant message may quote, and
//! some tools are marked `keep`, so that the rules on referred results and kept tools are tested
//! on the same conversations.

use proptest::prelude::*;
use proptest::strategy::ValueTree;
use proptest::test_runner::TestRunner;
use serde_json::json;
use std::collections::{BTreeSet, HashMap, HashSet};
use std::sync::{Arc, Mutex};
use terminus_kernel::{ToolCall, Usage};
use terminus_runtime::context::{
    ContextPolicy, ContextWindow, Exhausted, Heuristic, MESSAGE_OVERHEAD, NOTICE_HEADER, Plan,
    Tokenizer, is_notice, message_tokens, prune, referred,
};
use terminus_runtime::{Author, Message, Role};

// ----- the generator -----

const TOOLS: [&str; 5] = ["read_file", "grep", "run_tests", "list_dir", "write_file"];

#[derive(Debug, Clone)]
struct CallSpec {
    tool: usize,
    output: usize,
    refused: bool,
    warned: bool,
    /// The result names an identifier a later message may quote.
    mention: bool,
}

#[derive(Debug, Clone)]
struct TurnSpec {
    nudge: bool,
    /// A checkpoint written for the agent comes before the turn (rule 11).
    checkpoint: bool,
    text: usize,
    calls: Vec<CallSpec>,
    /// The turn's text quotes the identifier of an earlier result (this one, modulo their
    /// number).
    quote: Option<usize>,
}

#[derive(Debug, Clone)]
struct Script {
    systems: usize,
    task: usize,
    turns: Vec<TurnSpec>,
    /// Which of [`TOOLS`] are marked `keep`.
    keep: [bool; TOOLS.len()],
}

impl Script {
    fn keep_tools(&self) -> BTreeSet<String> {
        TOOLS
            .iter()
            .zip(self.keep)
            .filter(|(_, k)| *k)
            .map(|(t, _)| (*t).to_owned())
            .collect()
    }
}

/// The identifier the result of call `k` of turn `t` names, when it names one.
fn mention(t: usize, k: usize) -> String {
    format!("obj{t:03}k{k}")
}

/// The identifiers the results of `messages` name, in order.
fn mentions(messages: &[Message]) -> Vec<&str> {
    messages
        .iter()
        .filter(|m| m.role == Role::Tool && m.author == Author::Tool)
        .filter_map(|m| m.content.split(' ').find(|w| w.starts_with("obj")))
        .collect()
}

/// About `chars` characters of text starting with `tag` (so that messages differ); empty for 0.
fn text(tag: &str, chars: usize) -> String {
    if chars == 0 {
        return String::new();
    }
    let mut s = String::with_capacity(chars + tag.len() + 16);
    s.push_str(tag);
    s.push(' ');
    s.push_str(&"lorem ipsum dolor sit amet ".repeat(chars / 27 + 1));
    s.truncate(chars.max(tag.len()));
    s
}

fn call_id(turn: usize, k: usize) -> String {
    format!("call-{turn}-{k}")
}

/// A kernel nudge as the kernel writes it (short, never a notice).
fn nudge(turn: usize) -> Message {
    Message::kernel(format!(
        "[terminus] Turn {turn}: the task is not done yet; continue, or finish with the result."
    ))
}

/// A checkpoint written for the agent, as the runtime adds it: the kernel's note, then the
/// model's summary.
fn checkpoint(turn: usize) -> Message {
    Message::kernel(format!(
        "{}: the budget of `read_file` refused calls in two turns. Your checkpoint:\n\n\
         Before turn {turn}: read the sources, the plan is left.",
        terminus_kernel::CHECKPOINT_NOTE_START
    ))
}

/// Whether `m` is a checkpoint written for the agent.
fn is_checkpoint(m: &Message) -> bool {
    m.role == Role::User
        && m.content
            .starts_with(terminus_kernel::CHECKPOINT_NOTE_START)
}

/// One model turn of `script`: the assistant message followed by its results.
fn turn_messages(t: usize, turn: &TurnSpec, out: &mut Vec<Message>) {
    if turn.nudge {
        out.push(nudge(t));
    }
    if turn.checkpoint {
        out.push(checkpoint(t));
    }
    let calls: Vec<ToolCall> = turn
        .calls
        .iter()
        .enumerate()
        .map(|(k, c)| ToolCall {
            id: call_id(t, k).into(),
            name: TOOLS[c.tool].into(),
            arguments: json!({ "path": format!("src/f{t}_{k}.rs") }).into(),
        })
        .collect();
    let quoted = turn.quote.and_then(|q| {
        let earlier = mentions(out);
        (!earlier.is_empty()).then(|| earlier[q % earlier.len()].to_owned())
    });
    let tag = match quoted {
        Some(id) => format!("turn {t} noted {id}"),
        None => format!("turn {t}"),
    };
    out.push(Message::assistant(text(&tag, turn.text), calls.clone()));
    for (k, (call, c)) in calls.iter().zip(&turn.calls).enumerate() {
        out.push(if c.refused {
            Message::tool_refusal(
                &call.id,
                &call.name,
                format!(
                    "[terminus] {} is excluded ({}): it failed 3 times.",
                    call.name, call.id
                ),
            )
        } else {
            Message::tool_result(
                &call.id,
                &call.name,
                text(
                    &if c.mention {
                        format!("output of {} {}", call.id, mention(t, k))
                    } else {
                        format!("output of {}", call.id)
                    },
                    c.output,
                ),
                c.warned
                    .then_some("[terminus] budget: 3 tool calls left in this run."),
            )
        });
    }
}

fn prefix_messages(script: &Script) -> Vec<Message> {
    let mut out = Vec::new();
    for s in 0..script.systems {
        out.push(Message::system(text(&format!("system prompt {s}"), 300)));
    }
    out.push(Message::user(text("the task", script.task)));
    out
}

fn build(script: &Script) -> Vec<Message> {
    let mut out = prefix_messages(script);
    for (t, turn) in script.turns.iter().enumerate() {
        turn_messages(t, turn, &mut out);
    }
    out
}

/// Text sizes from empty to a few thousand characters, mostly small.
fn size() -> impl Strategy<Value = usize> {
    prop_oneof![
        3 => 0usize..40,
        2 => 40usize..400,
        1 => 400usize..4_000,
    ]
}

fn call_spec() -> impl Strategy<Value = CallSpec> {
    (
        0..TOOLS.len(),
        size(),
        prop::bool::weighted(0.1),
        prop::bool::weighted(0.15),
        prop::bool::weighted(0.4),
    )
        .prop_map(|(tool, output, refused, warned, mention)| CallSpec {
            tool,
            output,
            refused,
            warned,
            mention,
        })
}

fn turn_spec() -> impl Strategy<Value = TurnSpec> {
    (
        prop::bool::weighted(0.15),
        prop::bool::weighted(0.1),
        size(),
        prop::collection::vec(call_spec(), 0..=4),
        prop::option::weighted(0.3, any::<usize>()),
    )
        .prop_map(|(nudge, checkpoint, text, calls, quote)| TurnSpec {
            nudge,
            checkpoint,
            text,
            calls,
            quote,
        })
}

fn script() -> impl Strategy<Value = Script> {
    (
        prop_oneof![1 => Just(0usize), 4 => Just(1), 1 => Just(2)],
        size(),
        prop::collection::vec(turn_spec(), 0..24),
        prop::array::uniform5(prop::bool::weighted(0.15)),
    )
        .prop_map(|(systems, task, turns, keep)| Script {
            systems,
            task,
            turns,
            keep,
        })
}

/// Random policies that pass `validate()`.
fn policy() -> impl Strategy<Value = ContextPolicy> {
    (
        200u32..20_000,
        0u32..=50,
        0u32..=100,
        0u32..=100,
        prop::option::of(ContextPolicy::MIN_TOOL_RESULT_TOKENS..4_000),
        0u32..5,
    )
        .prop_map(|(window, reserve_pct, at_pct, to_pct, max, turns)| {
            let reserve = window / 100 * reserve_pct;
            let limit = window - reserve;
            let prune_at =
                u32::try_from(u64::from(limit) * u64::from(at_pct) / 100).expect("below the limit");
            let prune_to = u32::try_from(u64::from(prune_at) * u64::from(to_pct) / 100)
                .expect("below prune_at");
            ContextPolicy {
                window,
                reserve,
                prune_at,
                prune_to,
                max_tool_result_tokens: max,
                keep_recent_turns: turns,
                max_system_tokens: None,
            }
        })
}

/// The state notice every case uses (shaped like `state_notice`'s).
fn notice() -> Message {
    Message::kernel(format!(
        "{NOTICE_HEADER} Earlier messages are not shown, to fit the context window; the run's \
         journal keeps them all. Where the run is:\n- model call 9 of 40, step 17 of 100, tokens \
         52311\n- tools already run: read_file 4 times (4 ok, 0 failed); grep 2 times (2 ok, 0 \
         failed); run_tests 3 times (1 ok, 2 failed)\n- no open todos\nThe latest result of \
         every tool is still shown. Do not call a tool again only to see a result that is no \
         longer shown unless you need its content."
    ))
}

fn sizes_of(messages: &[Message]) -> Vec<u32> {
    messages
        .iter()
        .map(|m| message_tokens(&Heuristic, m))
        .collect()
}

/// One generated input of `prune`.
#[derive(Debug)]
struct Case {
    messages: Vec<Message>,
    sizes: Vec<u32>,
    fixed: u64,
    policy: ContextPolicy,
    notice: Message,
    notice_size: u32,
    /// The tools marked `keep`.
    keep_tools: BTreeSet<String>,
}

impl Case {
    fn new(script: &Script, policy: ContextPolicy, fixed: u64) -> Case {
        assert_eq!(
            policy.validate(),
            Ok(()),
            "the generator makes valid policies"
        );
        let messages = build(script);
        let sizes = sizes_of(&messages);
        let notice = notice();
        let notice_size = message_tokens(&Heuristic, &notice);
        Case {
            messages,
            sizes,
            fixed,
            policy,
            notice,
            notice_size,
            keep_tools: script.keep_tools(),
        }
    }

    fn prune(&self) -> Result<Plan, Exhausted> {
        prune(
            &self.messages,
            &self.sizes,
            self.fixed,
            self.notice_size,
            &self.policy,
            &self.keep_tools,
        )
    }

    fn render(&self, plan: &Plan) -> Vec<Message> {
        let mut view = Vec::new();
        plan.render(|i| &self.messages[i], &self.notice, &mut view);
        view
    }

    fn total(&self) -> u64 {
        self.fixed + self.sizes.iter().map(|&s| u64::from(s)).sum::<u64>()
    }

    fn size_of<'a>(&self, indices: impl IntoIterator<Item = &'a usize>) -> u64 {
        indices.into_iter().map(|&i| u64::from(self.sizes[i])).sum()
    }
}

fn cases() -> impl Strategy<Value = (Script, ContextPolicy, u64)> {
    (script(), policy(), 0u64..200)
}

// ----- the reference: what the rules require, recomputed from the messages -----

/// For each tool message, the index of the assistant message whose calls include its call id.
fn callers(messages: &[Message]) -> Vec<Option<usize>> {
    messages
        .iter()
        .enumerate()
        .map(|(i, m)| {
            let id = m.tool_call_id.as_deref().filter(|_| m.role == Role::Tool)?;
            (0..i).rev().find(|&j| {
                messages[j].role == Role::Assistant
                    && messages[j].tool_calls.iter().any(|c| c.id == id)
            })
        })
        .collect()
}

/// The messages that stand or fall with message `i`: an assistant message with tool calls and
/// every tool message answering them.
fn group(messages: &[Message], callers: &[Option<usize>], i: usize) -> Vec<usize> {
    let head = callers[i].unwrap_or(i);
    let mut out = vec![head];
    if messages[head].role == Role::Assistant {
        out.extend((0..messages.len()).filter(|&j| callers[j] == Some(head)));
    }
    out
}

fn task_index(messages: &[Message]) -> Option<usize> {
    messages
        .iter()
        .position(|m| m.role == Role::User && m.author == Author::Host)
}

/// The latest tool message of each tool name.
fn latest_per_tool(messages: &[Message]) -> HashMap<&str, usize> {
    let mut latest = HashMap::new();
    for (i, m) in messages.iter().enumerate() {
        if m.role == Role::Tool
            && let Some(name) = m.tool_name.as_deref()
        {
            latest.insert(name, i);
        }
    }
    latest
}

/// The first of the last `keep_recent_turns` assistant messages (the first assistant message
/// when there are fewer); `None` when no turn is kept for being recent. (With fewer turns,
/// `prune` keeps everything from the start, a nudge before the first turn too: more than rule 4
/// asks, but harmless, since a nudge is shorter than the notice that dropping it would add.)
fn recent_start(messages: &[Message], policy: &ContextPolicy) -> Option<usize> {
    let turns = usize::try_from(policy.keep_recent_turns).expect("small");
    let assistants: Vec<usize> = (0..messages.len())
        .filter(|&i| messages[i].role == Role::Assistant)
        .collect();
    if turns == 0 || assistants.is_empty() {
        return None;
    }
    Some(assistants[assistants.len().saturating_sub(turns)])
}

/// What every pruned view must keep (the notice aside): the system messages, the task, the
/// latest result of each tool and the recent turns, each with the messages it stands or falls
/// with.
fn mandatory(messages: &[Message], policy: &ContextPolicy) -> BTreeSet<usize> {
    let callers = callers(messages);
    let mut set = BTreeSet::new();
    let mut add = |i: usize| set.extend(group(messages, &callers, i));
    for (i, m) in messages.iter().enumerate() {
        if m.role == Role::System {
            add(i);
        }
    }
    if let Some(task) = task_index(messages) {
        add(task);
    }
    for &i in latest_per_tool(messages).values() {
        add(i);
    }
    if let Some(i) = messages.iter().rposition(is_checkpoint) {
        add(i);
    }
    if let Some(start) = recent_start(messages, policy) {
        for i in start..messages.len() {
            add(i);
        }
    }
    set
}

/// For each message, whether it is a tool's own result whose identifier (see [`mention`]) a
/// later assistant message quotes.
fn referred_ref(messages: &[Message]) -> Vec<bool> {
    messages
        .iter()
        .enumerate()
        .map(|(i, m)| {
            let id = (m.role == Role::Tool && m.author == Author::Tool)
                .then(|| m.content.split(' ').find(|w| w.starts_with("obj")))
                .flatten();
            id.is_some_and(|id| {
                messages[i + 1..]
                    .iter()
                    .any(|a| a.role == Role::Assistant && a.content.contains(id))
            })
        })
        .collect()
}

/// The groups (see [`group`]) a prune may add back under `prune_to`, by their first message,
/// in the order the rules rank them: those holding a referred result newest first, then the
/// others newest first. Groups holding a kept tool's result are ranked apart (rule 10).
fn ranked_optional(case: &Case) -> (Vec<Vec<usize>>, Vec<bool>) {
    let must = mandatory(&case.messages, &case.policy);
    let callers = callers(&case.messages);
    let referred = referred_ref(&case.messages);
    let mut seen = HashSet::new();
    let mut groups: Vec<(Vec<usize>, bool)> = Vec::new();
    for i in (0..case.messages.len()).rev() {
        let g = group(&case.messages, &callers, i);
        if must.contains(&i) || is_notice(&case.messages[i]) || !seen.insert(g[0]) {
            continue;
        }
        if g.iter().any(|&j| kept_tool_result(case, j)) {
            continue;
        }
        let cited = g.iter().any(|&j| referred[j]);
        groups.push((g, cited));
    }
    // Stable: newest first within each rank.
    groups.sort_by_key(|(_, cited)| !cited);
    groups.into_iter().unzip()
}

/// Whether message `j` is a result of a tool marked `keep` (the tool's own, not a refusal).
fn kept_tool_result(case: &Case, j: usize) -> bool {
    let m = &case.messages[j];
    m.role == Role::Tool
        && m.author == Author::Tool
        && m.tool_name
            .as_deref()
            .is_some_and(|n| case.keep_tools.contains(n))
}

/// The smallest view the rules allow: the whole conversation (no notice), or what must be kept
/// plus the notice. (For inputs without old notices or orphan results, which a view never
/// shows.)
fn smallest_view(case: &Case) -> u64 {
    let must = mandatory(&case.messages, &case.policy);
    let whole = case.total();
    if must.len() == case.messages.len() {
        return whole;
    }
    whole.min(case.fixed + case.size_of(&must) + u64::from(case.notice_size))
}

/// Every tool message of `view` answers a call of an assistant message before it, and every
/// call of an assistant message is answered after it.
fn check_pairs(view: &[Message]) -> Result<(), TestCaseError> {
    for (p, m) in view.iter().enumerate() {
        if m.role == Role::Tool {
            let id = m
                .tool_call_id
                .as_deref()
                .expect("tool messages have a call id");
            prop_assert!(
                view[..p]
                    .iter()
                    .any(|a| a.role == Role::Assistant && a.tool_calls.iter().any(|c| c.id == id)),
                "view[{p}] answers {id}, whose call is not in the view before it"
            );
        }
        for c in &m.tool_calls {
            prop_assert!(
                view[p + 1..]
                    .iter()
                    .any(|r| r.role == Role::Tool && r.tool_call_id.as_deref() == Some(&c.id)),
                "view[{p}] calls {} with no result after it",
                c.id
            );
        }
    }
    Ok(())
}

fn kept_set(plan: &Plan) -> HashSet<usize> {
    plan.keep.iter().copied().collect()
}

// ----- the properties -----

proptest! {
    #![proptest_config(ProptestConfig::with_cases(1024))]

    /// Rule 1: every system message and the task are kept.
    #[test]
    fn system_and_task_are_kept((script, policy, fixed) in cases()) {
        let case = Case::new(&script, policy, fixed);
        if let Ok(plan) = case.prune() {
            let kept = kept_set(&plan);
            for (i, m) in case.messages.iter().enumerate() {
                if m.role == Role::System {
                    prop_assert!(kept.contains(&i), "system message {i} dropped");
                }
            }
            let task = task_index(&case.messages).expect("the generator writes a task");
            prop_assert!(kept.contains(&task), "the task ({task}) dropped");
        }
    }

    /// Rule 2: an assistant message with tool calls is kept with every result answering it, and
    /// a result only with its call; the rendered view pairs every call with its results.
    #[test]
    fn tool_calls_and_results_stay_together((script, policy, fixed) in cases()) {
        let case = Case::new(&script, policy, fixed);
        if let Ok(plan) = case.prune() {
            let kept = kept_set(&plan);
            let callers = callers(&case.messages);
            for &i in &plan.keep {
                let m = &case.messages[i];
                if m.role == Role::Assistant {
                    for (j, caller) in callers.iter().enumerate() {
                        if *caller == Some(i) {
                            prop_assert!(kept.contains(&j), "call at {i} kept, its result {j} dropped");
                        }
                    }
                }
                if m.role == Role::Tool {
                    let caller = callers[i];
                    prop_assert!(caller.is_some(), "the generator writes no orphan ({i})");
                    prop_assert!(
                        caller.is_some_and(|a| kept.contains(&a)),
                        "result {i} kept, its call at {caller:?} dropped"
                    );
                }
            }
            check_pairs(&case.render(&plan))?;
        }
    }

    /// Rule 3: the latest result of every distinct tool is kept.
    #[test]
    fn latest_result_of_each_tool_is_kept((script, policy, fixed) in cases()) {
        let case = Case::new(&script, policy, fixed);
        if let Ok(plan) = case.prune() {
            let kept = kept_set(&plan);
            for (name, i) in latest_per_tool(&case.messages) {
                prop_assert!(kept.contains(&i), "latest result of {name} ({i}) dropped");
            }
        }
    }

    /// Rule 4: the last `keep_recent_turns` turns and every message after the first of them are
    /// kept.
    #[test]
    fn recent_turns_are_kept((script, policy, fixed) in cases()) {
        let case = Case::new(&script, policy, fixed);
        if let Ok(plan) = case.prune() {
            let kept = kept_set(&plan);
            if let Some(start) = recent_start(&case.messages, &case.policy) {
                for i in start..case.messages.len() {
                    prop_assert!(
                        kept.contains(&i),
                        "message {i} is after the recent turns' start {start}, dropped"
                    );
                }
            }
        }
    }

    /// Rule 5: a pruned view holds exactly one state notice, right after the task; a view that
    /// is not pruned is the input itself, without a notice.
    #[test]
    fn one_notice_right_after_the_task_iff_pruned((script, policy, fixed) in cases()) {
        let case = Case::new(&script, policy, fixed);
        if let Ok(plan) = case.prune() {
            let view = case.render(&plan);
            let notices = view.iter().filter(|m| is_notice(m)).count();
            if plan.pruned() {
                prop_assert!(plan.keep.len() < case.messages.len(), "pruned, yet nothing dropped");
                prop_assert_eq!(notices, 1);
                prop_assert_eq!(view.len(), plan.keep.len() + 1);
                let task = view
                    .iter()
                    .position(|m| m.role == Role::User && m.author == Author::Host)
                    .expect("the task is in the view");
                prop_assert!(is_notice(&view[task + 1]), "view[{}] is not the notice", task + 1);
                prop_assert_eq!(&view[task + 1], &case.notice);
            } else {
                prop_assert_eq!(notices, 0);
                prop_assert_eq!(&plan.keep, &(0..case.messages.len()).collect::<Vec<_>>());
                prop_assert!(view == case.messages, "not pruned, yet the view is not the input");
            }
        }
    }

    /// Rule 7: the plan's count is the view's (recomputed) and fits the limit; `Exhausted` only
    /// when no view the rules allow fits.
    #[test]
    fn the_view_fits_or_nothing_could((script, policy, fixed) in cases()) {
        let case = Case::new(&script, policy, fixed);
        let limit = u64::from(case.policy.limit());
        match case.prune() {
            Ok(plan) => {
                let notice = if plan.pruned() { u64::from(case.notice_size) } else { 0 };
                let tokens = case.fixed + case.size_of(&plan.keep) + notice;
                prop_assert_eq!(plan.tokens, tokens);
                prop_assert!(plan.tokens <= limit, "{} tokens over the limit {limit}", plan.tokens);
            }
            Err(Exhausted { needed, limit: reported }) => {
                prop_assert_eq!(reported, limit);
                prop_assert!(needed > limit, "needed {needed} <= limit {limit}");
                let smallest = smallest_view(&case);
                prop_assert!(
                    smallest > limit,
                    "exhausted, yet a view of {smallest} tokens fits the limit {limit} \
                     (whole conversation {}, needed reported {needed})",
                    case.total()
                );
                prop_assert_eq!(needed, smallest, "needed is not the smallest view");
            }
        }
    }

    /// Rule 8: pruning a pruned view changes nothing: the view is kept whole (its notice
    /// replaced by the same notice) and renders to itself.
    #[test]
    fn pruning_is_idempotent((script, policy, fixed) in cases()) {
        let case = Case::new(&script, policy, fixed);
        if let Ok(plan) = case.prune() {
            let view = case.render(&plan);
            let again = Case {
                sizes: sizes_of(&view),
                messages: view,
                fixed: case.fixed,
                policy: case.policy,
                notice: case.notice.clone(),
                notice_size: case.notice_size,
                keep_tools: case.keep_tools.clone(),
            };
            let second = again.prune();
            prop_assert!(second.is_ok(), "the view of a plan is exhausted: {second:?}");
            let second = second.expect("checked");
            let not_notices: Vec<usize> = (0..again.messages.len())
                .filter(|&i| !is_notice(&again.messages[i]))
                .collect();
            if second.pruned() {
                prop_assert_eq!(&second.keep, &not_notices, "the second prune dropped messages");
            } else {
                prop_assert_eq!(&second.keep, &(0..again.messages.len()).collect::<Vec<_>>());
            }
            prop_assert_eq!(second.tokens, plan.tokens);
            let view2 = again.render(&second);
            prop_assert_eq!(view2.len(), again.messages.len());
            for (p, (a, b)) in again.messages.iter().zip(&view2).enumerate() {
                prop_assert!(a == b, "the views differ at {p}");
            }
        }
    }

    /// A conversation under `prune_at` is returned whole, without a notice.
    #[test]
    fn under_prune_at_nothing_changes((script, policy, fixed) in cases()) {
        let case = Case::new(&script, policy, fixed);
        let total = case.total();
        if total <= u64::from(case.policy.prune_at) {
            let plan = case.prune();
            prop_assert_eq!(
                plan,
                Ok(Plan {
                    keep: (0..case.messages.len()).collect(),
                    notice_at: None,
                    tokens: total,
                })
            );
        }
    }

    /// The kept messages keep their order; the notice's place is inside the plan.
    #[test]
    fn order_is_preserved((script, policy, fixed) in cases()) {
        let case = Case::new(&script, policy, fixed);
        if let Ok(plan) = case.prune() {
            prop_assert!(plan.keep.windows(2).all(|w| w[0] < w[1]), "not increasing: {:?}", plan.keep);
            prop_assert!(plan.keep.last().is_none_or(|&i| i < case.messages.len()));
            prop_assert!(plan.notice_at.is_none_or(|at| at <= plan.keep.len()));
        }
    }

    /// Rule 6: beyond what must be kept and the kept tools' results, a pruned view holds the
    /// older units in rank order (referred ones newest first, then the others newest first), as
    /// many as fit under `prune_to`: the kept ones are a prefix of the ranking, so within a rank
    /// there is no hole, and the first unit left out would not have fitted.
    #[test]
    fn older_messages_come_back_in_rank_order_without_holes((script, policy, fixed) in cases()) {
        let case = Case::new(&script, policy, fixed);
        if let Ok(plan) = case.prune()
            && plan.pruned()
        {
            let kept = kept_set(&plan);
            let (ranked, _) = ranked_optional(&case);
            let back = ranked.iter().take_while(|g| kept.contains(&g[0])).count();
            for g in &ranked[back..] {
                prop_assert!(
                    g.iter().all(|i| !kept.contains(i)),
                    "unit at {} kept after the unit at {} of a higher rank was dropped",
                    g[0],
                    ranked[back][0]
                );
            }
            for g in &ranked[..back] {
                prop_assert!(g.iter().all(|i| kept.contains(i)), "unit at {} kept in part", g[0]);
            }
            if back > 0 {
                prop_assert!(plan.tokens <= u64::from(case.policy.prune_to));
            }
            if let Some(first) = ranked.get(back) {
                prop_assert!(
                    plan.tokens + case.size_of(first) > u64::from(case.policy.prune_to),
                    "unit at {} ({} tokens) would have fitted under prune_to {} at {}",
                    first[0],
                    case.size_of(first),
                    case.policy.prune_to,
                    plan.tokens
                );
            }
        }
    }

    /// Rule 9: a result a later assistant message refers to is dropped only if every result
    /// of the same kind (neither mandatory nor a kept tool's) that nothing refers to is dropped
    /// too.
    #[test]
    fn a_referred_result_outlives_every_unreferred_one((script, policy, fixed) in cases()) {
        let case = Case::new(&script, policy, fixed);
        if let Ok(plan) = case.prune() {
            let kept = kept_set(&plan);
            let (ranked, cited) = ranked_optional(&case);
            let dropped_cited = ranked
                .iter()
                .zip(&cited)
                .find(|(g, c)| **c && !kept.contains(&g[0]));
            if let Some((dropped, _)) = dropped_cited {
                for (g, c) in ranked.iter().zip(&cited) {
                    prop_assert!(
                        *c || !kept.contains(&g[0]),
                        "the referred unit at {} dropped, the unreferred one at {} kept",
                        dropped[0],
                        g[0]
                    );
                }
            }
        }
    }

    /// Rule 10: a result of a tool marked `keep` is dropped only when the view, as pruned,
    /// could not hold it (with the messages it stands or falls with) under the limit.
    #[test]
    fn a_kept_tools_results_stay_while_the_view_can_hold_them((script, policy, fixed) in cases()) {
        let case = Case::new(&script, policy, fixed);
        if let Ok(plan) = case.prune() {
            let kept = kept_set(&plan);
            let callers = callers(&case.messages);
            let limit = u64::from(case.policy.limit());
            for j in 0..case.messages.len() {
                if kept_tool_result(&case, j) && !kept.contains(&j) {
                    let g = group(&case.messages, &callers, j);
                    prop_assert!(
                        plan.tokens + case.size_of(&g) > limit,
                        "the kept tool's result {j} ({} tokens) dropped, yet it fits: {} of \
                         {limit}",
                        case.size_of(&g),
                        plan.tokens
                    );
                }
            }
        }
    }

    /// Rule 5: a notice of an earlier prune found in the input is replaced, never kept; the
    /// input is returned with it only when it is under `prune_at`.
    #[test]
    fn an_old_notice_is_replaced((script, policy, fixed) in cases()) {
        let mut case = Case::new(&script, policy, fixed);
        let old = Message::kernel(format!(
            "{NOTICE_HEADER} Earlier messages are not shown. Where the run is:\n- model call 3 \
             of 40, step 5 of 100\n- no tool has run yet\n- no open todos"
        ));
        let task = task_index(&case.messages).expect("the generator writes a task");
        case.sizes.insert(task + 1, message_tokens(&Heuristic, &old));
        case.messages.insert(task + 1, old);
        if let Ok(plan) = case.prune() {
            let view = case.render(&plan);
            let notices: Vec<&Message> = view.iter().filter(|m| is_notice(m)).collect();
            if plan.pruned() {
                prop_assert_eq!(notices, vec![&case.notice], "the old notice is still shown");
                prop_assert!(is_notice(&view[task + 1]));
            } else {
                prop_assert!(
                    case.total() <= u64::from(case.policy.prune_at),
                    "over prune_at, the old notice is sent"
                );
                prop_assert!(view == case.messages);
            }
        }
    }
}

/// The generator is not vacuous: over a fixed sample, plans that prune, plans that do not and
/// `Exhausted` all occur, and pruning adds older messages back.
#[test]
fn the_generator_covers_every_outcome() {
    let mut runner = TestRunner::deterministic();
    let strategy = cases();
    let (mut whole, mut pruned, mut exhausted, mut added_back) = (0, 0, 0, 0);
    // A referred unit came back over a newer unreferred one; a kept tool's result beyond what
    // must be kept stayed.
    let (mut jumped, mut kept_by_flag) = (0, 0);
    for _ in 0..2_000 {
        let (script, policy, fixed) = strategy.new_tree(&mut runner).expect("a value").current();
        let case = Case::new(&script, policy, fixed);
        match case.prune() {
            Ok(plan) if plan.pruned() => {
                pruned += 1;
                let must = mandatory(&case.messages, &case.policy);
                if plan.keep.iter().any(|i| !must.contains(i)) {
                    added_back += 1;
                }
                let kept = kept_set(&plan);
                let (ranked, cited) = ranked_optional(&case);
                let newest_dropped = ranked
                    .iter()
                    .zip(&cited)
                    .filter(|(g, c)| !**c && !kept.contains(&g[0]))
                    .map(|(g, _)| g[0])
                    .max();
                if ranked
                    .iter()
                    .zip(&cited)
                    .any(|(g, c)| *c && kept.contains(&g[0]) && newest_dropped > Some(g[0]))
                {
                    jumped += 1;
                }
                if plan
                    .keep
                    .iter()
                    .any(|&i| !must.contains(&i) && kept_tool_result(&case, i))
                {
                    kept_by_flag += 1;
                }
            }
            Ok(_) => whole += 1,
            Err(_) => exhausted += 1,
        }
    }
    eprintln!(
        "whole {whole}, pruned {pruned} (older messages added back in {added_back}, a referred \
         unit over a newer one in {jumped}, a kept tool's result beyond the mandatory in \
         {kept_by_flag}), exhausted {exhausted}"
    );
    for (what, n) in [
        ("whole", whole),
        ("pruned", pruned),
        ("exhausted", exhausted),
        ("added back", added_back),
    ] {
        assert!(n >= 100, "only {n} of 2000 cases {what}");
    }
    for (what, n) in [("referred first", jumped), ("kept by flag", kept_by_flag)] {
        assert!(n >= 20, "only {n} of 2000 cases {what}");
    }
}

// ----- the window -----

/// Counts with the heuristic and records every text it was asked to count.
#[derive(Default)]
struct Recording {
    counted: Mutex<Vec<String>>,
}

impl Tokenizer for Recording {
    fn name(&self) -> &str {
        "recording"
    }

    fn exact(&self) -> bool {
        false
    }

    fn count(&self, text: &str) -> u32 {
        self.counted
            .lock()
            .expect("not poisoned")
            .push(text.to_owned());
        Heuristic.count(text)
    }

    fn prefix(&self, text: &str, max: u32) -> usize {
        Heuristic.prefix(text, max)
    }
}

fn view_tokens(view: &[Message]) -> u64 {
    view.iter()
        .map(|m| u64::from(message_tokens(&Heuristic, m)))
        .sum()
}

fn long_turn(t: usize) -> TurnSpec {
    // Outputs of 10 to 1,500 tokens (in characters here), some over the 1,000-token limit.
    const OUTPUTS: [usize; 6] = [40, 1_200, 300, 6_000, 800, 2_500];
    let calls = (0..1 + t % 3)
        .map(|k| CallSpec {
            tool: (t + 2 * k) % TOOLS.len(),
            output: OUTPUTS[(t + k) % OUTPUTS.len()],
            refused: t % 11 == 5 && k == 0,
            warned: t % 7 == 3,
            mention: (t + k) % 4 == 1,
        })
        .collect();
    TurnSpec {
        nudge: t % 9 == 4,
        checkpoint: t % 11 == 6,
        text: (t * 37) % 200,
        calls,
        quote: (t % 5 == 2).then_some(t),
    }
}

/// (a) Turn by turn, no view is ever over the limit, each view is a valid conversation, and a
/// prepare counts only the messages it has not seen.
#[test]
fn a_long_run_is_sent_views_under_the_limit_counting_each_message_once() {
    let policy = ContextPolicy::for_window(8_000);
    let tokenizer = Arc::new(Recording::default());
    let fixed = 120;
    let mut window = ContextWindow::new(policy, tokenizer.clone(), fixed);
    let script = Script {
        systems: 1,
        task: 600,
        turns: (0..80).map(long_turn).collect(),
        keep: [false; TOOLS.len()],
    };
    let mut conversation = prefix_messages(&script);
    let mut notices = 0;
    for t in 0..=script.turns.len() {
        let before = window.sizes().len();
        let old: HashSet<&str> = conversation[..before]
            .iter()
            .map(|m| m.content.as_str())
            .filter(|c| !c.is_empty())
            .collect();
        let old_sizes = window.sizes().to_vec();
        tokenizer.counted.lock().expect("not poisoned").clear();
        window
            .prepare(&conversation, || {
                notices += 1;
                notice().content
            })
            .unwrap_or_else(|e| panic!("turn {t}: {e:?}"));
        assert_eq!(window.sizes().len(), conversation.len(), "turn {t}");
        assert_eq!(
            &window.sizes()[..before],
            &old_sizes[..],
            "turn {t}: sizes changed"
        );
        for text in tokenizer.counted.lock().expect("not poisoned").iter() {
            assert!(
                !old.contains(text.as_str()),
                "turn {t}: counted an old message again: {text:.40}"
            );
        }
        let view = window.messages(&conversation);
        let tokens = u64::from(fixed) + view_tokens(view);
        assert!(
            tokens <= u64::from(policy.limit()),
            "turn {t}: {tokens} over the limit"
        );
        assert_eq!(window.tokens(), tokens, "turn {t}");
        check_pairs(view).unwrap_or_else(|e| panic!("turn {t}: {e}"));
        assert_eq!(view[0], conversation[0], "turn {t}: the system prompt");
        assert_eq!(view[1], conversation[1], "turn {t}: the task");
        let in_view = view.iter().filter(|m| is_notice(m)).count();
        assert!(in_view <= 1, "turn {t}: {in_view} notices");
        if in_view == 1 {
            assert!(
                is_notice(&view[2]),
                "turn {t}: the notice is not after the task"
            );
        }
        if let Some(turn) = script.turns.get(t) {
            turn_messages(t, turn, &mut conversation);
        }
    }
    let stats = window.stats();
    assert!(stats.prunes >= 3, "{stats:?}");
    assert!(stats.truncated_results >= 10, "{stats:?}");
    assert!(stats.peak_tokens <= u64::from(policy.limit()), "{stats:?}");
    assert!(notices >= stats.prunes as usize);
}

/// (b) A turn's reported usage is preferred: the reply's size is its output tokens, and the
/// input tokens recalibrate the tokens outside the messages.
#[test]
fn reported_usage_sizes_the_reply_and_recalibrates_the_fixed_tokens() {
    let policy = ContextPolicy::for_window(3_000);
    let mut window = ContextWindow::new(policy, Arc::new(Heuristic), 100);
    let mut conversation = vec![
        Message::system("You are a careful agent."),
        Message::user("Fix the bug."),
    ];
    window.prepare(&conversation, String::new).expect("fits");
    let first = view_tokens(&conversation);
    assert_eq!(window.tokens(), 100 + first);
    window.observe(Some(Usage {
        input_tokens: 700,
        output_tokens: 37,
    }));
    assert_eq!(window.fixed(), 700 - first);
    // Zero or absent usage changes nothing.
    window.observe(Some(Usage::default()));
    window.observe(None);
    assert_eq!(window.fixed(), 700 - first);

    let call = ToolCall {
        id: "call-1".into(),
        name: "read_file".into(),
        arguments: json!({ "path": "src/lib.rs" }).into(),
    };
    conversation.push(Message::assistant("Reading it.", vec![call]));
    conversation.push(Message::tool_result(
        "call-1",
        "read_file",
        text("lib.rs", 400),
        None,
    ));
    window.prepare(&conversation, String::new).expect("fits");
    assert_eq!(
        window.sizes()[2],
        MESSAGE_OVERHEAD + 37,
        "the reply is its output tokens"
    );
    assert_eq!(
        window.sizes()[3],
        message_tokens(&Heuristic, &conversation[3])
    );
    let messages: u64 = window.sizes().iter().map(|&s| u64::from(s)).sum();
    assert_eq!(window.tokens(), window.fixed() + messages);
    assert_eq!(window.stats().prunes, 0);

    // The provider says the prompt is far larger than the heuristic thinks: the next view is
    // pruned, on the provider's count.
    window.observe(Some(Usage {
        input_tokens: 1_950,
        output_tokens: 12,
    }));
    assert_eq!(window.fixed(), 1_950 - messages);
    let call = ToolCall {
        id: "call-2".into(),
        name: "grep".into(),
        arguments: json!({ "pattern": "bug" }).into(),
    };
    conversation.push(Message::assistant("", vec![call]));
    conversation.push(Message::tool_result(
        "call-2",
        "grep",
        text("grep", 80),
        None,
    ));
    for t in 3..8 {
        conversation.push(Message::assistant(
            text(&format!("thinking {t}"), 200),
            vec![],
        ));
        conversation.push(nudge(t));
    }
    window
        .prepare(&conversation, || notice().content)
        .expect("fits once pruned");
    assert_eq!(window.sizes()[4], MESSAGE_OVERHEAD + 12);
    assert_eq!(window.stats().prunes, 1, "the reported input made it prune");
    let view = window.messages(&conversation).to_vec();
    assert!(is_notice(&view[2]));
    // The view's messages as the window counted them (the replies at their output tokens).
    let counted: u64 = view
        .iter()
        .map(|m| match conversation.iter().position(|c| c == m) {
            Some(i) => u64::from(window.sizes()[i]),
            None => u64::from(message_tokens(&Heuristic, m)),
        })
        .sum();
    assert!(window.tokens() <= u64::from(policy.limit()));
    assert_eq!(window.tokens(), window.fixed() + counted);
    window.observe(Some(Usage {
        input_tokens: 2_000,
        output_tokens: 5,
    }));
    assert_eq!(window.fixed(), 2_000 - counted);
}

/// (c) A tool result over `max_tool_result_tokens` is cut in the view, with the marker; the
/// conversation keeps it whole.
#[test]
fn a_long_tool_result_is_cut_in_the_view_only() {
    let policy = ContextPolicy::for_window(8_000);
    let max = policy.max_tool_result_tokens.expect("a limit");
    let mut window = ContextWindow::new(policy, Arc::new(Heuristic), 50);
    let calls = vec![
        ToolCall {
            id: "call-1".into(),
            name: "run_tests".into(),
            arguments: json!({}).into(),
        },
        ToolCall {
            id: "call-2".into(),
            name: "read_file".into(),
            arguments: json!({ "path": "big.log" }).into(),
        },
    ];
    let warning = "[terminus] budget: 2 tool calls left in this run.";
    let conversation = vec![
        Message::user("Make the tests pass."),
        Message::assistant("Running the tests and reading the log.", calls),
        Message::tool_result(
            "call-1",
            "run_tests",
            text("test output", 24_000),
            Some(warning),
        ),
        Message::tool_result("call-2", "read_file", text("log", 40_000), None),
    ];
    let original = conversation.clone();
    window.prepare(&conversation, String::new).expect("fits");
    assert_eq!(conversation, original, "the conversation is untouched");
    let view = window.messages(&conversation);
    assert_eq!(view.len(), 4);
    assert_eq!(view[..2], conversation[..2]);
    for i in [2, 3] {
        let (cut, whole) = (&view[i], &conversation[i]);
        assert!(
            cut.content.contains("[terminus: cut to fit the context"),
            "{i}"
        );
        assert!(cut.content.len() < whole.content.len() / 4, "{i}");
        let shown = cut
            .content
            .split("\n\n[terminus: cut")
            .next()
            .expect("a prefix");
        assert!(!shown.is_empty() && whole.content.starts_with(shown), "{i}");
        assert_eq!(cut.tool_call_id, whole.tool_call_id);
        assert_eq!(cut.tool_name, whole.tool_name);
        assert_eq!(cut.author, Author::Tool);
        assert_eq!(window.sizes()[i], message_tokens(&Heuristic, cut));
    }
    // The budget warning stays after the marker, and is not evidence.
    assert!(view[2].content.ends_with(warning));
    assert!(!view[2].evidence().contains(warning));
    assert!(
        window.sizes()[2] <= max + Heuristic.count(warning) + 2,
        "{}",
        window.sizes()[2]
    );
    assert!(window.sizes()[3] <= max, "{}", window.sizes()[3]);
    assert_eq!(window.stats().truncated_results, 2);
    assert!(window.tokens() <= u64::from(policy.limit()));
}

/// (d) When what must be kept does not fit, `prepare` answers `Exhausted` with the smallest view.
#[test]
fn a_conversation_whose_mandatory_part_cannot_fit_is_exhausted() {
    let policy = ContextPolicy {
        window: 2_000,
        reserve: 250,
        prune_at: 1_300,
        prune_to: 1_000,
        max_tool_result_tokens: None,
        keep_recent_turns: 1,
        max_system_tokens: None,
    };
    let fixed = 40;
    let mut window = ContextWindow::new(policy, Arc::new(Heuristic), fixed);
    let turn = |tool: usize, output: usize| TurnSpec {
        nudge: false,
        checkpoint: false,
        text: 10,
        calls: vec![CallSpec {
            tool,
            output,
            refused: false,
            warned: false,
            mention: false,
        }],
        quote: None,
    };
    // An early read_file, superseded; then three tools whose latest results are 800 tokens each.
    let script = Script {
        systems: 1,
        task: 100,
        turns: vec![turn(0, 400), turn(0, 3_200), turn(1, 3_200), turn(2, 3_200)],
        keep: [false; TOOLS.len()],
    };
    let conversation = build(&script);
    let err = window
        .prepare(&conversation, || notice().content)
        .expect_err("the latest results alone are over the limit");
    assert_eq!(err.limit, u64::from(policy.limit()));
    let notice_size = u64::from(message_tokens(&Heuristic, &notice()));
    let sizes = sizes_of(&conversation);
    assert_eq!(window.sizes(), &sizes[..]);
    // Everything but the superseded read_file (messages 2 and 3) is mandatory.
    let must: u64 = sizes
        .iter()
        .enumerate()
        .filter(|(i, _)| ![2, 3].contains(i))
        .map(|(_, &s)| u64::from(s))
        .sum();
    assert_eq!(err.needed, u64::from(fixed) + must + notice_size);
    assert!(err.needed > err.limit);
    // It stays exhausted.
    assert_eq!(window.prepare(&conversation, || notice().content), Err(err));
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// The window over whole runs: conversations appended turn by turn are sent views that fit
    /// the limit, are valid conversations (every call with its results, the system prompt and
    /// the task, at most one notice right after the task), count each message once, and are
    /// refused only when no view the rules allow fits.
    #[test]
    fn the_window_sends_only_valid_views_under_the_limit(
        (script, policy, fixed) in (script(), policy(), 0u32..200)
    ) {
        let mut window = ContextWindow::new(policy, Arc::new(Heuristic), fixed)
            .keeping(script.keep_tools());
        let limit = u64::from(policy.limit());
        let mut conversation = prefix_messages(&script);
        let systems = script.systems;
        for t in 0..=script.turns.len() {
            let before = window.sizes().to_vec();
            let result = window.prepare(&conversation, || notice().content);
            prop_assert_eq!(window.sizes().len(), conversation.len());
            prop_assert_eq!(&window.sizes()[..before.len()], &before[..]);
            // Referred results kept message by message are those of the whole conversation,
            // and those the reference finds.
            prop_assert_eq!(window.referred(), &referred(&conversation)[..]);
            prop_assert_eq!(window.referred(), &referred_ref(&conversation)[..]);
            if let Err(e) = result {
                // The run stops here: check that nothing the rules allow would have fitted.
                let case = Case {
                    messages: conversation.clone(),
                    sizes: window.sizes().to_vec(),
                    fixed: window.fixed(),
                    policy,
                    notice: notice(),
                    notice_size: message_tokens(&Heuristic, &notice()),
                    keep_tools: script.keep_tools(),
                };
                prop_assert_eq!(e.limit, limit);
                prop_assert!(smallest_view(&case) > limit, "turn {}: exhausted, yet a view fits", t);
                break;
            }
            let view = window.messages(&conversation);
            let tokens = u64::from(fixed) + view_tokens(view);
            prop_assert!(tokens <= limit, "turn {}: {} tokens over the limit {}", t, tokens, limit);
            prop_assert_eq!(window.tokens(), tokens);
            check_pairs(view)?;
            prop_assert!(view[..=systems] == conversation[..=systems], "turn {}: system or task", t);
            let notices = view.iter().filter(|m| is_notice(m)).count();
            prop_assert!(notices <= 1);
            if notices == 1 {
                prop_assert!(is_notice(&view[systems + 1]));
            } else {
                prop_assert_eq!(view.len(), conversation.len());
            }
            if let Some(turn) = script.turns.get(t) {
                turn_messages(t, turn, &mut conversation);
            }
        }
    }
}

/// Regression: a conversation over `prune_at` whose droppable part (here one nudge) costs less
/// than the notice was answered `Exhausted` when the conversation itself fits the limit (the
/// pruned view, notice included, is larger than the conversation), and pruned to a larger view
/// when that fitted too. The conversation is now sent whole in both cases.
#[test]
fn pruning_that_cannot_shrink_the_view_sends_the_conversation_whole() {
    let call = ToolCall {
        id: "call-0".into(),
        name: "read_file".into(),
        arguments: json!({ "path": "src/lib.rs" }).into(),
    };
    let messages = vec![
        Message::user("Fix the bug."),
        nudge(0),
        Message::assistant("Reading it.", vec![call]),
        Message::tool_result("call-0", "read_file", text("lib.rs", 1_600), None),
    ];
    let sizes = sizes_of(&messages);
    let notice_size = message_tokens(&Heuristic, &notice());
    let total: u64 = sizes.iter().map(|&s| u64::from(s)).sum();
    let pruned = total - u64::from(sizes[1]) + u64::from(notice_size);
    assert!(
        pruned > total,
        "the notice ({notice_size}) outweighs the nudge ({})",
        sizes[1]
    );
    let whole = Plan {
        keep: vec![0, 1, 2, 3],
        notice_at: None,
        tokens: total,
    };
    for window in [
        u32::try_from(total).expect("small"),
        u32::try_from(pruned).expect("small") + 100,
    ] {
        let policy = ContextPolicy {
            window,
            reserve: 0,
            prune_at: 100,
            prune_to: 50,
            max_tool_result_tokens: None,
            keep_recent_turns: 1,
            max_system_tokens: None,
        };
        assert_eq!(policy.validate(), Ok(()));
        assert_eq!(
            prune(&messages, &sizes, 0, notice_size, &policy, &BTreeSet::new()),
            Ok(whole.clone()),
            "window {window}"
        );
    }
    // One token short of the conversation: no view fits, and the smallest is the conversation.
    let policy = ContextPolicy {
        window: u32::try_from(total).expect("small") - 1,
        reserve: 0,
        prune_at: 100,
        prune_to: 50,
        max_tool_result_tokens: None,
        keep_recent_turns: 1,
        max_system_tokens: None,
    };
    assert_eq!(
        prune(&messages, &sizes, 0, notice_size, &policy, &BTreeSet::new()),
        Err(Exhausted {
            needed: total,
            limit: total - 1,
        })
    );
}
