//! The commands a transition pushes to the outbox: model calls with their guidance (nudges,
//! notices), verifications and the stop.

use super::{Desk, TOKEN_WARNINGS, TextCallNote};
use crate::backoff::backoff_ms;
use crate::command::{
    CHECKPOINT_NOTE_START, CheckpointRequest, Command, ModelCall, Notice, Nudge, NudgeKind, Stop,
    VerifyRequest,
};
use crate::input::NoOpKind;
use crate::loops::Repetition;
use crate::phase::CallReason;
use crate::policy::Policy;
use crate::reason::Outcome;
use crate::rule::Rule;
use crate::stats::Stats;
use crate::todo::open_todos;

impl Desk {
    // ----- commands -----

    /// Guidance (when the call answers a refused claim, a no-op turn or a rejection), then the
    /// model call itself, with its backoff delay.
    // Inlined into its callers, which pass a constant reason: the command is then built where
    // it is queued, not built on the stack and copied (a stall on store forwarding).
    #[inline(always)]
    pub(crate) fn call_model(&mut self, policy: &Policy, reason: CallReason) {
        let kind = match reason {
            CallReason::Continue => Some(NudgeKind::Continue(self.last_no_op)),
            CallReason::Nudge => Some(NudgeKind::Incomplete),
            CallReason::VerifierRejected => Some(NudgeKind::VerifierRejected),
            _ => None,
        };
        if let Some(kind) = kind {
            let nudge = self.nudge(policy, kind);
            // The kernel's own words only: the todos, the verifier's items and the names the
            // model wrote are the model's (an answer may well repeat them).
            let written = self.text_call.as_ref().map(|n| n.names.as_slice());
            let polled = self.poller_said.as_ref().map(|p| &p.result);
            let model_words = nudge
                .open_todos
                .iter()
                .chain(&nudge.missing_items)
                .chain(written.unwrap_or_default())
                .chain(polled);
            self.said.remember(&without(&nudge.text, model_words));
            self.out.push_back(Command::Nudge(Box::new(nudge)));
        }
        let delay_ms = match reason {
            CallReason::Retry {
                attempt,
                retry_after_ms,
            } => backoff_ms(
                policy.retry_base_ms,
                policy.retry_max_ms,
                policy.seed,
                attempt,
                retry_after_ms,
            ),
            _ => 0,
        };
        // The common calls are constants: the command is copied from read-only memory into the
        // queue, instead of being written field by field on the stack and copied from there
        // (a copy of freshly written memory stalls on store forwarding).
        const AFTER_TOOLS: Command = Command::CallModel(ModelCall {
            delay_ms: 0,
            reason: CallReason::AfterTools,
            tools: true,
        });
        if let CallReason::AfterTools = reason {
            self.out.push_back(AFTER_TOOLS);
            return;
        }
        let tools = !matches!(reason, CallReason::FinalAnswer { .. });
        self.out.push_back(Command::CallModel(ModelCall {
            delay_ms,
            reason,
            tools,
        }));
    }

    /// Ask the verifier about the last claim.
    pub(crate) fn verify(&mut self) {
        let claim = self.result.clone().unwrap_or_default();
        self.out.push_back(Command::Verify(VerifyRequest {
            claim,
            todos: self.todos.clone(),
        }));
    }

    /// The run ended.
    pub(crate) fn stop(&mut self, rule: Rule, outcome: Outcome, stats: &Stats) {
        let mut stats = *stats;
        stats.ignored_events = self.ignored;
        self.out.push_back(Command::Stop(Box::new(Stop {
            outcome,
            rule,
            result: self.result.clone(),
            stats,
            excluded_tools: self.ledger.excluded().map(|(n, _)| n.to_owned()).collect(),
        })));
    }

    /// A checkpoint written for the agent (`policy.auto_checkpoints`): resets every budget that a
    /// checkpoint lifts (those with a `reset_on`), as a posted checkpoint would, and asks the host
    /// for the summary that stands for it.
    #[cold]
    pub(crate) fn checkpoint(&mut self, policy: &Policy) {
        self.checkpoint_share = self.told_tokens;
        let mut blocked = Vec::new();
        let mut lifted = Vec::new();
        for (tool, budget) in &policy.tool_budgets {
            if budget.reset_on.is_empty() {
                continue;
            }
            if self.ledger.get(tool).is_some_and(|r| r.blocked_turns >= 2) {
                blocked.push(tool.clone());
            }
            self.ledger.reset_budget(tool);
            lifted.push(tool.clone());
        }
        let names = |tools: &[String]| {
            tools
                .iter()
                .map(|t| format!("`{t}`"))
                .collect::<Vec<_>>()
                .join(", ")
        };
        let prompt = "Write a checkpoint of your work so far: the findings the rest of the task \
                      needs (facts, file paths, names, ids, numbers, decisions) and what is left \
                      to do, as short notes. Call no tool: this text is kept as your checkpoint."
            .to_owned();
        let why = if blocked.is_empty() {
            format!(
                "{} % of the run's token budget is spent and no checkpoint was posted since 80 %",
                self.told_tokens
            )
        } else {
            format!(
                "the budget of {} refused calls in two turns and no checkpoint was posted",
                names(&blocked)
            )
        };
        let lifts = if lifted.is_empty() {
            String::new()
        } else {
            format!(" The calls of {} count again from here.", names(&lifted))
        };
        let note = format!("{CHECKPOINT_NOTE_START}: {why}.{lifts} Your checkpoint:");
        self.said.remember(&prompt);
        self.said.remember(&note);
        self.out
            .push_back(Command::Checkpoint(Box::new(CheckpointRequest {
                blocked,
                lifted,
                prompt,
                note,
            })));
    }

