//! Budgets scaled to the task (`policy.budget_scale`): a run over many files needs more steps
//! than a run over one, and a policy written for one size either starves the large task or
//! leaves the small one unbounded. The host says how large the task is (a number of units: the
//! files in scope, say) and each scaled budget becomes `base + per_unit × units`, never above
//! its `max`.
//!
//! Scaling happens once, when the run is created ([`Policy::scaled`]): the scaled policy, with
//! the units that made it, is what the run keeps (the runtime stores it with the execution), so
//! a resume reads the same numbers and never scales again, and a raise starts from them.

use crate::catalog::{self, Limit, Slot};
use crate::policy::{BudgetScale, Policy, PolicyError};

/// A [`PolicyError`] at `budget_scale.<path>`.
fn at(path: &str, problem: String) -> PolicyError {
    PolicyError {
        field: format!("budget_scale.{path}"),
        problem,
    }
}

/// The largest value the limit's field holds.
fn range(limit: &Limit) -> u64 {
    match limit.slot {
        Slot::Count(..) | Slot::MaybeCount(..) => u64::from(u32::MAX),
        Slot::MaybeAmount(..) => u64::MAX,
    }
}

/// The scalable budget named `field` under `path`, or why there is none.
fn budget(path: &str, field: &str) -> Result<&'static Limit, PolicyError> {
    catalog::scalable(field).ok_or_else(|| {
        let names: Vec<&str> = catalog::budgets().iter().map(|l| l.field).collect();
        let what = if catalog::ALL.iter().any(|l| l.field == field) {
            "a limit, not a budget that grows with the task"
        } else {
            "unknown budget"
        };
        at(
            &format!("{path}.{field}"),
            format!("{what} (one of {}, or tool_budgets.NAME)", names.join(", ")),
        )
    })
}

/// The prefix of a per-tool budget's key in `per_unit` and `max`: `tool_budgets.read_file`.
const TOOL_BUDGETS: &str = "tool_budgets.";

/// The tool of a per-tool budget's key, if it is one.
fn tool_of(field: &str) -> Option<&str> {
    field.strip_prefix(TOOL_BUDGETS)
}

/// The largest threshold of the budget of `tool` in `policy`, or why it cannot scale.
fn largest(policy: &Policy, path: &str, tool: &str) -> Result<u32, PolicyError> {
    policy
        .tool_budgets
        .get(tool)
        .and_then(|b| b.thresholds().max())
        .ok_or_else(|| {
            at(
                path,
                format!("scales the budget of `{tool}`, which tool_budgets does not bound"),
            )
        })
}

impl BudgetScale {
    /// Checks a per-tool budget's scale (`per_unit.tool_budgets.NAME`).
    fn validate_tool(
        &self,
        policy: &Policy,
        field: &str,
        tool: &str,
        per: u64,
    ) -> Result<(), PolicyError> {
        let path = format!("per_unit.{field}");
        if per > u64::from(u32::MAX) {
            return Err(at(
                &path,
                format!("{per} is out of range (at most {})", u32::MAX),
            ));
        }
        let top = largest(policy, &path, tool)?;
        let Some(&cap) = self.max.get(field) else {
            return Err(at(
                "max",
                format!("has no bound for {field}: every scaled budget needs one"),
            ));
        };
        if cap > u64::from(u32::MAX) {
            return Err(at(
                &format!("max.{field}"),
                format!("{cap} is out of range (at most {})", u32::MAX),
            ));
        }
        if self.units.is_none() && cap < u64::from(top) {
            return Err(at(
                &format!("max.{field}"),
                format!("must be at least the budget's largest threshold ({top}), got {cap}"),
            ));
        }
        Ok(())
    }

