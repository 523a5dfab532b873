//! The prose of an explanation: why the run stopped and what to change, in one paragraph
//! ([`Explanation::why`]), and the whole explanation as text for people ([`Explanation::text`]).

use super::types::{Budget, Explanation, PathStep, ToolView};
use crate::ToolBudgetKind;
use crate::conversation::ordinal;
use std::collections::BTreeMap;
use std::fmt::Write as _;
use terminus_kernel::catalog::{self, Explain, StopPath};
use terminus_kernel::{CompleteReason, Outcome, Phase, Policy, Rule};

fn budget<'a>(e: &'a Explanation, field: &str) -> Option<&'a Budget> {
    e.budgets.iter().find(|b| b.field == field)
}

/// `used` and `limit` of a bound, e.g. (12, 12).
fn spent(e: &Explanation, field: &str) -> (u64, u64) {
    budget(e, field).map_or((0, 0), |b| (b.used.unwrap_or(0), b.limit.unwrap_or(0)))
}

fn quoted(items: &[String]) -> String {
    items
        .iter()
        .map(|i| format!("\"{i}\""))
        .collect::<Vec<_>>()
        .join(", ")
}

/// The tools the last `turns` tool turns of the path called, sorted, each once.
fn last_tools(e: &Explanation, turns: usize) -> Vec<String> {
    let mut names: Vec<String> = e
        .path
        .iter()
        .rev()
        .filter(|s| s.rule == Rule::ToolTurn)
        .take(turns)
        .flat_map(|s| s.tool_calls.iter().cloned())
        .collect();
    names.sort();
    names.dedup();
    names
}

fn plural(n: u64, one: &str, many: &str) -> String {
    if n == 1 {
        format!("1 {one}")
    } else {
        format!("{n} {many}")
    }
}

/// What the run was waiting for in `state`, entered at `step`.
fn waiting_for(state: Phase, step: Option<&PathStep>) -> String {
    match state {
        Phase::Acting => match step.map(|s| &s.tool_calls) {
            Some(calls) if !calls.is_empty() => {
                let mut names = calls.clone();
                names.dedup();
                format!("the tool call(s) {}", names.join(", "))
            }
            _ => "its tool calls".to_owned(),
        },
        Phase::Verifying => "the verifier's verdict".to_owned(),
        Phase::Exploring | Phase::Nudged => "the model's answer".to_owned(),
        Phase::Complete | Phase::Aborted => "nothing".to_owned(),
    }
}

/// The most used tool and how many of the run's tool calls it took.
fn busiest(e: &Explanation) -> Option<(&str, u32)> {
    e.tools
        .iter()
        .max_by(|a, b| a.calls.cmp(&b.calls).then(b.name.cmp(&a.name)))
        .filter(|t| t.calls > 0)
        .map(|t| (t.name.as_str(), t.calls))
}

/// What is still open, in words, or nothing.
fn open_work(e: &Explanation) -> String {
    let mut parts = Vec::new();
    if !e.open_todos.is_empty() {
        parts.push(format!("todos still open: {}", quoted(&e.open_todos)));
    }
    if !e.missing_tools.is_empty() {
        parts.push(format!(
            "required tools that never succeeded: {}",
            e.missing_tools.join(", ")
        ));
    }
    parts.join("; ")
}

/// The verifier's feedback in words: what it repeated, or what it said.
fn feedback(e: &Explanation) -> Option<String> {
    let repeated: Vec<String> = e
        .verifier_feedback
        .iter()
        .filter(|f| f.count > 1)
        .map(|f| format!("\"{}\" ({} times)", f.missing, f.count))
        .collect();
    if !repeated.is_empty() {
        return Some(format!("it kept asking for {}", repeated.join(", ")));
    }
    let said: Vec<String> = e
        .verifier_feedback
        .iter()
        .map(|f| f.missing.clone())
        .collect();
    (!said.is_empty()).then(|| format!("its feedback was {}", quoted(&said)))
}

/// The last error of the tool, in words.
fn last_error(t: &ToolView) -> String {
    t.errors.last().map_or_else(String::new, |err| {
        format!("{}: \"{}\" at step {}", err.kind, err.message, err.step)
    })
}