    /// Tell the model, before its next call, which tools are now excluded and why.
    pub(crate) fn notice(&mut self, notice: Notice) {
        self.said.remember(notice.text());
        self.out.push_back(Command::Notice(notice));
    }

    /// Tell the model the first time a window of its tool turns repeats, so that an honest agent
    /// can change course before the repeat limit stops the run.
    pub(crate) fn loop_notice(&mut self, policy: &Policy, repetition: Repetition) {
        let period = repetition.period.max(1);
        let turns = if period == 1 {
            "Your last tool turn repeated the one before it".to_owned()
        } else {
            format!("Your last {period} tool turns repeated the {period} before them")
        };
        let mut text = format!(
            "{turns}: the same calls with the same results. If the same sequence occurs {} times in a row the run stops with no_progress; change course.",
            policy.max_repeats
        );
        // The way out, named: what the task still needs (a small model that looped re-reading
        // files went on to write the plan once told which call was still required).
        let missing = self.ledger.missing(&policy.completion_requires);
        if !missing.is_empty() {
            text.push_str(" Still required before the task can finish: call ");
            text.push_str(&quoted(&missing));
            text.push('.');
        }
        let open = open_todos(&self.todos);
        if !open.is_empty() {
            text.push_str(" Open todos: ");
            text.push_str(&open.join("; "));
            text.push('.');
        }
        // Nothing left that the run can see: the way out is to finish (a small model that wrote
        // the report's number went on writing it again, never answering).
        if missing.is_empty() && open.is_empty() && !policy.completion_requires.is_empty() {
            text.push_str(
                " Every call the task requires has been made: if nothing is left to do, write your \
                 final answer now: its result, in your own words.",
            );
        }
        self.said.remember(&without(&text, open.iter()));
        self.out.push_back(Command::Notice(Notice::Repeating {
            period,
            times: repetition.times,
            limit: policy.max_repeats,
            text,
        }));
    }

    /// Tell the model, once each, when the run's tokens (`used`, input and output) have passed
    /// 80 % and 90 % of `token_budget`. Called just before a model call is issued, the one
    /// point where a kernel message may go into the conversation (never between a tool turn and
    /// its results). Nothing is said once the budget is spent: it stops the run.
    /// Returns whether this call told the model of 90 % while no checkpoint was posted or
    /// written since the run passed 80 % (a checkpoint is then due, `policy.auto_checkpoints`).
    pub(crate) fn token_notices(&mut self, policy: &Policy, used: u64) -> bool {
        let Some(budget) = policy.token_budget.filter(|b| *b > 0) else {
            return false;
        };
        if used >= budget {
            return false;
        }
        let before = self.told_tokens;
        for percent in TOKEN_WARNINGS {
            let passed = u128::from(used) * 100 >= u128::from(budget) * u128::from(percent);
            if percent <= self.told_tokens || !passed {
                continue;
            }
            self.told_tokens = percent;
            let text = format!(
                "You have used {percent} % of this run's token budget ({used} of {budget} tokens). \
                 When it is spent the run stops: finish the task or give your final answer soon."
            );
            self.said.remember(&text);
            self.out.push_back(Command::Notice(Notice::TokenBudget {
                percent,
                used,
                budget,
                text,
            }));
        }
        let last = TOKEN_WARNINGS[TOKEN_WARNINGS.len() - 1];
        before < last && self.told_tokens == last && self.checkpoint_share < TOKEN_WARNINGS[0]
    }

