//! The conformance suite: every scenario in `spec/scenarios/` runs through the library and
//! through the built `terminus` binary; both must meet the file's own `expect` block, agree with
//! each other, and exit with the contract's code. Each scenario's transition trace is an `insta`
//! snapshot (`adapters/cli/tests/snapshots/`), so any change of path is a reviewed diff:
//! bless with `INSTA_UPDATE=always cargo test -p terminus-cli --test conformance`.
//!
//! Together the scenarios must reach every stop reason the kernel defines (enumerated from its
//! types, not from a list here) and exercise every rule 1-8 of DESIGN.md (from the rules cited by
//! the kernel transitions their traces took).

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;
use terminus_kernel::{AbortReason, CompleteReason, Outcome, Rule};
use terminus_runtime::Report;
use terminus_scenario::Scenario;

fn scenarios() -> Vec<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../spec/scenarios");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "json"))
        .collect();
    files.sort();
    files
}

fn trace_text(report: &Report) -> String {
    let mut out = format!("{} (rule {})\n", report.outcome, report.rule.name());
    for step in &report.trace {
        out.push_str(&step.to_string());
        out.push('\n');
    }
    out
}

/// The DESIGN.md rules (1-8) a kernel rule cites, e.g. "rules 1, 7, 8" gives 1, 7 and 8.
fn design_rules(rule: Rule) -> Vec<u32> {
    let cites = rule.spec().cites;
    let mut out = Vec::new();
    let mut rest = cites;
    while let Some(at) = rest.find("rule") {
        rest = &rest[at + 4..];
        let list: String = rest
            .chars()
            .take_while(|c| c.is_ascii_digit() || matches!(c, 's' | ',' | ' '))
            .collect();
        out.extend(
            list.split(|c: char| !c.is_ascii_digit())
                .filter_map(|n| n.parse::<u32>().ok()),
        );
    }
    out
}

#[tokio::test(start_paused = true)]
async fn every_scenario_meets_its_expectations_through_library_and_binary() {
    let files = scenarios();
    assert!(files.len() >= 25, "the suite has {} scenarios", files.len());
    let mut reasons = BTreeSet::new();
    let mut design = BTreeSet::new();
    let mut fired = BTreeSet::new();
    for file in &files {
        let scenario = Scenario::load(file).unwrap_or_else(|e| panic!("{e}"));
        let name = scenario.name().to_owned();
        let Some(expect) = scenario.expect() else {
            panic!("{name}: a conformance scenario needs an expect block");
        };
        let report = scenario
            .run()
            .execution(name.clone())
            .execute()
            .await
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        let mismatches = expect.check(&report);
        assert!(mismatches.is_empty(), "{name}: {mismatches:?}");
        insta::assert_snapshot!(name.clone(), trace_text(&report));

        // The binary, with real time.
        let out = Command::new(env!("CARGO_BIN_EXE_terminus"))
            .args([
                "run",
                &file.to_string_lossy(),
                "--json",
                "--execution",
                &name,
            ])
            .output()
            .expect("the binary runs");
        let stdout = String::from_utf8_lossy(&out.stdout);
        let line = stdout.lines().last().unwrap_or_default();
        let binary: Report = serde_json::from_str(line)
            .unwrap_or_else(|e| panic!("{name}: no report from the binary ({e}): {stdout}"));
        assert_eq!(
            out.status.code(),
            Some(i32::from(report.exit_code())),
            "{name}: exit code"
        );
        assert_eq!(
            out.status.code(),
            Some(if report.is_complete() { 0 } else { 1 }),
            "{name}: exit code contract"
        );
        assert!(
            expect.check(&binary).is_empty(),
            "{name}: binary {:?}",
            expect.check(&binary)
        );
        assert_eq!(binary.outcome, report.outcome, "{name}");
        assert_eq!(binary.rule, report.rule, "{name}");
        assert_eq!(binary.stats, report.stats, "{name}");
        assert_eq!(binary.trace, report.trace, "{name}");
        assert_eq!(binary.entries, report.entries, "{name}");
        assert_eq!(binary.result, report.result, "{name}");

        reasons.insert(report.outcome);
        for step in &report.trace {
            fired.insert(step.rule);
            design.extend(design_rules(step.rule));
        }
    }
    let all: BTreeSet<Outcome> = CompleteReason::ALL
        .into_iter()
        .map(Outcome::Complete)
        .chain(AbortReason::ALL.into_iter().map(Outcome::Aborted))
        .collect();
    let missing: Vec<_> = all.difference(&reasons).collect();
    assert!(
        missing.is_empty(),
        "stop reasons no scenario reaches: {missing:?}"
    );
    let rules: BTreeSet<u32> = (1..=8).collect();
    let missing: Vec<_> = rules.difference(&design).collect();
    assert!(
        missing.is_empty(),
        "DESIGN.md rules no scenario exercises: {missing:?}"
    );
    let unfired: Vec<&str> = Rule::ALL
        .into_iter()
        .filter(|r| !fired.contains(r))
        .map(Rule::name)
        .collect();
    eprintln!(
        "conformance: {} scenarios, {} stop reasons, DESIGN rules {design:?}, {} of {} kernel transitions fired (not fired: {unfired:?})",
        files.len(),
        reasons.len(),
        fired.len(),
        Rule::ALL.len()
    );
}

#[test]
fn design_rule_citations_parse() {
    assert_eq!(design_rules(Rule::ToolResultsBack), vec![1, 7, 8]);
    assert_eq!(design_rules(Rule::ClaimRefused), vec![5, 8]);
    assert!(design_rules(Rule::StepBudget).is_empty());
}