/// One paragraph: why the run stopped and what to change, with the run's own names and numbers.
pub(super) fn why(e: &Explanation, outcome: Option<Outcome>, policy: &Policy) -> String {
    let last = e.path.last();
    let at = last.map_or(0, |s| s.step);
    let stats = e.stats.unwrap_or_default();
    match e.status {
        "failed" => {
            if let Some(f) = &e.failure {
                return format!(
                    "The run did not stop by a rule: worker {} gave up on it ({}; exit {}), and \
                     no worker runs it again. Fix what the reason names and submit it again.",
                    f.worker, f.reason, f.exit_code
                );
            }
        }
        "waiting" => {
            return "The execution was submitted and has not run yet: start a `terminus worker` \
                    on this journal to run it."
                .to_owned();
        }
        "suspended" => {
            let pending = e.held.iter().filter(|h| h.decision.is_none()).count();
            return format!(
                "The run is suspended after step {at}: {} waiting for a decision. Decide each with \
                 `terminus approve`, `deny` or `answer`; once all are decided, `terminus resume` \
                 or a worker continues it. Time suspended does not count against the deadline.",
                plural(pending as u64, "held call", "held calls"),
            );
        }
        "decided" => {
            return format!(
                "The run was suspended after step {at} and every held call is decided: \
                 `terminus resume` or a worker continues it."
            );
        }
        "running" => {
            let waiting = waiting_for(last.map_or(Phase::Exploring, |s| s.to), last);
            return format!(
                "The run has not stopped: it is at step {at}, waiting for {waiting} ({} so far).",
                plural(u64::from(stats.model_calls), "model call", "model calls"),
            );
        }
        "interrupted" => {
            let waiting = waiting_for(last.map_or(Phase::Exploring, |s| s.to), last);
            return format!(
                "The run has not stopped: its process ended after step {at} while it waited for \
                 {waiting} ({} so far). Continue it with `terminus resume --journal <journal> \
                 --execution {}`; nothing journaled is run again.",
                plural(u64::from(stats.model_calls), "model call", "model calls"),
                e.execution
            );
        }
        _ => {}
    }
    let Some(outcome) = outcome else {
        return "The journal holds no stop for this run.".to_owned();
    };
    let stopped_note = if e.status == "stopped" {
        " (Its report was not stored before the process ended: `terminus resume` stores it.)"
    } else {
        ""
    };
    let rule = e.rule.unwrap_or(Rule::ClockReading);
    let open = open_work(e);
    let text = match catalog::stop_path(rule, outcome) {
        Some(path) => paragraph(e, path, outcome, rule, at, &open, policy),
        None => ended(outcome, at),
    };
    format!("{text}{stopped_note}")
}

fn complete(e: &Explanation, reason: CompleteReason, at: u32, policy: &Policy) -> String {
    let stats = e.stats.unwrap_or_default();
    match reason {
        CompleteReason::Verified => {
            let after = match stats.verification_failures {
                0 => "with no rejection".to_owned(),
                n => format!(
                    "after {} ({})",
                    plural(u64::from(n), "rejection", "rejections"),
                    feedback(e).unwrap_or_default()
                ),
            };
            let nudged = match stats.nudges {
                0 => String::new(),
                n => format!(
                    " Before that, {} refused with a nudge because work was still open.",
                    plural(u64::from(n), "claim was", "claims were")
                ),
            };
            format!(
                "The run completed: the verifier accepted the model's claim at step {at}, \
                 {after}.{nudged} No limit stopped it, so there is nothing to change."
            )
        }
        CompleteReason::Explicit => format!(
            "The run completed at step {at}: the model said it was done (needs_more_work: false) \
             with no tool call and nothing open, and verify_completion is off, so the claim was \
             taken as it stands. To have such claims checked first, set verify_completion: true."
        ),
        CompleteReason::Answered => format!(
            "The run completed at step {at}: the model gave a plain answer (no tool call, no \
             needs_more_work) with nothing open, and verify_completion is off, so the answer was \
             taken as it stands. To have answers checked first, set verify_completion: true."
        ),
        CompleteReason::Forced => format!(
            "The run completed without a verified claim: the verifier rejected it {} times \
             (max_verification_failures {}){} and on_verification_limit is complete, so the last \
             claim was accepted anyway at step {at}. Check the result by hand; to abort instead, \
             set on_verification_limit: abort, or raise max_verification_failures above {} to \
             give the model more rounds.",
            stats.verification_failures,
            policy.max_verification_failures,
            feedback(e).map_or_else(String::new, |f| format!("; {f}")),
            policy.max_verification_failures,
        ),
    }
}

/// A stop the catalog has no path for (a report that names a rule that does not stop).
fn ended(outcome: Outcome, at: u32) -> String {
    let how = if outcome.is_complete() {
        "completed"
    } else {
        "aborted"
    };
    format!("The run was {how} ({}) at step {at}.", outcome.reason_str())
}

