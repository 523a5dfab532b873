//! `spec/machine.md` is generated from the kernel itself: the transitions, inputs, counters and
//! commands of every rule as the exhaustive model check observes them, the guards from
//! [`Rule::spec`] and the table of limits. This test regenerates the generated sections and fails
//! when the file differs; `TERMINUS_BLESS=1` rewrites them. An `insta` snapshot of the same text
//! makes every change of the table a reviewed diff.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::path::PathBuf;
use terminus_kernel::testing::{Edge, Exploration, Observed, alphabet, explore};
use terminus_kernel::{OnUnrecoverable, OnVerificationLimit, Phase, Policy, Rule, catalog};

/// The sampled policies: every combination of the five switches, once with every occurrence limit
/// at 2 and once at the smallest value it may take (1; `max_repeats` 2; `max_nudges` and
/// `max_model_retries` 0), because some edges exist only at the minimum (`no_op_limit` from
/// `Exploring` needs `max_no_ops: 1`); at 2 without a token budget, once more with
/// `max_tool_calls` 1.
fn policies() -> Vec<Policy> {
    let mut out = Vec::new();
    for minimal in [false, true] {
        for s in 0..32u32 {
            let bit = |b: u32| s & (1 << b) != 0;
            let (one, zero) = if minimal { (1, 0) } else { (2, 2) };
            let policy = Policy {
                max_steps: 9,
                max_model_calls: 5,
                max_no_ops: one,
                max_nudges: zero,
                max_verification_failures: one,
                on_verification_limit: if bit(0) {
                    OnVerificationLimit::Complete
                } else {
                    OnVerificationLimit::Abort
                },
                verify_completion: bit(1),
                max_tool_failures: one,
                max_consecutive_tool_failures: one,
                on_unrecoverable_tool_error: if bit(2) {
                    OnUnrecoverable::Stop
                } else {
                    OnUnrecoverable::Exclude
                },
                // 3 when not minimal, so that a first repeat is seen (and its notice).
                max_repeats: one + 1,
                max_polls: one + 1,
                max_empty_responses: one,
                max_model_retries: zero,
                // A budget on all tokens or on the output alone (half of a turn's), each
                // spent in two turns.
                token_budget: if bit(3) && !bit(0) { Some(100) } else { None },
                max_output_tokens: if bit(3) && bit(0) { Some(50) } else { None },
                final_answer_on_budget: bit(4),
                deadline_ms: Some(1_000),
                max_blocked_turns: one,
                // Checkpoints written for the agent: in half the policies (each adds a counter
                // to the state).
                auto_checkpoints: u32::from(bit(0)),
                ..Policy::default()
            };
            if !minimal && !bit(3) {
                // The tool-call budget, where the token budget does not stop the second turn.
                out.push(Policy {
                    max_tool_calls: Some(1),
                    ..policy.clone()
                });
            }
            out.push(policy);
        }
    }
    out
}

fn explorations() -> Vec<Exploration> {
    policies()
        .iter()
        .map(|p| explore(p, 60, false).expect("valid policy"))
        .collect()
}

fn edges(all: &[Exploration]) -> BTreeSet<Edge> {
    all.iter().flat_map(|e| e.edges.iter().copied()).collect()
}

fn observed(all: &[Exploration]) -> BTreeMap<Rule, Observed> {
    let mut rules: BTreeMap<Rule, Observed> = BTreeMap::new();
    for e in all {
        for (rule, o) in &e.rules {
            let into = rules.entry(*rule).or_default();
            into.inputs.extend(o.inputs.iter().copied());
            into.counters.extend(o.counters.iter().cloned());
            into.commands.extend(o.commands.iter().cloned());
        }
    }
    rules
}

fn join<T: AsRef<str>>(items: impl IntoIterator<Item = T>, sep: &str) -> String {
    items
        .into_iter()
        .map(|s| s.as_ref().to_owned())
        .collect::<Vec<_>>()
        .join(sep)
}