    fn nudge(&self, policy: &Policy, kind: NudgeKind) -> Nudge {
        let open_todos = open_todos(&self.todos);
        let missing_tools = self.ledger.missing(&policy.completion_requires);
        let mut text = String::from(match kind {
            NudgeKind::Incomplete => "You tried to finish, but the task is not done yet.",
            NudgeKind::VerifierRejected => "A check of your work found the task incomplete.",
            NudgeKind::Continue(NoOpKind::Silent) => {
                "Your last reply had no content and no tool call."
            }
            NudgeKind::Continue(NoOpKind::NeedsMoreWork) => {
                "You said more work is needed but did not do any."
            }
            NudgeKind::Continue(NoOpKind::Truncated) => {
                "Your last reply was cut off by the length limit."
            }
            NudgeKind::Continue(NoOpKind::Filtered) => {
                "Your last reply was cut by the content filter."
            }
            NudgeKind::Continue(NoOpKind::TextCall) => {
                "Your last reply wrote a tool call as text, so nothing ran."
            }
            NudgeKind::Continue(NoOpKind::Repetitive) => {
                "Your last reply repeated the same text over and over, so it was cut off. Do not \
                 repeat yourself: say each thing once."
            }
            NudgeKind::Continue(NoOpKind::Echo) => {
                "Your last reply repeated these instructions instead of doing the task."
            }
            NudgeKind::Continue(NoOpKind::ImaginedResult) => {
                "Your last reply wrote a tool's result itself: no tool ran, and a result only a \
                 tool can give does not do the task."
            }
            NudgeKind::Continue(NoOpKind::NonAnswer) => {
                "Nobody will read or answer questions in this run: asking, apologising or \
                 telling someone else to act does not do the task."
            }
        });
        if let (NudgeKind::Continue(NoOpKind::TextCall), Some(note)) = (kind, &self.text_call) {
            text_call_guidance(&mut text, note);
        }
        // A model that stopped polling (a 1.5B model called its poller two or three times, then
        // wrote prose): what the poller said last, and the way on. The same result twice in a
        // row or more is a wait still going on: then the way on is the poller, said last.
        let waiting = self.poller_said.as_ref().filter(|said| said.same >= 2);
        if let Some(said) = &self.poller_said {
            let name = &said.name;
            text.push_str(&if said.same >= 2 {
                format!(
                    "\n`{name}` gave the same result {} times in a row: \"{}\". What it waits \
                     for is not done yet.",
                    said.same, said.result
                )
            } else {
                format!(
                    "\n`{name}` may need several calls before its result is ready; its last \
                     result was: \"{}\". If that says it is not ready yet, call `{name}` again \
                     now.",
                    said.result
                )
            });
        }
        if !open_todos.is_empty() {
            text.push_str("\nOpen todos: ");
            text.push_str(&open_todos.join("; "));
            text.push('.');
        }
        if !missing_tools.is_empty() {
            text.push_str("\nStill required before the task can finish: call ");
            text.push_str(&quoted(&missing_tools));
            text.push_str(" (not yet run successfully).");
        }
        let missing_items = if kind == NudgeKind::VerifierRejected {
            self.missing_items.clone()
        } else {
            Vec::new()
        };
        if !missing_items.is_empty() {
            text.push_str("\nStill missing: ");
            text.push_str(&missing_items.join("; "));
            text.push('.');
        }
        if let Some(said) = waiting {
            text.push_str(&format!(
                "\nContinue: call `{}` again now; reply with your final answer only when the \
                 task is done.",
                said.name
            ));
        } else {
            text.push_str(match (missing_tools.is_empty(), open_todos.is_empty()) {
                (true, true) => {
                    "\nContinue: if part of the task is left, do it with your tools; if nothing \
                     is left to do, write your final answer now: the result the task asked for, \
                     in your own words."
                }
                (false, _) => {
                    "\nContinue: call that tool now; reply with your final answer only when \
                     that is done."
                }
                (true, false) => {
                    "\nContinue: work on the open todos with your tools (mark each completed \
                     with write_todos); reply with your final answer only when they are done."
                }
            });
        }
        Nudge {
            kind,
            text,
            open_todos,
            missing_tools,
            missing_items,
        }
    }
}

/// `text` with each of `parts` (words the model wrote, quoted back to it) cut out.
fn without<'a>(text: &str, parts: impl Iterator<Item = &'a String>) -> String {
    let mut kept = text.to_owned();
    for part in parts.filter(|p| !p.trim().is_empty()) {
        kept = kept.replace(part.as_str(), "\n");
    }
    kept
}

/// `a`, `b` and `c`, each in backticks.
fn quoted(names: &[String]) -> String {
    let quoted: Vec<String> = names.iter().map(|n| format!("`{n}`")).collect();
    match quoted.split_last() {
        None => String::new(),
        Some((last, [])) => last.clone(),
        Some((last, rest)) => format!("{} and {last}", rest.join(", ")),
    }
}

/// What the nudge after a written tool call says of it: the names it wrote, and the offered
/// tools (the closest to a name no tool has, or all of them).
fn text_call_guidance(text: &mut String, note: &TextCallNote) {
    if note.names.is_empty() {
        text.push_str(" You began a tool call");
    } else {
        text.push_str(" You wrote ");
        text.push_str(&quoted(&note.names));
    }
    text.push_str(
        " in your reply's text; a call written there is not run. Call tools through the tool \
         interface (a function call), not by writing JSON or tags in your reply.",
    );
    if note.broken {
        text.push_str(" That call was cut off or malformed, so it could not be read either.");
    }
    if !note.suggested.is_empty() {
        let offered = |n: &String| note.suggested.contains(n);
        if note.names.iter().all(offered) {
            text.push_str(" Offered tools: ");
        } else {
            text.push_str(" No tool of that name is offered; the closest offered tools: ");
        }
        text.push_str(&quoted(&note.suggested));
        text.push('.');
    }
}