/// The paragraph of the stop path's explanation template ([`Explain`]), filled with the run's
/// own names and numbers.
/// Why `max_no_ops` no-op turns in a row ended the run, by what the last of them were: replies
/// cut at the output cap, tool calls written as text, silence or `needs_more_work: true`.
fn no_progress(e: &Explanation, policy: &Policy, at: u32, open_sentence: &str) -> String {
    use terminus_kernel::{Input, NoOpKind, TurnKind};
    let last: Vec<NoOpKind> = e
        .trace
        .iter()
        .rev()
        .take(usize::try_from(policy.max_no_ops).unwrap_or(usize::MAX))
        .filter_map(|t| match t.input {
            Input::Turn {
                kind: TurnKind::NoOp(kind),
                ..
            } => Some(kind),
            _ => None,
        })
        .collect();
    let all = |kind: NoOpKind| !last.is_empty() && last.iter().all(|k| *k == kind);
    let n = policy.max_no_ops;
    if all(NoOpKind::Truncated) {
        return format!(
            "The model made no progress {n} turns in a row (max_no_ops {n}): each reply was cut \
             at the output cap (finish: length) before it was done, so none was an answer or a \
             tool call; the run stopped at step {at}.{open_sentence} Raise max_output_tokens (the \
             model's [model] setting) or ask for shorter replies; a model that repeats itself \
             until the cap needs a shorter task."
        );
    }
    if all(NoOpKind::Repetitive) {
        return format!(
            "The model made no progress {n} turns in a row (max_no_ops {n}): each reply repeated \
             the same text over and over and was cut as soon as it did (finish: repetition), so \
             none was an answer or a tool call; the run stopped at step {at}.{open_sentence} A \
             model that loops in its own text needs a shorter task or a stronger model; sampling \
             with a repetition penalty (the server's setting) helps small ones."
        );
    }
    if !last.is_empty() && last.iter().all(|k| k.is_non_answer()) {
        return format!(
            "The model made no progress {n} turns in a row (max_no_ops {n}): each reply was not \
             an answer: it repeated the kernel's own guidance, wrote a tool's result itself \
             (<tool_response>) or (autonomous: true) only asked for more, apologised for not \
             understanding or told someone else to act, so none \
             could be taken for the task's result; the run stopped at step {at}.{open_sentence} \
             A model that answers guidance with guidance needs a clearer task or system prompt; \
             a conversational agent that may end with a question should not set autonomous."
        );
    }
    if all(NoOpKind::TextCall) {
        return format!(
            "The model made no progress {n} turns in a row (max_no_ops {n}): each reply wrote a \
             tool call as text that could not run (a tool that is not offered, arguments that \
             are not an object, or text_tool_calls: nudge), so nothing ran; the run stopped at \
             step {at}.{open_sentence} Offer the tool it asks for, keep text_tool_calls: run, or \
             use a model (or chat template) that calls tools through the API."
        );
    }
    format!(
        "The model made no progress {n} turns in a row (max_no_ops {n}): each answered with no \
         tool call and either no content or needs_more_work: true, so the run could not move on; \
         it stopped at step {at}.{open_sentence} Have the model act (call a tool) or answer \
         (needs_more_work false or absent); raise max_no_ops only if it needs more turns to think."
    )
}