/// Every column but the guard and the citation is what the model check saw each rule do; the
/// guard's bounds come from the table of limits.
fn table(edges: &BTreeSet<Edge>, observed: &BTreeMap<Rule, Observed>) -> String {
    let mut from: BTreeMap<Rule, BTreeSet<Phase>> = BTreeMap::new();
    let mut to: BTreeMap<Rule, BTreeSet<Phase>> = BTreeMap::new();
    for e in edges {
        from.entry(e.rule).or_default().insert(e.from);
        to.entry(e.rule).or_default().insert(e.to);
    }
    let phases = |set: &BTreeSet<Phase>| join(set.iter().map(|p| p.as_str()), ", ");
    let mut s = String::new();
    s.push_str("| rule | from | input | guard | to | counters touched | commands | encodes |\n");
    s.push_str("|---|---|---|---|---|---|---|---|\n");
    for rule in Rule::ALL {
        let spec = rule.spec();
        let row = match (from.get(&rule), to.get(&rule), observed.get(&rule)) {
            (Some(f), Some(t), Some(o)) => [
                phases(f),
                join(o.inputs.iter().map(|i| format!("`{i}`")), ", "),
                phases(t),
                join(&o.counters, ", "),
                join(&o.commands, " or "),
            ],
            // Clock readings before the deadline are not transitions: every live state stays put.
            _ => [
                "every live state".to_owned(),
                format!("`{}`", spec.input),
                "(unchanged)".to_owned(),
                "none (not a step)".to_owned(),
                "none".to_owned(),
            ],
        };
        let [f, input, t, counters, commands] = row;
        let _ = writeln!(
            s,
            "| `{}` | {f} | {input} | {} | {t} | {counters} | {commands} | {} |",
            rule.name(),
            spec.guard,
            spec.cites
        );
    }
    s
}

/// The table of limits, as the machine, the invariants and the guards above read it.
fn limits_table() -> String {
    let mut s = String::from(
        "| policy field | counter | meets the limit | least value | rule | stop reason (default policy) |\n|---|---|---|---|---|---|\n",
    );
    for l in catalog::ALL {
        let meets = match l.meets {
            catalog::Meets::Reaches => "the N-th occurrence stops",
            catalog::Meets::Exceeds => "N are allowed, one more stops",
            catalog::Meets::Spent => "N may be spent, the next one wanted stops",
            catalog::Meets::Crosses => "stops once reached (may be passed by one event)",
        };
        let _ = writeln!(
            s,
            "| `{}` | `{}` | {meets} | {} | `{}` | `{}` |",
            l.field,
            l.counter,
            l.min,
            l.rule.name(),
            l.outcome(&Policy::default()).reason_str()
        );
    }
    s.push_str(
        "\nThe per-tool bounds of a tool's budget (`tool_budgets.NAME`): from the bound, a call is refused, answered with the budget's text, and the run goes on.\n\n| field | counts | lifted |\n|---|---|---|\n",
    );
    for b in catalog::TOOL_BOUNDS {
        let lifted = if b.resets {
            "by a successful call of a tool in `reset_on`"
        } else {
            "never"
        };
        let _ = writeln!(s, "| `{}` | {} | {lifted} |", b.field, b.counts());
    }
    let t = catalog::TIER_BLOCK_AT;
    let _ = writeln!(s, "| `{}` | {} | {} |", t.field, t.counts, t.lifted);
    s
}

fn diagram(edges: &BTreeSet<Edge>) -> String {
    let mut by_pair: BTreeMap<(Phase, Phase), BTreeSet<&'static str>> = BTreeMap::new();
    for e in edges {
        by_pair
            .entry((e.from, e.to))
            .or_default()
            .insert(e.rule.name());
    }
    let mut s = String::from("```mermaid\nstateDiagram-v2\n    [*] --> Exploring\n");
    for ((f, t), rules) in &by_pair {
        let label = rules.iter().copied().collect::<Vec<_>>().join(", ");
        let _ = writeln!(s, "    {} --> {}: {}", f.as_str(), t.as_str(), label);
    }
    s.push_str("    Complete --> [*]\n    Aborted --> [*]\n```\n");
    s
}

fn model_check_summary(all: &[Exploration]) -> String {
    let (mut states, mut transitions, mut longest) = (0usize, 0usize, 0u64);
    for e in all {
        states += e.states;
        transitions += e.transitions;
        longest = longest.max(e.longest_run);
    }
    format!(
        "{} policies (every combination of `on_verification_limit`, `verify_completion`, \
`on_unrecoverable_tool_error`, a token budget and `final_answer_on_budget`, once with every \
occurrence limit 2 (`max_repeats` 3; without a token budget, once more with `max_tool_calls` 1) and once \
at its minimum; the token budget `token_budget` where `on_verification_limit` aborts, \
`max_output_tokens` where it completes; `auto_checkpoints` 1 where `on_verification_limit` is complete; `max_model_calls` 5, `max_steps` 9), {} abstract \
inputs: **{states} states, {transitions} transitions**, no state that cannot reach a terminal \
state, no cycle, longest run {longest} steps.\n",
        all.len(),
        alphabet(60).len()
    )
}

