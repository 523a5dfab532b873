//! Budget warnings: a run that passes 80 % of a budget says so once per budget, as a progress
//! line, a span event and a report field, before the budget stops it. A per-tool budget
//! (`tool_budgets.NAME.warn_at` / `block_at`) that warns about a call or refuses one does the
//! same ([`ToolBudgetEvent`]), besides telling the model.

use serde::{Deserialize, Serialize};
use std::fmt;
use terminus_kernel::catalog::{WARNINGS, Warning};
use terminus_kernel::{BlockedBy, Exclusion, Ledger, Policy, Stats, ToolBatch};

/// A budget a run can spend and is warned about at 80 %: one of the kernel's stop catalog
/// ([`terminus_kernel::catalog::WARNINGS`]), which says which budgets warn and in what order.
/// In JSON, its name (`steps`, `model_calls`, `tokens`, `deadline`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Budget(u8);

impl Budget {
    /// Every budget, in the order warnings are checked.
    pub fn all() -> impl Iterator<Item = Budget> {
        (0..WARNINGS.len()).filter_map(|i| u8::try_from(i).ok().map(Budget))
    }

    /// The budget named `name`.
    pub fn named(name: &str) -> Option<Budget> {
        Budget::all().find(|b| b.as_str() == name)
    }

    fn row(self) -> &'static Warning {
        &WARNINGS[usize::from(self.0) % WARNINGS.len()]
    }

    /// The snake_case name.
    pub fn as_str(self) -> &'static str {
        self.row().name
    }

    /// The policy field that sets it.
    pub fn limit_name(self) -> &'static str {
        self.row().field()
    }

    /// What is spent and its limit, if the policy sets one.
    pub fn spent(self, policy: &Policy, stats: &Stats, elapsed_ms: u64) -> Option<(u64, u64)> {
        self.row().spent(policy, stats, elapsed_ms)
    }

    fn bit(self) -> u32 {
        1 << self.0
    }
}

/// Where each budget the policy sets stands, by name (`steps`, `tokens`, `output_tokens`,
/// `deadline`, ...): `{limit_field, spent, limit, left}`, the `budgets` of `terminus serve`'s
/// AG-UI state and of the Python `agui` module's. Without `elapsed_ms` (a host that does not
/// know when the run started) the deadline is left out.
pub fn budgets_state(
    policy: &Policy,
    stats: &Stats,
    elapsed_ms: Option<u64>,
) -> serde_json::Map<String, serde_json::Value> {
    let mut budgets = serde_json::Map::new();
    for budget in Budget::all() {
        let clock = budget.row().limit().is_none();
        let Some(elapsed_ms) = elapsed_ms.or((!clock).then_some(0)) else {
            continue;
        };
        if let Some((spent, limit)) = budget.spent(policy, stats, elapsed_ms) {
            budgets.insert(
                budget.as_str().to_owned(),
                serde_json::json!({
                    "limit_field": budget.limit_name(),
                    "spent": spent,
                    "limit": limit,
                    "left": limit.saturating_sub(spent),
                }),
            );
        }
    }
    budgets
}

impl Serialize for Budget {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for Budget {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Budget, D::Error> {
        let name = String::deserialize(d)?;
        Budget::named(&name).ok_or_else(|| {
            let names: Vec<&str> = WARNINGS.iter().map(|w| w.name).collect();
            serde::de::Error::custom(format!(
                "unknown budget `{name}`, expected one of {}",
                names.join(", ")
            ))
        })
    }
}

/// A budget that passed [`WARN_PERCENT`] of its limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct BudgetWarning {
    /// Which budget.
    pub budget: Budget,
    /// What was spent when the warning was given.
    pub used: u64,
    /// The limit.
    pub limit: u64,
    /// The step after which it was given.
    pub step: u32,
}

impl fmt::Display for BudgetWarning {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} % of {} spent ({} of {}) after step {}",
            percent(self.used, self.limit),
            self.budget.limit_name(),
            self.used,
            self.limit,
            self.step
        )
    }
}

/// The share of a budget at which a warning is given.
pub const WARN_PERCENT: u64 = 80;

fn percent(used: u64, limit: u64) -> u64 {
    used.saturating_mul(100).checked_div(limit).unwrap_or(100)
}