fn paragraph(
    e: &Explanation,
    path: &StopPath,
    outcome: Outcome,
    rule: Rule,
    at: u32,
    open: &str,
    policy: &Policy,
) -> String {
    let stats = e.stats.unwrap_or_default();
    let last = e.path.last();
    let before = e.path.len().checked_sub(2).and_then(|i| e.path.get(i));
    let open_sentence = if open.is_empty() {
        String::new()
    } else {
        let mut s = open.to_owned();
        if let Some(first) = s.get(..1) {
            s.replace_range(..1, &first.to_uppercase());
        }
        format!(" {s}.")
    };
    match path.explain {
        Explain::Verified => complete(e, CompleteReason::Verified, at, policy),
        Explain::Explicit => complete(e, CompleteReason::Explicit, at, policy),
        Explain::Answered => complete(e, CompleteReason::Answered, at, policy),
        Explain::Forced => complete(e, CompleteReason::Forced, at, policy),
        Explain::Budget { noun: what } => {
            let field = path.limit.map_or("", |l| l.field);
            let (used, limit) = spent(e, field);
            let final_answer = if rule == Rule::FinalAnswerDone {
                ", then made its one tool-less call for a final answer (final_answer_on_budget)"
            } else {
                ""
            };
            let busiest = busiest(e).map_or_else(String::new, |(tool, n)| {
                format!(
                    " Most of it went to {tool} ({n} of {} tool calls).",
                    stats.tool_calls
                )
            });
            format!(
                "The run spent its {what} budget ({field} {limit}, {used} used) at step {at} \
                 ({}, {}){final_answer}, before the model claimed it was done.{busiest}\
                 {open_sentence} If the task needs more, raise {field} (e.g. to {}); if it \
                 should not, look at why the model kept going: a tool that never gives it what \
                 it needs, or a task too large for one run.",
                plural(u64::from(stats.model_calls), "model call", "model calls"),
                plural(u64::from(stats.tool_calls), "tool call", "tool calls"),
                limit.saturating_mul(2).max(1)
            )
        }
        Explain::Deadline => {
            let from = last.map_or(Phase::Exploring, |s| s.from);
            let waiting = waiting_for(from, before);
            let tool_hint = if from == Phase::Acting {
                " or make that tool answer sooner (a timeout of its own)"
            } else {
                ""
            };
            format!(
                "The run's wall-clock deadline of {} ms (deadline_ms) passed at step {at} while \
                 it waited for {waiting}.{open_sentence} Raise deadline_ms{tool_hint}.",
                policy.deadline_ms.unwrap_or(0)
            )
        }
        Explain::Cancelled => {
            let from = last.map_or(Phase::Exploring, |s| s.from);
            format!(
                "The host cancelled the run (its kill switch: Ctrl-C, a cancel_after_ms or the \
                 embedding program) at step {at} while it waited for {}. No limit of the policy \
                 stopped it; run it again if the cancel was not meant.{open_sentence}",
                waiting_for(from, before)
            )
        }
        Explain::Loop => {
            let names = last_tools(e, usize::try_from(policy.max_loop_period).unwrap_or(8));
            format!(
                "The model was looping: the same tool calls ({}) got the same results {} times \
                 in a row (max_repeats {}), so the run stopped at step {at} as no progress. \
                 Give the model what it waits for (a tool whose answer changes), tell it to stop \
                 repeating itself, or raise max_repeats if repeating is expected.",
                names.join(", "),
                policy.max_repeats,
                policy.max_repeats
            )
        }
        Explain::Polls => {
            // The pollers of the last tool turn: the ones whose job never became ready.
            let names = last_tools(e, 1);
            format!(
                "The job the agent was waiting for did not become ready: its poller ({}) gave the \
                 same result {} times in a row (max_polls {}), so the run stopped at step {at}. \
                 Nothing looped: each poll was a wait. Raise max_polls if the job takes longer, \
                 or look at why it never finishes.{open_sentence}",
                names.join(", "),
                policy.max_polls,
                policy.max_polls
            )
        }
        Explain::NoProgress => no_progress(e, policy, at, &open_sentence),
        Explain::Incomplete => format!(
            "The model kept claiming it was done with work still open: {} refused with a nudge \
             (max_nudges {}), and its next claim at step {at} ended the run.{open_sentence} Have \
             the model finish (or close) that work before it claims to be done, or raise \
             max_nudges if it only needs more reminders.",
            plural(u64::from(stats.nudges), "claim was", "claims were"),
            policy.max_nudges
        ),
        Explain::VerificationLoop => format!(
            "The verifier rejected the model's claim {} times (max_verification_failures {}) and \
             on_verification_limit is abort, so the run stopped at step {at}{}. Fix what the \
             verifier asks for (or the verifier, if it asks for what the task does not need); \
             raise max_verification_failures for more rounds, or set on_verification_limit: \
             complete to accept the last claim.",
            stats.verification_failures,
            policy.max_verification_failures,
            feedback(e).map_or_else(String::new, |f| format!("; {f}")),
        ),
        Explain::Blocked => {
            // The blocks of the last turn: the budgets that refused every call of the turns that
            // ended the run.
            let last = e
                .tool_budget_events
                .iter()
                .filter(|b| b.kind == ToolBudgetKind::Block)
                .map(|b| b.step)
                .max();
            let mut blocked: Vec<String> = Vec::new();
            let mut liftable = false;
            for b in e
                .tool_budget_events
                .iter()
                .filter(|b| b.kind == ToolBudgetKind::Block && Some(b.step) == last)
            {
                let (field, lifted_by) = blocked_by(&policy.tool_budgets, b);
                let lifts = if lifted_by.is_empty() {
                    "nothing lifts it".to_owned()
                } else {
                    liftable = true;
                    format!("a call of {lifted_by} lifts it")
                };
                let line = format!(
                    "{} (tool_budgets.{}.{field} = {}; {lifts})",
                    b.tool,
                    b.tool,
                    b.block_at.unwrap_or(b.call)
                );
                if !blocked.contains(&line) {
                    blocked.push(line);
                }
            }
            let advice = if liftable {
                "have the model post its checkpoint, or raise the budget if the task needs more \
                 calls"
            } else {
                "nothing lifts these blocks in the run: raise the budget if the task needs more \
                 calls, or give the model what it keeps reading for"
            };
            format!(
                "At step {at} the model called, for the {} turn in a row, only tools its budgets \
                 block, so the run stopped (max_blocked_turns {}): {}. Each refused call was \
                 answered with what lifts its block; {advice}.",
                ordinal(policy.max_blocked_turns),
                policy.max_blocked_turns,
                if blocked.is_empty() {
                    "no block was recorded".to_owned()
                } else {
                    blocked.join("; ")
                }
            )
        }
        Explain::AllExcluded => {
            let excluded: Vec<String> = e
                .tools
                .iter()
                .filter(|t| t.excluded.is_some())
                .map(|t| {
                    let why = t.excluded.clone().unwrap_or_default();
                    let err = last_error(t);
                    if err.is_empty() {
                        format!("{} ({why})", t.name)
                    } else {
                        format!("{} ({why}; last error {err})", t.name)
                    }
                })
                .collect();
            format!(
                "At step {at} the model asked only for tools that are excluded, so the run could \
                 not go on: {}. Fix the tool (its last error says why) or the arguments the \
                 model gives it; raise max_tool_failures (now {}) only if its failures are \
                 transient.",
                excluded.join("; "),
                policy.max_tool_failures
            )
        }
        Explain::ToolFailures => {
            let mut failing: Vec<&ToolView> =
                e.tools.iter().filter(|t| !t.errors.is_empty()).collect();
            failing.sort_by_key(|t| t.errors.last().map_or(0, |err| err.step));
            let failing: Vec<String> = failing
                .iter()
                .map(|t| format!("{} ({})", t.name, last_error(t)))
                .collect();
            format!(
                "{} tool turns in a row failed (max_consecutive_tool_failures {}), so the run \
                 stopped at step {at}: {}. Fix those tools or the arguments the model gives them; \
                 raise max_consecutive_tool_failures only if the failures are transient.",
                policy.max_consecutive_tool_failures,
                policy.max_consecutive_tool_failures,
                failing.join("; ")
            )
        }
        Explain::Unrecoverable => {
            let err = last.and_then(|s| {
                s.tool_errors.iter().find(|err| {
                    matches!(err.kind, "permission_denied" | "not_found" | "auth_failed")
                })
            });
            match err {
                Some(err) => format!(
                    "Tool {} failed at step {at} with {} (\"{}\"), which retrying cannot fix, and \
                     on_unrecoverable_tool_error is stop. Fix {}'s access (its permissions, \
                     credentials or the thing it names), or set on_unrecoverable_tool_error: \
                     exclude to let the model go on without it.",
                    err.tool, err.kind, err.message, err.tool
                ),
                None => format!(
                    "A tool failed at step {at} with an error retrying cannot fix, and \
                     on_unrecoverable_tool_error is stop. Fix the tool's access, or set \
                     on_unrecoverable_tool_error: exclude."
                ),
            }
        }
        Explain::EmptyReplies => {
            let mut kinds: BTreeMap<&'static str, u32> = BTreeMap::new();
            for t in &e.trace {
                if let terminus_kernel::Input::Turn {
                    kind: terminus_kernel::TurnKind::Empty(k),
                    ..
                } = t.input
                {
                    *kinds
                        .entry(match k {
                            terminus_kernel::EmptyKind::Blank => "blank",
                            terminus_kernel::EmptyKind::Truncated => "truncated",
                            terminus_kernel::EmptyKind::Filtered => "filtered",
                            terminus_kernel::EmptyKind::ReasoningOnly => "reasoning only",
                        })
                        .or_default() += 1;
                }
            }
            let kinds: Vec<String> = kinds.iter().map(|(k, n)| format!("{k} {n}")).collect();
            format!(
                "The model returned {} empty replies in a row (max_empty_responses {}; {}), each \
                 retried with backoff, and the run stopped at step {at}. Look at the provider: the \
                 output-token limit (max_output_tokens), its content filter, or a reasoning model \
                 that spends every token thinking; raise max_empty_responses only for a flaky \
                 provider.",
                policy.max_empty_responses,
                policy.max_empty_responses,
                kinds.join(", ")
            )
        }
        Explain::RetriesSpent => {
            let mut kinds: Vec<&str> = e
                .path
                .iter()
                .filter_map(|s| s.model)
                .filter(|m| *m != "turn")
                .collect();
            kinds.sort_unstable();
            kinds.dedup();
            format!(
                "The model call kept failing ({}): {} retries in a row were spent \
                 (max_model_retries {}) and the next failure at step {at} ended the run. The \
                 provider was down or rate limiting: try again later, or raise max_model_retries \
                 or retry_max_ms (now {} ms) to wait longer.",
                kinds.join(", "),
                policy.max_model_retries,
                policy.max_model_retries,
                policy.retry_max_ms
            )
        }
        Explain::ModelFatal => {
            let kind = last.and_then(|s| s.model).unwrap_or("an error");
            let hint = match kind {
                "auth" => {
                    "Check the API key (the variable api_key_env names) and the model's access"
                }
                "bad_request" => {
                    "Check the request the provider refused: the model name, max_output_tokens, \
                     the tools' schemas"
                }
                _ => "Check the provider",
            };
            format!(
                "The model call failed at step {at} with {kind}, which retrying cannot fix, so the \
                 run stopped. {hint}."
            )
        }
        Explain::ContextExhausted => format!(
            "At step {at} the conversation no longer fitted the model's context window, even \
             after pruning ({}, {}). Give the model a larger window ([context] window), keep \
             tool results shorter, or split the task.",
            match stats.tokens() {
                0 => "no token usage reported".to_owned(),
                n => format!("{n} tokens reported"),
            },
            plural(u64::from(stats.tool_calls), "tool call", "tool calls")
        ),
        // `stop_path` gives the spent budget's path for the final answer.
        Explain::AsTheBudget => ended(outcome, at),
    }
}