    /// Checks the scale against `policy`, naming the field at fault.
    pub(crate) fn validate(&self, policy: &Policy) -> Result<(), PolicyError> {
        for (field, &per) in &self.per_unit {
            if let Some(tool) = tool_of(field) {
                self.validate_tool(policy, field, tool, per)?;
                continue;
            }
            let limit = budget("per_unit", field)?;
            let path = format!("per_unit.{field}");
            if per > range(limit) {
                return Err(at(
                    &path,
                    format!("{per} is out of range (at most {})", range(limit)),
                ));
            }
            let Some(base) = limit.value(policy) else {
                return Err(at(
                    &path,
                    format!("scales {field}, which the policy leaves unlimited: set {field}"),
                ));
            };
            let Some(&cap) = self.max.get(field) else {
                return Err(at(
                    "max",
                    format!("has no bound for {field}: every scaled budget needs one"),
                ));
            };
            if self.units.is_none() && cap < base {
                return Err(at(
                    &format!("max.{field}"),
                    format!("must be at least {field} ({base}), the budget it scales, got {cap}"),
                ));
            }
        }
        for (field, &cap) in &self.max {
            if tool_of(field).is_some() {
                if !self.per_unit.contains_key(field) {
                    return Err(at(
                        &format!("max.{field}"),
                        "bounds a budget that per_unit does not scale".into(),
                    ));
                }
                continue; // checked with its per_unit
            }
            let limit = budget("max", field)?;
            let path = format!("max.{field}");
            if !self.per_unit.contains_key(field) {
                return Err(at(
                    &path,
                    "bounds a budget that per_unit does not scale".into(),
                ));
            }
            if cap > range(limit) {
                return Err(at(
                    &path,
                    format!("{cap} is out of range (at most {})", range(limit)),
                ));
            }
        }
        Ok(())
    }
}

/// Why a host's size could not scale a policy ([`Policy::scaled_to`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ScaleError {
    /// The policy has no `budget_scale`: the size would change nothing. The host names its own
    /// field (`scale`, `--scale`, `$.scale`), with [`ScaleError::NOTHING`].
    Nothing,
    /// The policy refused the size (its `budget_scale` is wrong, or scaled for other units).
    Policy(PolicyError),
}

impl ScaleError {
    /// What every host says when a size scales nothing.
    pub const NOTHING: &str = "scales nothing: the policy has no budget_scale";
}

impl std::fmt::Display for ScaleError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ScaleError::Nothing => f.write_str(ScaleError::NOTHING),
            ScaleError::Policy(e) => e.fmt(f),
        }
    }
}

impl std::error::Error for ScaleError {}

impl Policy {
    /// The policy for a task of `units` a host was given (`--scale`, a scenario's `"scale"`,
    /// the bindings' `scale`): [`Policy::scaled`], but a policy with no `budget_scale` is
    /// refused ([`ScaleError::Nothing`]), since the size the host was given would change
    /// nothing. The one place this is decided, for every host.
    pub fn scaled_to(&self, units: u64) -> Result<Policy, ScaleError> {
        if self.budget_scale.is_none() {
            return Err(ScaleError::Nothing);
        }
        self.scaled(units).map_err(ScaleError::Policy)
    }

    /// The policy for a task of `units` (the files in scope, or any number the host passes):
    /// each budget of `budget_scale` becomes `base + per_unit × units`, capped at its `max`,
    /// and `budget_scale.units` records `units`. Pure and deterministic. A policy without
    /// `budget_scale` is returned as it is; one already scaled for `units` too (so a host that
    /// scales twice changes nothing), and one scaled for other units is refused: its base is
    /// gone, and a run keeps the budgets it was created with.
    pub fn scaled(&self, units: u64) -> Result<Policy, PolicyError> {
        self.validate()?;
        let Some(scale) = &self.budget_scale else {
            return Ok(self.clone());
        };
        if let Some(done) = scale.units {
            if done == units {
                return Ok(self.clone());
            }
            return Err(at(
                "units",
                format!("the budgets are scaled for {done} units already, not {units}"),
            ));
        }
        let mut out = self.clone();
        for (field, &per) in &scale.per_unit {
            if let Some(tool) = tool_of(field) {
                let (Some(budget), Some(&cap)) =
                    (self.tool_budgets.get(tool), scale.max.get(field))
                else {
                    continue; // validated: a scaled tool has a budget and a bound
                };
                // Every threshold moves by the same calls, until the largest reaches the bound.
                let top = u64::from(budget.thresholds().max().unwrap_or(0));
                let room = cap.saturating_sub(top);
                let by = per.checked_mul(units).map_or(room, |grow| grow.min(room));
                let by = u32::try_from(by).unwrap_or(u32::MAX);
                out.tool_budgets.insert(tool.to_owned(), budget.shifted(by));
                continue;
            }
            let limit = budget("per_unit", field)?;
            let (Some(base), Some(&cap)) = (limit.value(self), scale.max.get(field)) else {
                continue; // validated: every scaled budget has a base and a bound
            };
            // Past u64 the exact value is above any bound, so it is the bound.
            let value = per
                .checked_mul(units)
                .and_then(|grow| grow.checked_add(base))
                .map_or(cap, |v| v.min(cap));
            limit.set(&mut out, value)?;
        }
        if let Some(scale) = &mut out.budget_scale {
            scale.units = Some(units);
        }
        Ok(out)
    }
}