/// Which budgets have been warned about (each once per run). A host that drives the machine
/// itself keeps one per run (it is saved with the run's snapshot).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(transparent)]
pub struct Warned(u32);

impl Warned {
    /// The warnings due after `step`: budgets at or past 80 % not yet warned about. A budget
    /// that is spent whole is the stop's business, not a warning's.
    pub fn check(&mut self, policy: &Policy, stats: &Stats, elapsed_ms: u64) -> Vec<BudgetWarning> {
        let step = stats.steps;
        let mut due = Vec::new();
        for budget in Budget::all() {
            if self.0 & budget.bit() != 0 {
                continue;
            }
            let Some((used, limit)) = budget.spent(policy, stats, elapsed_ms) else {
                continue;
            };
            if used.saturating_mul(100) < limit.saturating_mul(WARN_PERCENT) || used >= limit {
                continue;
            }
            self.0 |= budget.bit();
            due.push(BudgetWarning {
                budget,
                used,
                limit,
                step,
            });
        }
        due
    }
}

/// What a per-tool budget did to one call: warned about it (`warn_at`) or refused it
/// (`block_at`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ToolBudgetKind {
    /// The call ran, its result carrying the kernel's warning.
    Warn,
    /// The call was refused: the budget is spent and the tool excluded until a reset.
    Block,
}

impl ToolBudgetKind {
    /// `warn` or `block`.
    pub const fn as_str(self) -> &'static str {
        match self {
            ToolBudgetKind::Warn => "warn",
            ToolBudgetKind::Block => "block",
        }
    }
}

/// A per-tool budget's warning or block of one call, as the model was told it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ToolBudgetEvent {
    /// The tool.
    pub tool: String,
    /// `warn` or `block`.
    pub kind: ToolBudgetKind,
    /// The call's number for its tool since the budget's last reset (1-based); for a refused
    /// call, the value of the bound that refused it.
    pub call: u32,
    /// The budget's `block_at`, if it sets one; for a block, the value of the bound that refused
    /// the call.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub block_at: Option<u32>,
    /// For a block by a bound that no reset lifts (`hard_block_at`), its field; the call is then
    /// numbered as that bound counts, over the whole run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bound: Option<String>,
    /// For a budget with tiers, the tier that warned or refused (`tiers[i]`, 0-based); the call
    /// is then numbered as that tier counts it (for a block too: the refused call's number).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tier: Option<u8>,
    /// The step of the model turn that made the call.
    pub step: u32,
}

impl fmt::Display for ToolBudgetEvent {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "tool budget of {}: call {} ", self.tool, self.call)?;
        match (self.kind, self.block_at) {
            (ToolBudgetKind::Warn, Some(block_at)) => {
                write!(f, "warned (calls are refused from {block_at})")?;
            }
            (ToolBudgetKind::Warn, None) => f.write_str("warned")?,
            (ToolBudgetKind::Block, Some(at)) => match (self.tier, self.bound.as_deref()) {
                (Some(tier), _) => write!(f, "refused (tiers[{tier}].block_at {at})")?,
                (None, bound) => write!(f, "refused ({} {at})", bound.unwrap_or("block_at"))?,
            },
            (ToolBudgetKind::Block, None) => f.write_str("refused")?,
        }
        write!(f, " at step {}", self.step)
    }
}

/// The warnings and blocks of per-tool budgets in the tool batch issued at step `step`, in call
/// order. A call refused because its tool is excluded for another reason (failures) is not a
/// budget's.
pub fn tool_budget_events(step: u32, batch: &ToolBatch) -> Vec<ToolBudgetEvent> {
    if batch.warnings.is_empty() && batch.refused.is_empty() {
        return Vec::new();
    }
    let mut out = Vec::new();
    for (i, call) in batch.calls.iter().enumerate() {
        let event = if let Some(Exclusion::Budget(block)) = batch.refusal(i) {
            ToolBudgetEvent {
                tool: call.name.to_string(),
                kind: ToolBudgetKind::Block,
                call: match block.by {
                    BlockedBy::Tier { call, .. } => call,
                    BlockedBy::Bound(_) => block.at,
                },
                block_at: Some(block.at),
                bound: match block.by {
                    BlockedBy::Bound(bound) => (!bound.resets).then(|| bound.field.to_owned()),
                    BlockedBy::Tier { .. } => None,
                },
                tier: block.tier().and_then(|t| u8::try_from(t).ok()),
                step,
            }
        } else if let Some(w) = batch.warning(i) {
            ToolBudgetEvent {
                tool: call.name.to_string(),
                kind: ToolBudgetKind::Warn,
                call: w.call,
                block_at: w.block_at,
                bound: None,
                tier: w.tier,
                step,
            }
        } else {
            continue;
        };
        out.push(event);
    }
    out
}