/// `text` wrapped at `width` columns, each line after `indent`.
fn wrap(text: &str, indent: &str, width: usize) -> String {
    let mut out = String::new();
    let mut line = String::new();
    for word in text.split_whitespace() {
        if !line.is_empty() && indent.len() + line.len() + 1 + word.len() > width {
            let _ = writeln!(out, "{indent}{line}");
            line.clear();
        }
        if !line.is_empty() {
            line.push(' ');
        }
        line.push_str(word);
    }
    if !line.is_empty() {
        let _ = writeln!(out, "{indent}{line}");
    }
    out
}

/// Whether a step is the plain loop with nothing else to say.
fn plain(step: &PathStep) -> bool {
    step.why.is_none()
        && step.tool_errors.is_empty()
        && step.nudge.is_none()
        && step.notices.is_empty()
}

impl PathStep {
    /// What happened at the step besides the transition, e.g. ` · calls read_file`.
    fn details(&self) -> String {
        let mut out = String::new();
        if let Some(model) = self.model.filter(|m| *m != "turn") {
            let _ = write!(out, " · model error {model}");
        }
        if !self.tool_calls.is_empty() {
            let _ = write!(out, " · calls {}", self.tool_calls.join(", "));
        }
        match self.written {
            Some("recovered") => out.push_str(" (written as text, recovered)"),
            Some(_) => out.push_str(" · a tool call written as text, not run"),
            None => {}
        }
        for err in &self.tool_errors {
            let _ = write!(out, " · {} failed: {}: {}", err.tool, err.kind, err.message);
        }
        if let Some(verdict) = self.verdict {
            out.push_str(if verdict {
                " · verdict accepted"
            } else {
                " · verdict rejected"
            });
        }
        match self.nudge {
            // Counted apart from the nudges (refused claims): `continuations` in the counters.
            Some("continue") => out.push_str(" · continuation (after a no-op)"),
            Some(nudge) => {
                let _ = write!(out, " · nudge ({nudge})");
            }
            None => {}
        }
        for notice in &self.notices {
            let _ = write!(out, " · notice: {notice}");
        }
        out
    }
}

