//! `policy.budget_scale`: budgets scaled to the task's size, within their hard bounds.

use proptest::prelude::*;
use terminus_kernel::{Policy, PolicyError, ScaleError, catalog};

/// A policy that scales steps and model calls, from JSON as a host writes it.
fn scaling(json: &str) -> Result<Policy, String> {
    let policy: Policy = serde_json::from_str(json).map_err(|e| e.to_string())?;
    policy.validate().map_err(|e| e.to_string())?;
    Ok(policy)
}

const STEPS: &str = r#"{
    "max_steps": 10,
    "max_model_calls": 5,
    "budget_scale": {
        "per_unit": { "max_steps": 4, "max_model_calls": 2 },
        "max": { "max_steps": 30, "max_model_calls": 1000 }
    }
}"#;

fn error(json: &str) -> String {
    scaling(json).expect_err("refused")
}

#[test]
fn units_add_per_unit_up_to_the_bound() {
    let policy = scaling(STEPS).expect("valid");
    let at = |units: u64| {
        let p = policy.scaled(units).expect("scales");
        (
            p.max_steps,
            p.max_model_calls,
            p.budget_scale.and_then(|s| s.units),
        )
    };
    assert_eq!(at(0), (10, 5, Some(0)));
    assert_eq!(at(3), (22, 11, Some(3)));
    assert_eq!(at(5), (30, 15, Some(5)), "steps capped at their max");
    assert_eq!(
        at(u64::MAX),
        (30, 1000, Some(u64::MAX)),
        "no overflow past the bound"
    );
}

#[test]
fn a_scaled_policy_keeps_its_budgets() {
    let once = scaling(STEPS).expect("valid").scaled(2).expect("scales");
    assert_eq!(
        once.scaled(2),
        Ok(once.clone()),
        "the same units change nothing"
    );
    assert_eq!(
        once.scaled(3),
        Err(PolicyError {
            field: "budget_scale.units".into(),
            problem: "the budgets are scaled for 2 units already, not 3".into(),
        })
    );
    let json = serde_json::to_string(&once).expect("serializes");
    let back: Policy = serde_json::from_str(&json).expect("parses");
    assert_eq!(
        back, once,
        "the units and the scaled budgets survive the JSON form"
    );
    assert_eq!(back.validate(), Ok(()));
}

#[test]
fn a_policy_without_a_scale_is_unchanged_and_keeps_its_json() {
    let policy = Policy::default();
    assert_eq!(policy.scaled(7), Ok(policy.clone()));
    let json = serde_json::to_string(&policy).expect("serializes");
    assert!(!json.contains("budget_scale"), "{json}");
    // A host given a size refuses it: it would scale nothing (every host says so the same way).
    assert_eq!(policy.scaled_to(7), Err(ScaleError::Nothing));
    assert_eq!(
        ScaleError::Nothing.to_string(),
        "scales nothing: the policy has no budget_scale"
    );
    let scaling = scaling(STEPS).expect("valid");
    assert_eq!(
        scaling.scaled_to(3),
        scaling.scaled(3).map_err(ScaleError::Policy)
    );
    let twice = scaling.scaled(2).expect("scales").scaled_to(3);
    assert!(matches!(twice, Err(ScaleError::Policy(e)) if e.field == "budget_scale.units"));
}

