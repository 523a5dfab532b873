//! `spec/machine.md` is generated from the kernel's own description of its transitions
//! ([`Rule::spec`] and the transitions the model check observes). This test regenerates the
//! generated sections and fails when the file differs; `TERMINUS_BLESS=1` rewrites them. An `insta`
//! snapshot of the same text makes every change of the table a reviewed diff.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::path::PathBuf;
use terminus_kernel::model::{Edge, explore};
use terminus_kernel::{OnUnrecoverable, OnVerificationLimit, Phase, Policy, Rule};

fn policies() -> Vec<Policy> {
    (0..32u32)
        .map(|s| {
            let bit = |b: u32| s & (1 << b) != 0;
            Policy {
                max_steps: 9,
                max_model_calls: 5,
                max_no_ops: 2,
                max_nudges: 2,
                max_verification_failures: 2,
                on_verification_limit: if bit(0) {
                    OnVerificationLimit::Complete
                } else {
                    OnVerificationLimit::Abort
                },
                verify_completion: bit(1),
                max_tool_failures: 2,
                max_consecutive_tool_failures: 2,
                on_unrecoverable_tool_error: if bit(2) {
                    OnUnrecoverable::Stop
                } else {
                    OnUnrecoverable::Exclude
                },
                max_repeats: 2,
                max_empty_responses: 2,
                max_model_retries: 2,
                token_budget: if bit(3) { Some(100) } else { None },
                final_answer_on_budget: bit(4),
                deadline_ms: Some(1_000),
                ..Policy::default()
            }
        })
        .collect()
}

fn observed_edges() -> BTreeSet<Edge> {
    let mut edges = BTreeSet::new();
    for p in policies() {
        edges.extend(explore(&p, 60, false).expect("valid policy").edges);
    }
    edges
}

fn join(set: &BTreeSet<Phase>) -> String {
    set.iter()
        .map(|p| p.as_str())
        .collect::<Vec<_>>()
        .join(", ")
}

fn table(edges: &BTreeSet<Edge>) -> String {
    let mut from: BTreeMap<Rule, BTreeSet<Phase>> = BTreeMap::new();
    let mut to: BTreeMap<Rule, BTreeSet<Phase>> = BTreeMap::new();
    for e in edges {
        from.entry(e.rule).or_default().insert(e.from);
        to.entry(e.rule).or_default().insert(e.to);
    }
    let mut s = String::new();
    s.push_str("| rule | from | input | guard | to | counters touched | command | encodes |\n");
    s.push_str("|---|---|---|---|---|---|---|---|\n");
    for rule in Rule::ALL {
        let spec = rule.spec();
        let (f, t) = match (from.get(&rule), to.get(&rule)) {
            (Some(f), Some(t)) => (join(f), join(t)),
            // Clock readings before the deadline are not transitions: every live state stays put.
            _ => ("every live state".to_owned(), "(unchanged)".to_owned()),
        };
        let _ = writeln!(
            s,
            "| `{}` | {} | `{}` | {} | {} | {} | {} | {} |",
            rule.name(),
            f,
            spec.input,
            spec.guard,
            t,
            spec.counters,
            spec.command,
            spec.cites
        );
    }
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

fn model_check_summary() -> String {
    let (mut states, mut transitions, mut longest) = (0usize, 0usize, 0u64);
    for p in policies() {
        let e = explore(&p, 60, false).expect("valid policy");
        states += e.states;
        transitions += e.transitions;
        longest = longest.max(e.longest_run);
    }
    format!(
        "32 policies (every combination of `on_verification_limit`, `verify_completion`, \
`on_unrecoverable_tool_error`, `token_budget` and `final_answer_on_budget`; every limit 2, \
`max_model_calls` 5, `max_steps` 9), {} abstract inputs: **{states} states, {transitions} transitions**, \
no state that cannot reach a terminal state, no cycle, longest run {longest} steps.\n",
        terminus_kernel::model::alphabet(60).len()
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
    let edges = observed_edges();
    let generated = [
        ("table", table(&edges)),
        ("diagram", diagram(&edges)),
        ("model-check", model_check_summary()),
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