/// Where each per-tool budget of `policy` stands in `ledger`, by tool (`terminus serve`'s state,
/// `tool_budgets`): the tool's calls and refusals; for the single-tier form, the calls its
/// bounds count since the last reset, its bounds and what lifts them; for tiers, each tier's
/// count (`null` once passed), bounds and what lifts it.
pub fn tool_budget_state(policy: &Policy, ledger: &Ledger) -> serde_json::Value {
    let mut out = serde_json::Map::new();
    for (tool, budget) in &policy.tool_budgets {
        let record = ledger.get(tool).copied().unwrap_or_default();
        let mut state = serde_json::json!({ "calls": record.calls, "refused": record.refused });
        if budget.tiers.is_empty() {
            state["counted"] = record.budget_calls().into();
            state["warn_at"] = budget.warn_at.into();
            state["block_at"] = budget.block_at.into();
            state["hard_block_at"] = budget.hard_block_at.into();
            state["lifted_by"] = budget.reset_on.clone().into();
        } else {
            let tiers: Vec<serde_json::Value> = budget
                .tiers
                .iter()
                .enumerate()
                .map(|(i, tier)| {
                    let counted = tier.count(record.calls, record.tier_marks.get(i));
                    serde_json::json!({
                        "name": tier.label(i),
                        "counted": counted,
                        "passed": counted.is_none(),
                        "warn_at": tier.warn_at,
                        "block_at": tier.block_at,
                        "lifted_by": tier.reset_on,
                    })
                })
                .collect();
            state["tiers"] = tiers.into();
        }
        out.insert(tool.clone(), state);
    }
    out.into()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_tier_shows_its_count_until_it_is_passed_and_what_lifts_it() {
        let policy: Policy = serde_json::from_value(serde_json::json!({ "tool_budgets": {
            "read_file": { "tiers": [
                { "name": "checkpoint", "warn_at": 8, "block_at": 10, "reset_on": ["post_checkpoint"] },
                { "warn_at": 13, "block_at": 14, "reset_on": ["post_plan"] }
            ] },
            "grep": { "warn_at": 2, "block_at": 4, "reset_on": ["post_checkpoint"] }
        } }))
        .unwrap_or_default();
        // Nine reads, the checkpoint posted after the ninth; one refused read; two greps since
        // a reset at the first.
        let ledger: Ledger = serde_json::from_value(serde_json::json!({
            "read_file": { "calls": 9, "successes": 9, "failures": 0, "refused": 1,
                           "excluded": null, "tier_marks": [9] },
            "grep": { "calls": 3, "successes": 3, "failures": 0, "refused": 0,
                      "excluded": null, "budget_base": 1 }
        }))
        .unwrap_or_default();
        assert_eq!(
            tool_budget_state(&policy, &ledger),
            serde_json::json!({
                "grep": { "calls": 3, "refused": 0, "counted": 2, "warn_at": 2, "block_at": 4,
                          "hard_block_at": null, "lifted_by": ["post_checkpoint"] },
                "read_file": { "calls": 9, "refused": 1, "tiers": [
                    { "name": "the checkpoint tier", "counted": null, "passed": true,
                      "warn_at": 8, "block_at": 10, "lifted_by": ["post_checkpoint"] },
                    { "name": "tier 2", "counted": 9, "passed": false,
                      "warn_at": 13, "block_at": 14, "lifted_by": ["post_plan"] }
                ] }
            })
        );
    }

    fn stats(steps: u32, model_calls: u32, tokens: u64) -> Stats {
        let mut stats = Stats::default();
        stats.steps = steps;
        stats.model_calls = model_calls;
        stats.input_tokens = tokens;
        stats
    }

    #[test]
    fn each_budget_warns_once_between_80_percent_and_its_limit() {
        let policy = Policy {
            max_steps: 10,
            max_model_calls: 5,
            token_budget: Some(1000),
            deadline_ms: Some(2000),
            ..Policy::default()
        };
        let mut warned = Warned::default();
        assert_eq!(warned.check(&policy, &stats(7, 3, 799), 1599).len(), 0);
        let first = warned.check(&policy, &stats(8, 4, 800), 1600);
        assert_eq!(
            first.iter().map(|w| w.budget.as_str()).collect::<Vec<_>>(),
            ["steps", "model_calls", "tokens", "deadline"]
        );
        assert_eq!(
            first[0],
            BudgetWarning {
                budget: Budget::named("steps").expect("a budget"),
                used: 8,
                limit: 10,
                step: 8
            }
        );
        assert_eq!(
            first[0].to_string(),
            "80 % of max_steps spent (8 of 10) after step 8"
        );
        assert_eq!(warned.check(&policy, &stats(9, 4, 900), 1700).len(), 0);
    }

    #[test]
    fn a_budget_spent_whole_at_once_is_the_stop_not_a_warning() {
        let policy = Policy {
            max_model_calls: 5,
            ..Policy::default()
        };
        let mut warned = Warned::default();
        let budgets: Vec<_> = warned
            .check(&policy, &stats(1, 5, 0), 0)
            .into_iter()
            .map(|w| w.budget)
            .collect();
        assert!(!budgets.contains(&Budget::named("model_calls").expect("a budget")));
    }

    #[test]
    fn budgets_the_policy_does_not_set_never_warn() {
        let policy = Policy {
            token_budget: None,
            deadline_ms: None,
            ..Policy::default()
        };
        let mut warned = Warned::default();
        let budgets: Vec<_> = warned
            .check(&policy, &stats(0, 0, u64::MAX), u64::MAX)
            .into_iter()
            .map(|w| w.budget)
            .collect();
        assert!(budgets.is_empty(), "{budgets:?}");
    }

    #[test]
    fn the_state_lists_the_budgets_the_policy_sets_and_the_deadline_only_with_a_clock() {
        let policy = Policy {
            token_budget: Some(1_000),
            max_output_tokens: Some(100),
            deadline_ms: Some(60_000),
            ..Policy::default()
        };
        let mut s = stats(4, 3, 0);
        s.input_tokens = 700;
        s.output_tokens = 120;
        let state = budgets_state(&policy, &s, Some(1_500));
        let mut names: Vec<&str> = state.keys().map(String::as_str).collect();
        names.sort_unstable();
        assert_eq!(
            names,
            [
                "deadline",
                "model_calls",
                "output_tokens",
                "steps",
                "tokens"
            ]
        );
        assert_eq!(
            state["output_tokens"],
            serde_json::json!({"limit_field": "max_output_tokens", "spent": 120, "limit": 100, "left": 0})
        );
        assert_eq!(state["tokens"]["spent"], 820);
        assert_eq!(state["deadline"]["spent"], 1_500);
        let unclocked = budgets_state(&policy, &s, None);
        assert!(!unclocked.contains_key("deadline"));
        assert_eq!(unclocked.len(), 4);
        // A budget the policy leaves unlimited is not listed.
        let plain = budgets_state(&Policy::default(), &s, Some(10));
        let mut names: Vec<&str> = plain.keys().map(String::as_str).collect();
        names.sort_unstable();
        assert_eq!(names, ["model_calls", "steps"]);
    }

    #[test]
    fn a_budget_is_its_name_in_json() {
        let steps = Budget::named("steps").expect("a budget");
        assert_eq!(
            serde_json::to_string(&steps).ok().as_deref(),
            Some("\"steps\"")
        );
        let back: Budget = serde_json::from_str("\"deadline\"").expect("a budget name");
        assert_eq!(back.limit_name(), "deadline_ms");
        let err = serde_json::from_str::<Budget>("\"bogus\"").expect_err("no such budget");
        assert!(err.to_string().contains("unknown budget `bogus`"), "{err}");
    }
}