#[test]
fn bad_scales_name_the_field() {
    let cases = [
        (
            r#"{"budget_scale":{"per_unit":{"max_stepz":1},"max":{"max_stepz":9}}}"#,
            "policy.budget_scale.per_unit.max_stepz: unknown budget (one of max_steps, \
             token_budget, max_output_tokens, max_model_calls, max_tool_calls, or \
             tool_budgets.NAME)",
        ),
        (
            r#"{"budget_scale":{"per_unit":{"max_no_ops":1},"max":{"max_no_ops":9}}}"#,
            "policy.budget_scale.per_unit.max_no_ops: a limit, not a budget that grows with the \
             task (one of max_steps, token_budget, max_output_tokens, max_model_calls, \
             max_tool_calls, or tool_budgets.NAME)",
        ),
        (
            r#"{"budget_scale":{"per_unit":{"max_steps":1}}}"#,
            "policy.budget_scale.max: has no bound for max_steps: every scaled budget needs one",
        ),
        (
            r#"{"budget_scale":{"per_unit":{"max_steps":1},"max":{"max_steps":100}}}"#,
            "policy.budget_scale.max.max_steps: must be at least max_steps (200), the budget it \
             scales, got 100",
        ),
        (
            r#"{"budget_scale":{"per_unit":{"max_steps":1},"max":{"max_steps":4294967296}}}"#,
            "policy.budget_scale.max.max_steps: 4294967296 is out of range (at most 4294967295)",
        ),
        (
            r#"{"budget_scale":{"per_unit":{"max_steps":4294967296},"max":{"max_steps":300}}}"#,
            "policy.budget_scale.per_unit.max_steps: 4294967296 is out of range (at most \
             4294967295)",
        ),
        (
            r#"{"budget_scale":{"per_unit":{"token_budget":100},"max":{"token_budget":900}}}"#,
            "policy.budget_scale.per_unit.token_budget: scales token_budget, which the policy \
             leaves unlimited: set token_budget",
        ),
        (
            r#"{"budget_scale":{"per_unit":{"max_steps":1},"max":{"max_steps":300,"max_model_calls":60}}}"#,
            "policy.budget_scale.max.max_model_calls: bounds a budget that per_unit does not scale",
        ),
    ];
    for (json, want) in cases {
        assert_eq!(error(json), want, "{json}");
    }
    let unknown = error(r#"{"budget_scale":{"per_units":{}}}"#);
    assert!(unknown.contains("unknown field `per_units`"), "{unknown}");
}

#[test]
fn the_budgets_a_step_spends_scale_and_can_be_raised_and_no_other_limit_scales() {
    let scalable: Vec<&str> = catalog::ALL
        .iter()
        .filter(|l| catalog::scalable(l.field).is_some())
        .map(|l| l.field)
        .collect();
    assert_eq!(
        scalable,
        [
            "max_steps",
            "token_budget",
            "max_output_tokens",
            "max_model_calls",
            "max_tool_calls"
        ]
    );
    for field in scalable {
        let limit = catalog::scalable(field).expect("listed");
        assert!(limit.raisable, "{field} scales but cannot be raised");
    }
}

/// Seed 004's read tiers with a scale on the read budget.
const READS: &str = r#"{
    "tool_budgets": { "read_file": { "tiers": [
        { "warn_at": 8, "block_at": 10, "reset_on": ["post_checkpoint"] },
        { "warn_at": 13, "block_at": 14, "reset_on": ["post_plan"] }
    ] } },
    "budget_scale": {
        "per_unit": { "tool_budgets.read_file": 1 },
        "max": { "tool_budgets.read_file": 30 }
    }
}"#;

/// Every tier's `(warn_at, block_at)` of `tool`'s budget.
fn tiers(policy: &Policy, tool: &str) -> Vec<(Option<u32>, Option<u32>)> {
    policy.tool_budgets[tool]
        .tiers
        .iter()
        .map(|t| (t.warn_at, t.block_at))
        .collect()
}

#[test]
fn a_tools_budget_moves_every_threshold_together_up_to_its_bound() {
    let policy = scaling(READS).expect("valid");
    let at = |units| tiers(&policy.scaled(units).expect("scales"), "read_file");
    assert_eq!(at(0), [(Some(8), Some(10)), (Some(13), Some(14))]);
    // Five files more, five reads later: the warning ranges keep their width.
    assert_eq!(at(5), [(Some(13), Some(15)), (Some(18), Some(19))]);
    // The largest threshold stops at its bound (14 + 16 = 30); the others move as far.
    assert_eq!(at(100), [(Some(24), Some(26)), (Some(29), Some(30))]);
    assert_eq!(at(u64::MAX), at(100), "no overflow past the bound");
    // The single-tier form scales the same way, each of its keys.
    let single = scaling(
        r#"{"tool_budgets":{"grep":{"warn_at":2,"block_at":4,"hard_block_at":6}},
            "budget_scale":{"per_unit":{"tool_budgets.grep":2},"max":{"tool_budgets.grep":100}}}"#,
    )
    .expect("valid")
    .scaled(3)
    .expect("scales");
    let grep = &single.tool_budgets["grep"];
    assert_eq!(
        (grep.warn_at, grep.block_at, grep.hard_block_at),
        (Some(8), Some(10), Some(12))
    );
}

#[test]
fn bad_tool_budget_scales_name_the_field() {
    let cases = [
        (
            r#"{"budget_scale":{"per_unit":{"tool_budgets.read_file":1},"max":{"tool_budgets.read_file":9}}}"#,
            "policy.budget_scale.per_unit.tool_budgets.read_file: scales the budget of \
             `read_file`, which tool_budgets does not bound",
        ),
        (
            r#"{"tool_budgets":{"read_file":{"block_at":10}},"budget_scale":{"per_unit":{"tool_budgets.read_file":1}}}"#,
            "policy.budget_scale.max: has no bound for tool_budgets.read_file: every scaled \
             budget needs one",
        ),
        (
            r#"{"tool_budgets":{"read_file":{"warn_at":8,"block_at":10}},"budget_scale":{"per_unit":{"tool_budgets.read_file":1},"max":{"tool_budgets.read_file":9}}}"#,
            "policy.budget_scale.max.tool_budgets.read_file: must be at least the budget's \
             largest threshold (10), got 9",
        ),
        (
            r#"{"tool_budgets":{"read_file":{"block_at":10}},"budget_scale":{"per_unit":{"max_steps":1},"max":{"max_steps":300,"tool_budgets.read_file":20}}}"#,
            "policy.budget_scale.max.tool_budgets.read_file: bounds a budget that per_unit \
             does not scale",
        ),
        (
            r#"{"tool_budgets":{"read_file":{"block_at":10}},"budget_scale":{"per_unit":{"tool_budgets.read_file":4294967296},"max":{"tool_budgets.read_file":20}}}"#,
            "policy.budget_scale.per_unit.tool_budgets.read_file: 4294967296 is out of range \
             (at most 4294967295)",
        ),
    ];
    for (json, want) in cases {
        assert_eq!(error(json), want, "{json}");
    }
}

