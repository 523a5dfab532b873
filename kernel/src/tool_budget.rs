//! Tool budgets (`policy.tool_budgets.NAME`): the budget of one tool, and the table of its
//! bounds, from which its calls are refused (one [`ToolBound`] row each, [`TOOL_BOUNDS`]; the stop
//! catalog re-exports them). A new bound is its row here and its field of [`ToolBudget`].

use serde::{Deserialize, Serialize};

/// A budget on how often one tool may be called: a warning from `warn_at`, and the bounds of
/// [`TOOL_BOUNDS`], from which calls are refused.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ToolBudget {
    /// From this call on (1-based), the result carries a warning.
    pub warn_at: Option<u32>,
    /// This call (1-based, counted since the budget's last reset) and later ones are refused,
    /// each answered with the budget's text, until a reset.
    pub block_at: Option<u32>,
    /// This call (1-based, counted over the whole run, resets or not) and later ones are refused,
    /// each answered with the budget's text; nothing lifts it. Absent from the JSON form when
    /// unset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hard_block_at: Option<u32>,
    /// Tools whose successful call resets this budget's count: the calls before it no longer
    /// count, and a block of this budget is lifted (the agent posted its checkpoint). Default
    /// none (and then absent from the JSON form).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub reset_on: Vec<String>,
}

/// One per-tool bound of a tool's budget (`tool_budgets.NAME`): from it, a call of the tool is
/// refused, answered with the bound's text, and the run goes on (see `docs/design.md`, "Budget
/// blocks").
#[derive(Debug, Clone, Copy)]
pub struct ToolBound {
    /// Its field of the tool's budget.
    pub field: &'static str,
    /// Whether a reset (`reset_on`) lifts it: it counts the executions since the budget's last
    /// reset, not those of the whole run.
    pub resets: bool,
    /// The bound under a tool's budget (`None`: unbounded).
    pub limit: fn(&ToolBudget) -> Option<u32>,
}

impl ToolBound {
    /// The executions of a tool it counts, of `calls` in the run and `since_reset` since the
    /// budget's last reset.
    #[inline]
    pub fn count(&self, calls: u32, since_reset: u32) -> u32 {
        if self.resets { since_reset } else { calls }
    }

    /// What it counts, in words.
    pub fn counts(&self) -> &'static str {
        if self.resets {
            "calls since the budget's last reset"
        } else {
            "calls in the whole run"
        }
    }

    /// The bound of that field, if it is one.
    pub fn named(field: &str) -> Option<&'static ToolBound> {
        TOOL_BOUNDS.iter().copied().find(|b| b.field == field)
    }
}

/// The soft block: the `block_at`-th call since the budget's last reset is refused, and so is
/// every later one until a reset.
pub const BLOCK_AT: ToolBound = ToolBound {
    field: "block_at",
    resets: true,
    limit: |b| b.block_at,
};

/// The hard block: the `hard_block_at`-th call of the whole run is refused, and so is every later
/// one; no reset lifts it (seed 004's second tier: the soft block lifted by the checkpoint, a hard
/// stop from the 14th read).
pub const HARD_BLOCK_AT: ToolBound = ToolBound {
    field: "hard_block_at",
    resets: false,
    limit: |b| b.hard_block_at,
};

/// Every per-tool bound, in the order a call is checked against them.
pub const TOOL_BOUNDS: [&ToolBound; 2] = [&BLOCK_AT, &HARD_BLOCK_AT];
