//! Tool budgets (`policy.tool_budgets.NAME`): the budget of one tool, and the table of its
//! bounds, from which its calls are refused (one [`ToolBound`] row each, [`TOOL_BOUNDS`]; the stop
//! catalog re-exports them). A new bound is its row here and its field of [`ToolBudget`].

use serde::{Deserialize, Serialize};

/// A budget on how often one tool may be called: a warning from `warn_at`, and the bounds of
/// [`TOOL_BOUNDS`], from which calls are refused; or, instead of those, a list of [`Tier`]s.
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
    /// Tiers on the same count of calls, each with its own warnings, block and lift (at most
    /// [`MAX_TIERS`]; not with the single-tier keys above). Default none (and then absent from
    /// the JSON form).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tiers: Vec<Tier>,
}

/// The most tiers a tool's budget may have.
pub const MAX_TIERS: usize = 4;

/// One tier of a tool's budget (`tool_budgets.NAME.tiers[i]`): from `warn_at` the tool's results
/// carry the tier's warning, from `block_at` its calls are refused until a call of a `reset_on`
/// tool succeeds (the lift). Seed 004's file reads are two tiers on one count: a checkpoint due
/// at 7 (reads 8-9 warned, 10 and on refused until a checkpoint is posted) and a hard stop at 12
/// (read 13 a final warning, 14 and on refused until the plan is posted).
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Tier {
    /// What the tier is for, in the texts the model reads and in `inspect` (`"checkpoint"`).
    /// Default none (the tier is named by its place: `tiers[1]`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// From this call on (1-based, as the tier counts), the result carries the tier's warning.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub warn_at: Option<u32>,
    /// From this call on (1-based, as the tier counts), calls are refused until a lift.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub block_at: Option<u32>,
    /// Tools whose successful call lifts the tier (the checkpoint, the plan). None: nothing
    /// lifts it (a hard stop).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub reset_on: Vec<String>,
    /// What the tier counts: the tool's calls since the run's start (`run`, the default), or
    /// since the tier's last lift (`since_lift`).
    #[serde(default, skip_serializing_if = "TierCount::is_run")]
    pub count: TierCount,
    /// The warning's own text, appended to a warned result after the call's number (the seed's
    /// final warning is sterner than its first). Default: the budget's plain warning.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub warning: Option<String>,
}

/// What a [`Tier`] counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TierCount {
    /// The tool's calls since the run's start. A lift passes the tier for the rest of the run,
    /// once it is due (its count has reached its first threshold): a checkpoint posted before
    /// that is not the one the tier asks for.
    #[default]
    Run,
    /// The tool's calls since the tier's last lift: every lift starts the count again, so the
    /// tier comes back (a checkpoint every N calls).
    SinceLift,
}

impl TierCount {
    #[allow(clippy::trivially_copy_pass_by_ref)] // serde's `skip_serializing_if` passes a reference
    fn is_run(&self) -> bool {
        *self == TierCount::Run
    }
}

impl Tier {
    /// The tier's first threshold: from this call (as it counts) it is due, and a lift passes it.
    pub fn due_at(&self) -> Option<u32> {
        match (self.warn_at, self.block_at) {
            (Some(w), Some(b)) => Some(w.min(b)),
            (w, b) => w.or(b),
        }
    }

    /// The tier's count for a tool with `calls` in the run whose mark ([`TierMarks`]) is `mark`,
    /// or `None` when the tier is passed (counted over the run and lifted).
    #[inline]
    pub fn count(&self, calls: u32, mark: u32) -> Option<u32> {
        match self.count {
            TierCount::Run if mark > 0 => None,
            TierCount::Run => Some(calls),
            TierCount::SinceLift => Some(calls.saturating_sub(mark)),
        }
    }

    /// The mark a lift leaves when the tool has made `calls`: the calls at the lift for a tier
    /// counted since its lift; for one counted over the run, the calls at the lift once the
    /// tier is due (it is then passed), and `mark` unchanged before (the lift was not its).
    pub fn lifted(&self, calls: u32, mark: u32) -> u32 {
        match self.count {
            TierCount::SinceLift => calls,
            TierCount::Run if mark > 0 => mark,
            TierCount::Run => match self.due_at() {
                Some(due) if calls >= due => calls.max(1),
                _ => 0,
            },
        }
    }

