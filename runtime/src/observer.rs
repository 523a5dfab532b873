//! Progress: one record per transition, for the CLI's stderr lines or a host's telemetry.

use crate::budget::{BudgetWarning, ToolBudgetEvent};
use crate::context::{ContextPrune, SystemCut};
use crate::report::Report;
use crate::tool::ToolsChanged;
use std::fmt;
use terminus_kernel::{Entry, Machine, Stats, StepRecord};

/// One transition of the run, as an observer sees it.
#[derive(Debug, Clone, Copy)]
pub struct Transition<'a> {
    /// The kernel's record of the step.
    pub record: StepRecord,
    /// Every counter after the step.
    pub stats: Stats,
    /// What the event was, in a few words ("read_file, write_file", "rate_limited: slow down").
    pub summary: &'a str,
    /// Milliseconds since the run started (tokio's clock).
    pub elapsed_ms: u64,
}

impl fmt::Display for Transition<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.record)?;
        if !self.summary.is_empty() {
            write!(f, "  {}", self.summary)?;
        }
        Ok(())
    }
}

/// Receives the run's progress. Any `FnMut(&Transition)` closure is an observer (send the lines
/// into a channel from it if the host wants them elsewhere).
pub trait Observer: Send {
    /// One transition was taken.
    fn on_transition(&mut self, transition: &Transition<'_>);

    /// The event a live step was fed, as its journal entry keeps it (a model turn with its
    /// text and tool calls, a batch of tool results, a verdict...), and the machine after the
    /// step (its phase, counters, todos and ledger). Called once the machine has taken the step
    /// and before the step is journaled; [`Observer::on_transition`] of the same step follows
    /// once it is (an observer that must show only journaled steps holds what it saw until
    /// then). The steps a resume replays from the journal are not observed again. `terminus serve` streams a run's messages and tool calls from it.
    fn on_event(&mut self, event: &Entry, machine: &Machine) {
        let _ = (event, machine);
    }

    /// A budget passed 80 % (once per budget and run).
    fn on_warning(&mut self, warning: &BudgetWarning) {
        let _ = warning;
    }

    /// A per-tool budget warned about a call or refused one (`tool_budgets`), as the model is
    /// told.
    fn on_tool_budget(&mut self, event: &ToolBudgetEvent) {
        let _ = event;
    }

    /// The context window pruned the model's view before a model call.
    fn on_prune(&mut self, prune: &ContextPrune) {
        let _ = prune;
    }

    /// The system prompt was over the context policy's `max_system_tokens` and was cut to fit
    /// (once per run, before the first model call).
    fn on_system_cut(&mut self, cut: &SystemCut) {
        let _ = cut;
    }

    /// A [`crate::ToolSource`] changed the tool list before a model call (an MCP server's
    /// `notifications/tools/list_changed`): the call offers the new list.
    fn on_tools_changed(&mut self, change: &ToolsChanged) {
        let _ = change;
    }

    /// The job a tool call waits for (an MCP task) said what it is doing: called while the
    /// call waits, each time its tool reports a status.
    fn on_job(&mut self, status: &crate::jobs::JobStatus) {
        let _ = status;
    }

    /// The run ended (the report is journaled already).
    fn on_stop(&mut self, report: &Report) {
        let _ = report;
    }
}

impl<F: FnMut(&Transition<'_>) + Send> Observer for F {
    fn on_transition(&mut self, transition: &Transition<'_>) {
        self(transition);
    }
}
