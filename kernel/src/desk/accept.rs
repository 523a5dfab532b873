//! Step 2: the commits, made by the state that accepted the input ([`Cx`]'s `accept_*`), and
//! the tool batches it hands out.

use super::{Arrival, Cx, Desk, LastPoll, Plan, TextCallNote};
use crate::command::Notice;
use crate::event::ToolCall;
use crate::input::{Batch, NoOpKind, TurnKind};
use crate::loops::Repetition;
use crate::policy::Policy;
use crate::raise::Preempted;
use crate::textcall;
use crate::todo::WRITE_TODOS;

impl<'d, 'e> Cx<'d, 'e> {
    /// The context of one dispatch; the classification writes its arrival.
    #[inline(always)]
    pub(crate) fn new(desk: &'d mut Desk) -> Self {
        Cx {
            desk,
            arrival: Arrival::Nothing,
            rule: None,
            not_accepted: None,
        }
    }

    /// A model turn was accepted: its substantive text is the partial result, whatever the turn,
    /// but for a tool call written as text and a reply that is not an answer (neither is a
    /// result). (The calls stay in the turn for [`Cx::run_tools`].)
    pub(crate) fn accept_turn(&mut self, kind: TurnKind) {
        if let Arrival::Turn { turn, .. } = &mut self.arrival
            && !turn.text.is_empty()
            && !matches!(kind, TurnKind::NoOp(k) if k == NoOpKind::TextCall || k.is_non_answer())
            && !turn.text.trim().is_empty()
        {
            self.desk.result = Some(std::mem::take(&mut turn.text));
        }
    }

    /// How many calls of an accepted tool turn the host recovered from the model's text.
    pub(crate) fn recovered_calls(&self) -> u32 {
        match &self.arrival {
            Arrival::Turn { turn, .. } => turn.recovered_calls(),
            _ => 0,
        }
    }

    /// A no-op turn was accepted: remembered for the continuation guidance (with the calls a
    /// turn wrote as text, for the nudge to name).
    pub(crate) fn note_no_op(&mut self, kind: NoOpKind) {
        self.desk.last_no_op = kind;
        self.desk.text_call = match (&self.arrival, kind) {
            (Arrival::Turn { turn, .. }, NoOpKind::TextCall) => {
                textcall::find(&turn.text).map(|written| {
                    Box::new(TextCallNote {
                        names: written.names(),
                        suggested: turn.suggested_tools().to_vec(),
                        broken: written.broken,
                    })
                })
            }
            _ => None,
        };
    }

    /// Tool results were accepted. Results are facts: recorded in the ledger, the todo list and
    /// the repeat detector whatever the machine decides next. Returns the notice of the tools
    /// this batch excluded (rule 7), for the model before its next call, and the repetition the
    /// detector saw (from `batch` alone for an abstract input, which has no payload). The
    /// results themselves stay with the host. (The notice is boxed: it is rare, and a large
    /// return value is a copy of freshly written memory on every batch.)
    pub(crate) fn accept_results(
        &mut self,
        policy: &Policy,
        batch: &Batch,
    ) -> (Option<Box<Notice>>, Repetition) {
        let Arrival::Results {
            results,
            fingerprint,
            poll,
            new,
            repetition,
        } = self.arrival
        else {
            let period = u32::from(batch.repeats > 1);
            return (
                None,
                Repetition {
                    period,
                    times: batch.repeats,
                },
            );
        };
        self.arrival = Arrival::Nothing;
        let desk = &mut *self.desk;
        match (fingerprint, poll) {
            // A poll is kept apart: the detector's windows go on across it.
            (Some(fingerprint), Some(times)) => {
                desk.last_poll = Some(LastPoll { fingerprint, times });
            }
            (Some(fingerprint), None) if new => desk.loops.push_new(fingerprint),
            (Some(fingerprint), None) => desk.loops.push(fingerprint, policy.max_loop_period),
            (None, _) => desk.loops.break_window(),
        }
        if !policy.pollers.is_empty() {
            desk.remember_poller(policy, results, poll.unwrap_or(0));
        }
        if batch.failed == 0 {
            // The common case (the batch summarizes these results): every call succeeded, and
            // no tool can be excluded.
            for r in results {
                desk.ledger.update(&r.name, |record| {
                    record.successes = record.successes.saturating_add(1);
                });
                if r.name == WRITE_TODOS {
                    desk.apply_todos(&r.call_id);
                }
            }
            if !policy.tool_budgets.is_empty() {
                desk.reset_budgets(policy, results);
            }
            return (None, repetition);
        }
        let notice = desk.record_results(policy, results);
        if !policy.tool_budgets.is_empty() {
            desk.reset_budgets(policy, results);
        }
        (notice, repetition)
    }

    /// A verdict was accepted: what it says is missing joins the list (deduplicated).
    pub(crate) fn accept_verdict(&mut self) {
        let Arrival::Verdict(verdict) = self.arrival else {
            return;
        };
        self.arrival = Arrival::Nothing;
        for item in &verdict.missing {
            let item = item.trim();
            if !item.is_empty() && !self.desk.missing_items.iter().any(|m| m == item) {
                self.desk.missing_items.push(item.to_owned());
            }
        }
    }

    /// A clock reading was accepted.
    pub(crate) fn accept_tick(&mut self) {
        if let Arrival::Tick(now_ms) = self.arrival {
            self.arrival = Arrival::Nothing;
            self.desk.now_ms = now_ms;
        }
    }

    /// The calls and plan of an accepted tool turn, taken out of the arrival.
    #[inline(always)]
    fn take_calls(&mut self) -> (Vec<ToolCall>, Plan) {
        let taken = match &mut self.arrival {
            Arrival::Turn { turn, plan } => {
                (std::mem::take(&mut turn.tool_calls), std::mem::take(plan))
            }
            _ => (Vec::new(), Plan::default()),
        };
        self.arrival = Arrival::Nothing;
        taken
    }

    /// Commits the calls of an accepted tool turn to the ledger and hands them out.
    #[inline(always)]
    pub(crate) fn run_tools(&mut self) {
        let (calls, plan) = self.take_calls();
        self.desk.run_calls(calls, plan);
    }

    /// The raised policy a raise brings, taken out of the arrival.
    pub(crate) fn take_raised(&mut self) -> Option<Policy> {
        match std::mem::replace(&mut self.arrival, Arrival::Nothing) {
            Arrival::Raised(policy) => Some(*policy),
            other => {
                self.arrival = other;
                None
            }
        }
    }

    /// A budget stopped the run before the accepted tool turn's calls ran: they are kept for a
    /// raise, and run then as this turn's plan decided.
    #[cold]
    pub(crate) fn preempt_tools(&mut self) {
        let (calls, plan) = self.take_calls();
        self.desk.preempted = Some(Preempted::Tools {
            calls,
            refused: plan.refused,
            warnings: plan.warnings,
            runnable: plan.runnable,
        });
    }
}
