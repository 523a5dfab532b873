//! [`Policy::validate`]: whether a policy can be run, naming the field at fault. Each run-wide
//! limit's smallest value is a column of its catalog row ([`crate::catalog::Limit::min`]); the
//! rest (per-tool settings, the repeat detector's window, backoff, tool budgets and their tiers,
//! the budget scale) is checked here. Above the policy, the catalog and the scale in the module
//! graph, so none of them depends on another in a circle.

use crate::catalog;
use crate::loops::MAX_LOOP_PERIOD;
use crate::policy::{Policy, PolicyError};
use crate::tool_budget::{self, ToolBudget};

impl Policy {
    /// Checks that every limit can be run: each run-wide limit at least its catalog row's `min`
    /// (1 for an occurrence limit, 2 for `max_repeats` and `max_polls`), the per-tool failure
    /// limit and the repeat detector's window at least 1, backoff bounds ordered, tool budgets
    /// ordered, the budget scale consistent.
    pub fn validate(&self) -> Result<(), PolicyError> {
        let at_least = |field: &str, value: u64, min: u64| -> Result<(), PolicyError> {
            if value < min {
                return Err(PolicyError {
                    field: field.to_owned(),
                    problem: format!("must be at least {min}, got {value}"),
                });
            }
            Ok(())
        };
        for limit in catalog::ALL {
            if let Some(value) = limit.value(self) {
                at_least(limit.field, value, limit.min)?;
            }
        }
        at_least("max_tool_failures", u64::from(self.max_tool_failures), 1)?;
        at_least("max_loop_period", u64::from(self.max_loop_period), 1)?;
        if self.pollers.iter().any(|t| t.trim().is_empty()) {
            return Err(PolicyError {
                field: "pollers".into(),
                problem: "must name tools (an empty name)".into(),
            });
        }
        if self.max_loop_period > MAX_LOOP_PERIOD {
            return Err(PolicyError {
                field: "max_loop_period".into(),
                problem: format!(
                    "must be at most {MAX_LOOP_PERIOD}, got {}",
                    self.max_loop_period
                ),
            });
        }
        if let Some(schema) = &self.output_schema
            && !(schema.is_object() || schema.is_boolean())
        {
            return Err(PolicyError {
                field: "output_schema".into(),
                problem: "must be a JSON Schema (an object or a boolean)".into(),
            });
        }
        if self.retry_max_ms < self.retry_base_ms {
            return Err(PolicyError {
                field: "retry_max_ms".into(),
                problem: format!("must be at least retry_base_ms ({})", self.retry_base_ms),
            });
        }
        for (tool, budget) in &self.tool_budgets {
            for bound in tool_budget::TOOL_BOUNDS {
                let Some(at) = (bound.limit)(budget) else {
                    continue;
                };
                if at == 0 {
                    return Err(PolicyError {
                        field: format!("tool_budgets.{tool}.{}", bound.field),
                        problem: "must be at least 1".into(),
                    });
                }
                if let Some(w) = budget.warn_at
                    && w > at
                {
                    return Err(PolicyError {
                        field: format!("tool_budgets.{tool}.warn_at"),
                        problem: format!("must not exceed {} ({at})", bound.field),
                    });
                }
            }
            if budget.reset_on.iter().any(|t| t.trim().is_empty()) {
                return Err(PolicyError {
                    field: format!("tool_budgets.{tool}.reset_on"),
                    problem: "must name tools (an empty name)".into(),
                });
            }
            validate_tiers(tool, budget)?;
        }
        if let Some(scale) = &self.budget_scale {
            scale.validate(self)?;
        }
        Ok(())
    }
}

/// Checks the tiers of `tool`'s budget, naming the field at fault
/// (`tool_budgets.read_file.tiers[1].warn_at`).
fn validate_tiers(tool: &str, budget: &ToolBudget) -> Result<(), PolicyError> {
    let at = |field: &str, problem: String| PolicyError {
        field: format!("tool_budgets.{tool}.{field}"),
        problem,
    };
    if budget.tiers.is_empty() {
        return Ok(());
    }
    if budget.tiers.len() > tool_budget::MAX_TIERS {
        return Err(at(
            "tiers",
            format!(
                "{} tiers, at most {}",
                budget.tiers.len(),
                tool_budget::MAX_TIERS
            ),
        ));
    }
    let single = [
        ("warn_at", budget.warn_at.is_some()),
        ("block_at", budget.block_at.is_some()),
        ("hard_block_at", budget.hard_block_at.is_some()),
        ("reset_on", !budget.reset_on.is_empty()),
    ];
    if let Some((key, _)) = single.iter().find(|(_, set)| *set) {
        return Err(at(
            key,
            "a budget with tiers sets its bounds in its tiers, not beside them".into(),
        ));
    }
    for (i, tier) in budget.tiers.iter().enumerate() {
        let field = |name: &str| format!("tiers[{i}].{name}");
        if tier.warn_at.is_none() && tier.block_at.is_none() {
            return Err(at(
                &format!("tiers[{i}]"),
                "a tier needs warn_at or block_at".into(),
            ));
        }
        for (name, value) in [("warn_at", tier.warn_at), ("block_at", tier.block_at)] {
            if value == Some(0) {
                return Err(at(&field(name), "must be at least 1".into()));
            }
        }
        if let (Some(w), Some(b)) = (tier.warn_at, tier.block_at)
            && w > b
        {
            return Err(at(
                &field("warn_at"),
                format!("must not exceed block_at ({b})"),
            ));
        }
        if tier.reset_on.iter().any(|t| t.trim().is_empty()) {
            return Err(at(
                &field("reset_on"),
                "must name tools (an empty name)".into(),
            ));
        }
        let blank = |text: &Option<String>| text.as_deref().is_some_and(|t| t.trim().is_empty());
        if blank(&tier.name) {
            return Err(at(&field("name"), "must not be empty".into()));
        }
        if blank(&tier.warning) {
            return Err(at(&field("warning"), "must not be empty".into()));
        }
    }
    Ok(())
}