impl Explanation {
    /// Marks the explanation as that of a live run its host is still driving (status
    /// `running`), and says so in [`Explanation::why`].
    pub fn set_running(&mut self, policy: &Policy) {
        self.status = "running";
        self.why = why(self, None, policy);
    }

    /// The explanation as text, for people.
    pub fn text(&self) -> String {
        let mut t = String::new();
        let _ = writeln!(t, "execution {}", self.execution);
        if let Some(name) = &self.name {
            let _ = writeln!(t, "scenario  {name}");
        }
        let _ = writeln!(t, "task      {}", self.task);
        let status = match (self.status, &self.failure) {
            ("failed", Some(f)) => format!(
                "failed (exit {}): {} (worker {} gave up on it; it is not run again)",
                f.exit_code, f.reason, f.worker
            ),
            ("stopped", _) => "stopped (report not yet stored; resume to store it)".to_owned(),
            ("waiting", _) => {
                "waiting (submitted; a `terminus worker` on this journal runs it)".to_owned()
            }
            ("interrupted", _) => "interrupted (resume to continue)".to_owned(),
            ("suspended", _) => "suspended (held calls wait for a decision: `terminus approve`, \
                                 `deny` or `answer`)"
                .to_owned(),
            ("decided", _) => "decided (every held call is decided; resume it, or a worker \
                               runs it)"
                .to_owned(),
            (other, _) => other.to_owned(),
        };
        let _ = writeln!(t, "status    {status}");
        if !self.held.is_empty() {
            let _ = writeln!(t, "\nheld calls:");
            for h in &self.held {
                let decided = match &h.decision {
                    None => "pending".to_owned(),
                    Some(terminus_kernel::Decision::Deny {
                        reason: Some(reason),
                    }) => format!("denied ({reason})"),
                    Some(terminus_kernel::Decision::Edit { arguments }) => {
                        format!("approved with edited arguments {arguments}")
                    }
                    Some(d) => format!("decided: {}", d.as_str()),
                };
                let _ = writeln!(
                    t,
                    "  {} {} {} {}: {decided}",
                    h.call.kind.as_str(),
                    h.call.call_id,
                    h.call.name,
                    h.call.arguments
                );
                if let Some(q) = &h.call.question {
                    let _ = writeln!(t, "    it asks {:?}, a form of {}", q.message, q.schema);
                }
            }
        }
        if let (Some(outcome), Some(reason), Some(rule), Some(row)) =
            (self.outcome, self.reason, self.rule, &self.rule_spec)
        {
            let _ = writeln!(
                t,
                "outcome   {outcome} ({reason}) (rule {}: {row})",
                rule.name()
            );
        }
        let _ = writeln!(t, "\nwhy it stopped, and what to change:");
        t.push_str(&wrap(&self.why, "  ", 100));

        let _ = writeln!(
            t,
            "\npath ({}):",
            plural(self.path.len() as u64, "step", "steps")
        );
        let mut explained: Vec<Rule> = Vec::new();
        let mut i = 0;
        while i < self.path.len() {
            // A long stretch of the plain loop is folded to its ends.
            let run = self.path[i..].iter().take_while(|s| plain(s)).count();
            if run > 6 {
                for step in &self.path[i..i + 2] {
                    self.step_line(&mut t, step, &mut explained);
                }
                let folded = &self.path[i + 2..i + run - 2];
                let mut tools: Vec<&str> = folded
                    .iter()
                    .flat_map(|s| s.tool_calls.iter().map(String::as_str))
                    .collect();
                tools.sort_unstable();
                tools.dedup();
                let _ = writeln!(
                    t,
                    "  ... {} more of the plain loop (tool turns and their results; calls {})",
                    plural(folded.len() as u64, "step", "steps"),
                    tools.join(", ")
                );
                for step in &self.path[i + run - 2..i + run] {
                    self.step_line(&mut t, step, &mut explained);
                }
                i += run;
                continue;
            }
            self.step_line(&mut t, &self.path[i], &mut explained);
            i += 1;
        }

        let _ = writeln!(t, "\nbudgets (spent / limit):");
        for b in &self.budgets {
            let used = b.used.map_or_else(|| "-".to_owned(), |u| u.to_string());
            let limit = b.limit.map_or_else(|| "none".to_owned(), |l| l.to_string());
            let mark = match (b.stopped, b.reached) {
                (true, _) => "  <- stopped the run",
                (false, true) => "  (reached)",
                _ => "",
            };
            let _ = writeln!(
                t,
                "  {:<31} {:>7} / {:<7} {}{mark}",
                b.field, used, limit, b.counter
            );
        }
        if let Some(scale) = &self.scale {
            let units = scale
                .units
                .map_or_else(|| "no units yet".to_owned(), |u| format!("{u} units"));
            let each: Vec<String> = scale
                .per_unit
                .iter()
                .map(|(field, per)| {
                    let max = scale.max.get(field).map_or(0, |m| *m);
                    format!("{field} +{per} a unit, at most {max}")
                })
                .collect();
            let _ = writeln!(
                t,
                "  scaled for {units} (budget_scale): {}",
                each.join("; ")
            );
        }
        for w in &self.warnings {
            let _ = writeln!(t, "  warned: {w}");
        }
        if !self.tool_budget_events.is_empty() {
            let _ = writeln!(t, "\ntool budgets (tool_budgets):");
            for e in &self.tool_budget_events {
                let what = match (e.kind, e.block_at) {
                    (ToolBudgetKind::Warn, Some(b)) => {
                        format!("warned (calls are refused from {b})")
                    }
                    (ToolBudgetKind::Warn, None) => "warned".to_owned(),
                    (ToolBudgetKind::Block, _) => {
                        let (field, lifted_by) = blocked_by(&self.tool_budgets, e);
                        let lifts = if lifted_by.is_empty() {
                            "nothing lifts it".to_owned()
                        } else {
                            format!("{lifted_by} lifts it")
                        };
                        format!("refused by {field} ({lifts})")
                    }
                };
                let tier = e
                    .tier
                    .map(usize::from)
                    .and_then(|i| Some((i, self.tool_budgets.get(&e.tool)?.tiers.get(i)?)))
                    .map_or_else(String::new, |(i, tier)| format!(" [{}]", tier.label(i)));
                let _ = writeln!(
                    t,
                    "  step {}: {} call {}{tier} {what}",
                    e.step, e.tool, e.call
                );
            }
        }
        if let Some(c) = &self.context {
            let _ = writeln!(t, "\ncontext window:");
            let mut line = format!(
                "  {} · {} cut · largest view {} tokens",
                plural(u64::from(c.prunes), "prune", "prunes"),
                plural(
                    u64::from(c.truncated_results),
                    "tool result",
                    "tool results"
                ),
                c.peak_tokens
            );
            if c.system_cut_tokens > 0 {
                let _ = write!(
                    line,
                    " · system prompt cut ({} tokens not shown)",
                    c.system_cut_tokens
                );
            }
            let _ = writeln!(t, "{line}");
            for p in &self.context_prunes {
                let _ = writeln!(
                    t,
                    "  pruned for model call {} (after step {}): {} messages, {} tokens -> {} \
                     messages, {} tokens",
                    p.model_call,
                    p.step,
                    p.messages_before,
                    p.tokens_before,
                    p.messages_after,
                    p.tokens_after
                );
            }
        }
        if !self.verifier_feedback.is_empty() {
            let _ = writeln!(t, "\nverifier feedback (what it said was missing):");
            for f in &self.verifier_feedback {
                let steps: Vec<String> = f.steps.iter().map(u32::to_string).collect();
                let repeated = if f.count > 1 { "  (repeated)" } else { "" };
                let _ = writeln!(
                    t,
                    "  {}x \"{}\" (step {}){repeated}",
                    f.count,
                    f.missing,
                    steps.join(", ")
                );
            }
        }
        if !self.tools.is_empty() {
            let _ = writeln!(t, "\ntools:");
            for tool in &self.tools {
                let mut line = format!(
                    "  {:<20} {}, {}",
                    tool.name,
                    plural(u64::from(tool.calls), "call", "calls"),
                    plural(u64::from(tool.failures), "failure", "failures")
                );
                if tool.refused > 0 {
                    let _ = write!(line, ", {} refused", tool.refused);
                }
                if let Some(why) = &tool.excluded {
                    match tool.excluded_at {
                        Some(step) => {
                            let _ = write!(line, "; excluded at step {step}: {why}");
                        }
                        None => {
                            let _ = write!(line, "; excluded: {why}");
                        }
                    }
                }
                let _ = writeln!(t, "{line}");
                for err in &tool.errors {
                    let _ = writeln!(t, "    step {}: {}: {}", err.step, err.kind, err.message);
                }
            }
        }
        let open = open_work(self);
        if !open.is_empty() {
            let _ = writeln!(t, "\nopen work: {open}");
        }
        t.push('\n');
        if let Some(st) = &self.stats {
            let _ = writeln!(
                t,
                "counters  steps {} · model calls {} · tool calls {}{} · tool failures {} · \
                 nudges {} (claims refused) · continuations {} (after no-ops) · no-ops {} · \
                 empty replies {} · verification failures {} · tokens {}",
                st.steps,
                st.model_calls,
                st.tool_calls,
                if st.text_tool_calls > 0 {
                    format!(" ({} written as text)", st.text_tool_calls)
                } else {
                    String::new()
                },
                st.tool_failures,
                st.nudges,
                st.continuations,
                st.no_ops,
                st.empty_responses,
                st.verification_failures,
                st.tokens()
            );
        }
        if let Some(result) = &self.result {
            let _ = writeln!(t, "result    {result}");
        }
        let _ = writeln!(
            t,
            "entries   {} ({})",
            self.entries,
            self.entry_kinds
                .iter()
                .map(|(k, n)| format!("{k} {n}"))
                .collect::<Vec<_>>()
                .join(", ")
        );
        let _ = writeln!(
            t,
            "conflicts {} (claims refused or leases lost: each an exit 4 for some process)",
            self.conflicts
        );
        if let Some(e) = &self.replay_error {
            let _ = writeln!(
                t,
                "replay    failed: {e} (streaks, tool ledger and todos are unknown)"
            );
        }
        t
    }