fn replace_section(doc: &str, name: &str, body: &str) -> String {
    let begin = format!("<!-- BEGIN GENERATED {name} -->\n");
    let end = format!("<!-- END GENERATED {name} -->");
    let (Some(b), Some(e)) = (doc.find(&begin), doc.find(&end)) else {
        panic!("spec/machine.md lacks the markers of section {name}");
    };
    format!("{}{}{}{}", &doc[..b + begin.len()], body, "", &doc[e..])
}

#[test]
fn spec_machine_md_is_generated_from_the_code() {
    let all = explorations();
    let edges = edges(&all);
    let generated = [
        ("table", table(&edges, &observed(&all))),
        ("limits", limits_table()),
        ("diagram", diagram(&edges)),
        ("model-check", model_check_summary(&all)),
    ];
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../spec/machine.md");
    let current = std::fs::read_to_string(&path).expect("spec/machine.md exists");
    let mut expected = current.clone();
    for (name, body) in &generated {
        expected = replace_section(&expected, name, body);
    }
    let all: String = generated
        .iter()
        .map(|(n, b)| format!("## {n}\n{b}"))
        .collect();
    insta::assert_snapshot!("machine_spec", all);
    if std::env::var_os("TERMINUS_BLESS").is_some() {
        std::fs::write(&path, &expected).expect("write spec/machine.md");
        return;
    }
    assert!(
        current == expected,
        "spec/machine.md is out of date with the kernel; run `TERMINUS_BLESS=1 cargo test -p terminus-kernel --test spec` and review the diff"
    );
}

#[test]
fn every_stop_reason_and_rule_has_a_row_in_the_spec() {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../spec/machine.md");
    let doc = std::fs::read_to_string(&path).expect("spec/machine.md exists");
    let start = doc.find("## Stop reasons").expect("a Stop reasons section");
    let reasons = &doc[start..];
    let reasons = &reasons[..reasons[3..].find("\n## ").map_or(reasons.len(), |i| i + 3)];
    let tests = std::fs::read_to_string(
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/stop_reasons.rs"),
    )
    .expect("kernel/tests/stop_reasons.rs exists");
    for name in terminus_kernel::CompleteReason::ALL
        .map(|r| r.as_str())
        .into_iter()
        .chain(terminus_kernel::AbortReason::ALL.map(|r| r.as_str()))
    {
        assert!(
            reasons.contains(&format!("| `{name}` |")),
            "no row for stop reason {name} in the Stop reasons section"
        );
        assert!(
            tests.contains(&format!("fn reaches_{name}(")),
            "no test `reaches_{name}` in kernel/tests/stop_reasons.rs"
        );
    }
    let doc = &doc[..];
    for r in terminus_kernel::CompleteReason::ALL {
        assert!(
            doc.contains(&format!("| `{}` |", r.as_str())),
            "no row for complete reason {}",
            r.as_str()
        );
    }
    for r in terminus_kernel::AbortReason::ALL {
        assert!(
            doc.contains(&format!("| `{}` |", r.as_str())),
            "no row for abort reason {}",
            r.as_str()
        );
    }
    for rule in Rule::ALL {
        assert!(
            doc.contains(&format!("| `{}` |", rule.name())),
            "no row for rule {}",
            rule.name()
        );
    }
}

#[test]
fn the_transition_table_is_what_the_model_check_observes() {
    let mut observed: BTreeMap<Rule, BTreeSet<(Phase, Phase)>> = BTreeMap::new();
    for e in edges(&explorations()) {
        observed.entry(e.rule).or_default().insert((e.from, e.to));
    }
    for rule in Rule::ALL {
        let table: BTreeSet<(Phase, Phase)> = rule.transitions().iter().copied().collect();
        assert_eq!(
            table.len(),
            rule.transitions().len(),
            "Rule::transitions of {} lists a pair twice",
            rule.name()
        );
        let seen = observed.remove(&rule).unwrap_or_default();
        assert_eq!(
            table,
            seen,
            "Rule::transitions of {} differs from what the model check observes",
            rule.name()
        );
    }
    assert!(
        observed.is_empty(),
        "rules missing from Rule::ALL: {observed:?}"
    );
    for rule in Rule::ALL {
        for (from, _) in rule.transitions() {
            assert!(
                !from.is_terminal(),
                "{} leaves a terminal state",
                rule.name()
            );
        }
    }
}