proptest! {
    /// A scaled tool budget keeps the gaps between its thresholds, never passes its bound, and
    /// grows with the units.
    #[test]
    fn scaled_tool_budgets_keep_their_shape(
        warn in 1u32..50,
        gap in 0u32..20,
        second in 0u32..20,
        per in 0u64..1_000,
        room in 0u32..500,
        units in any::<u64>(),
        more in any::<u64>(),
    ) {
        let (w1, b1) = (warn, warn + gap);
        let (w2, b2) = (b1 + second, b1 + second + 1);
        let cap = b2 + room;
        let json = serde_json::json!({
            "tool_budgets": { "read": { "tiers": [
                { "warn_at": w1, "block_at": b1, "reset_on": ["checkpoint"] },
                { "warn_at": w2, "block_at": b2 }
            ] } },
            "budget_scale": { "per_unit": { "tool_budgets.read": per }, "max": { "tool_budgets.read": cap } },
        });
        let policy: Policy = serde_json::from_value(json).expect("parses");
        prop_assert_eq!(policy.validate(), Ok(()));
        let (small, large) = (units.min(more), units.max(more));
        let a = tiers(&policy.scaled(small).expect("scales"), "read");
        let b = tiers(&policy.scaled(large).expect("scales"), "read");
        for (n, t) in [(small, &a), (large, &b)] {
            let (Some(sw1), Some(sb1), Some(sw2), Some(sb2)) = (t[0].0, t[0].1, t[1].0, t[1].1)
            else {
                return Err(TestCaseError::fail("a threshold went missing"));
            };
            let by = sw1 - w1;
            prop_assert_eq!((sb1, sw2, sb2), (b1 + by, w2 + by, b2 + by));
            prop_assert!(sb2 <= cap);
            let want = (u128::from(per) * u128::from(n)).min(u128::from(room));
            prop_assert_eq!(u128::from(by), want);
        }
        prop_assert!(a[0].0 <= b[0].0);
    }

    /// Scaled budgets lie in [base, max], grow with the units, and 0 units is the base.
    #[test]
    fn scaled_budgets_are_bounded_and_monotone(
        base in 1u32..1000,
        per in 0u64..1_000_000_000,
        extra in 0u64..u64::from(u32::MAX),
        units in any::<u64>(),
        more in any::<u64>(),
        tokens in 1u64..u64::MAX / 2,
        per_token in any::<u64>(),
    ) {
        let cap = (u64::from(base) + extra).min(u64::from(u32::MAX));
        let json = serde_json::json!({
            "max_steps": base,
            "token_budget": tokens,
            "budget_scale": {
                "per_unit": { "max_steps": per, "token_budget": per_token },
                "max": { "max_steps": cap, "token_budget": u64::MAX },
            },
        });
        let policy: Policy = serde_json::from_value(json).expect("parses");
        prop_assert_eq!(policy.validate(), Ok(()));
        let zero = policy.scaled(0).expect("scales");
        prop_assert_eq!(zero.max_steps, base);
        prop_assert_eq!(zero.token_budget, Some(tokens));
        let (small, large) = (units.min(more), units.max(more));
        let a = policy.scaled(small).expect("scales");
        let b = policy.scaled(large).expect("scales");
        for p in [&a, &b] {
            prop_assert!(u64::from(p.max_steps) >= u64::from(base));
            prop_assert!(u64::from(p.max_steps) <= cap);
            prop_assert!(p.token_budget >= Some(tokens));
            prop_assert_eq!(p.validate(), Ok(()));
        }
        prop_assert!(a.max_steps <= b.max_steps);
        prop_assert!(a.token_budget <= b.token_budget);
        let exact = u128::from(base) + u128::from(per) * u128::from(small);
        prop_assert_eq!(u128::from(a.max_steps), exact.min(u128::from(cap)));
        // The scale is part of the policy: the same policy read back from its JSON scales the same.
        let text = serde_json::to_string(&policy).expect("serialises");
        let again: Policy = serde_json::from_str(&text).expect("reads back");
        prop_assert_eq!(again.scaled(small).expect("scales"), a);
    }
}