    fn step_line(&self, t: &mut String, step: &PathStep, explained: &mut Vec<Rule>) {
        let record = self
            .trace
            .iter()
            .find(|r| r.step == step.step)
            .map_or_else(String::new, ToString::to_string);
        let _ = writeln!(t, "  {record}{}", step.details());
        if let Some(row) = &step.why
            && !explained.contains(&step.rule)
        {
            explained.push(step.rule);
            let _ = writeln!(t, "             rule {}: {row}", step.rule.name());
        }
    }
}

/// The field of the bound that refused a call (`block_at`, `hard_block_at`, `tiers[1].block_at`)
/// and the tools whose call lifts it (`` `post_plan` ``, or-joined; empty when nothing does),
/// from the run's `budgets`.
fn blocked_by(
    budgets: &std::collections::BTreeMap<String, terminus_kernel::ToolBudget>,
    event: &crate::ToolBudgetEvent,
) -> (String, String) {
    let budget = budgets.get(&event.tool);
    let (field, lifts): (String, &[String]) = match (event.tier, event.bound.as_deref()) {
        (Some(i), _) => {
            let tier = budget.and_then(|b| b.tiers.get(usize::from(i)));
            let lifts = tier.map_or(&[][..], |t| t.reset_on.as_slice());
            (format!("tiers[{i}].block_at"), lifts)
        }
        (None, Some(bound)) => (bound.to_owned(), &[][..]),
        (None, None) => {
            let lifts = budget.map_or(&[][..], |b| b.reset_on.as_slice());
            ("block_at".to_owned(), lifts)
        }
    };
    let on: Vec<String> = lifts.iter().map(|t| format!("`{t}`")).collect();
    (field, on.join(" or "))
}