    /// How the texts name it: `the checkpoint tier` or `tier 2` (1-based).
    pub fn label(&self, index: usize) -> String {
        match &self.name {
            Some(name) => format!("the {name} tier"),
            None => format!("tier {}", index.saturating_add(1)),
        }
    }
}

/// Per tier of a tool's budget, its mark: the tool's calls at the tier's last lift (0: never
/// lifted). In the ledger's record of the tool; absent from the JSON form while all are 0.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct TierMarks(pub [u32; MAX_TIERS]);

impl TierMarks {
    /// Whether no tier was ever lifted.
    #[allow(clippy::trivially_copy_pass_by_ref)] // serde's `skip_serializing_if` passes a reference
    pub fn is_clear(&self) -> bool {
        self.0.iter().all(|&m| m == 0)
    }

    /// The mark of tier `index` (0 past [`MAX_TIERS`]).
    #[inline]
    pub fn get(&self, index: usize) -> u32 {
        self.0.get(index).copied().unwrap_or(0)
    }
}

impl Serialize for TierMarks {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        // As a list up to the last mark set: `[0, 9]`.
        let len = self.0.iter().rposition(|&m| m > 0).map_or(0, |i| i + 1);
        serializer.collect_seq(&self.0[..len])
    }
}

impl<'de> Deserialize<'de> for TierMarks {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<TierMarks, D::Error> {
        let marks = Vec::<u32>::deserialize(deserializer)?;
        if marks.len() > MAX_TIERS {
            return Err(serde::de::Error::custom(format!(
                "{} tier marks, a budget has at most {MAX_TIERS} tiers",
                marks.len()
            )));
        }
        let mut out = [0; MAX_TIERS];
        out[..marks.len()].copy_from_slice(&marks);
        Ok(TierMarks(out))
    }
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

/// The catalog row of a tier's bound, beside [`TOOL_BOUNDS`]: what its `block_at` counts and
/// what lifts it (the numbers are each tier's own, [`Tier`]).
#[derive(Debug, Clone, Copy)]
pub struct TierBound {
    /// Its field of a tool's budget.
    pub field: &'static str,
    /// What it counts, in words.
    pub counts: &'static str,
    /// What lifts it, in words.
    pub lifted: &'static str,
}

/// A tier's block: from its `block_at`, calls are refused until a lift.
pub const TIER_BLOCK_AT: TierBound = TierBound {
    field: "tiers[i].block_at",
    counts: "calls in the whole run (`count: run`, the default) or since the tier's last lift \
             (`count: since_lift`)",
    lifted: "by a successful call of a tool in the tier's `reset_on`; counted over the run, a \
             tier so lifted once due is passed for the rest of the run",
};

impl ToolBudget {
    /// Every threshold of the budget, in no particular order: `warn_at`, `block_at`,
    /// `hard_block_at` and each tier's `warn_at` and `block_at`.
    pub fn thresholds(&self) -> impl Iterator<Item = u32> + '_ {
        let single = [self.warn_at, self.block_at, self.hard_block_at];
        let tiers = self.tiers.iter().flat_map(|t| [t.warn_at, t.block_at]);
        single.into_iter().chain(tiers).flatten()
    }

    /// The budget with every threshold `by` calls later (the warning ranges keep their width).
    pub(crate) fn shifted(&self, by: u32) -> ToolBudget {
        let later = |n: Option<u32>| n.map(|n| n.saturating_add(by));
        ToolBudget {
            warn_at: later(self.warn_at),
            block_at: later(self.block_at),
            hard_block_at: later(self.hard_block_at),
            reset_on: self.reset_on.clone(),
            tiers: self
                .tiers
                .iter()
                .map(|t| Tier {
                    warn_at: later(t.warn_at),
                    block_at: later(t.block_at),
                    ..t.clone()
                })
                .collect(),
        }
    }
}
