//! The conformance suite: every scenario in `spec/scenarios/` runs through the library and
//! through the built `terminus` binary; both must meet the file's own `expect` block, agree with
//! each other, and exit with the contract's code (0 complete, 1 aborted). Each scenario's
//! transition trace is an `insta` snapshot (`adapters/cli/tests/snapshots/`), so any change of
//! path is a reviewed diff.
//!
//! Together the scenarios must reach every stop reason the kernel defines (enumerated from its
//! types, not from a list here) and exercise every rule 1-8 of `docs/design.md` (from the rules
//! cited by the kernel transitions their traces took). The suite's table in
//! `spec/scenarios/README.md` (scenario, how it ends, the rules it exercises, what it shows) is
//! generated from the same runs and checked here.
//!
//! Bless after a reviewed change of path (snapshots) or of the suite (the README table):
//! `INSTA_UPDATE=always TERMINUS_BLESS=1 cargo test -p terminus-cli --test conformance`,
//! then review `git diff`.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;
use terminus_kernel::{AbortReason, CompleteReason, Outcome, Rule};
use terminus_runtime::Report;
use terminus_scenario::{Expect, Scenario};

fn suite_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../spec/scenarios")
}

fn scenarios() -> Vec<PathBuf> {
    let dir = suite_dir();
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "json"))
        .collect();
    files.sort();
    files
}

/// Where the kernel's stop reason enums and their `ALL` lists must agree: a reason this list does
/// not name fails the asserts (the kernel's own exhaustive match in `reason.rs` keeps `ALL`
/// complete), so the coverage check below cannot miss a reason the kernel defines.
fn every_stop_reason() -> BTreeSet<Outcome> {
    const fn complete_index(r: CompleteReason) -> usize {
        match r {
            CompleteReason::Verified => 0,
            CompleteReason::Explicit => 1,
            CompleteReason::Answered => 2,
            CompleteReason::Forced => 3,
        }
    }
    const fn abort_index(r: AbortReason) -> usize {
        match r {
            AbortReason::MaxSteps => 0,
            AbortReason::MaxModelCalls => 1,
            AbortReason::Deadline => 2,
            AbortReason::Cancelled => 3,
            AbortReason::NoProgress => 4,
            AbortReason::Incomplete => 5,
            AbortReason::VerificationLoop => 6,
            AbortReason::ToolFailures => 7,
            AbortReason::UnrecoverableToolError => 8,
            AbortReason::EmptyResponses => 9,
            AbortReason::ModelError => 10,
            AbortReason::ContextExhausted => 11,
            AbortReason::TokenBudget => 12,
            AbortReason::ToolCallBudget => 13,
            AbortReason::PollLimit => 14,
            AbortReason::OutputTokenBudget => 15,
            // `AbortReason` is non-exhaustive: a reason added later maps here and fails the
            // assert below until this list names it.
            _ => usize::MAX,
        }
    }
    let complete: BTreeSet<usize> = CompleteReason::ALL.map(complete_index).into();
    let abort: BTreeSet<usize> = AbortReason::ALL.map(abort_index).into();
    assert_eq!(complete, (0..4).collect(), "CompleteReason::ALL");
    assert_eq!(abort, (0..16).collect(), "AbortReason::ALL");
    CompleteReason::ALL
        .into_iter()
        .map(Outcome::Complete)
        .chain(AbortReason::ALL.into_iter().map(Outcome::Aborted))
        .collect()
}

fn trace_text(report: &Report) -> String {
    let mut out = format!("{} (rule {})\n", report.outcome, report.rule.name());
    for step in &report.trace {
        out.push_str(&step.to_string());
        out.push('\n');
    }
    out
}

/// The rules of `docs/design.md` (1-8) a kernel rule cites, e.g. "rules 1, 7, 8" gives 1, 7 and 8.
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

/// The rules of `docs/design.md` a run exercised: those cited by the transitions it took.
fn rules_of(report: &Report) -> BTreeSet<u32> {
    report
        .trace
        .iter()
        .flat_map(|step| design_rules(step.rule))
        .collect()
}

/// An expect block that pins the outcome, the reason and at least one counter.
fn check_expect_is_complete(name: &str, expect: &Expect) {
    assert!(expect.outcome.is_some(), "{name}: expect.outcome missing");
    assert!(expect.reason.is_some(), "{name}: expect.reason missing");
    let counters = [
        &expect.steps,
        &expect.model_calls,
        &expect.tool_calls,
        &expect.refused_calls,
        &expect.tool_failures,
        &expect.failed_tool_turns,
        &expect.nudges,
        &expect.continuations,
        &expect.verifications,
        &expect.verification_failures,
        &expect.no_ops,
        &expect.empty_responses,
        &expect.model_errors,
        &expect.repeats,
        &expect.input_tokens,
        &expect.output_tokens,
        &expect.ignored_events,
        &expect.entries,
        &expect.duplicates_prevented,
    ];
    assert!(
        counters.iter().any(|c| c.is_some()),
        "{name}: expect bounds no counter"
    );
}

/// One row of the suite's table in `spec/scenarios/README.md`.
fn table_row(file: &Path, report: &Report, description: &str) -> String {
    let file = file
        .file_name()
        .map_or_else(String::new, |f| f.to_string_lossy().into_owned());
    let rules: Vec<String> = rules_of(report).iter().map(u32::to_string).collect();
    let rules = if rules.is_empty() {
        "-".to_owned()
    } else {
        rules.join(", ")
    };
    format!(
        "| [`{file}`]({file}) | {} ({}) | {rules} | {} |",
        report.outcome.outcome_str(),
        report.outcome.reason_str(),
        description.replace('|', "\\|")
    )
}

const BEGIN: &str = "<!-- BEGIN GENERATED suite -->\n";
const END: &str = "<!-- END GENERATED suite -->";

/// Compares the README's generated table with `table`; with `TERMINUS_BLESS=1`, rewrites it.
fn check_readme_table(table: &str) {
    let path = suite_dir().join("README.md");
    let doc = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let (Some(start), Some(end)) = (doc.find(BEGIN), doc.find(END)) else {
        panic!("{}: no {BEGIN:?} ... {END:?} block", path.display());
    };
    let start = start + BEGIN.len();
    assert!(
        start <= end,
        "{}: the generated block is malformed",
        path.display()
    );
    if doc[start..end] == *table {
        return;
    }
    if std::env::var_os("TERMINUS_BLESS").is_some() {
        let updated = format!("{}{table}{}", &doc[..start], &doc[end..]);
        std::fs::write(&path, updated).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        eprintln!("conformance: rewrote the suite table in {}", path.display());
        return;
    }
    panic!(
        "the suite table in {} is stale; bless with TERMINUS_BLESS=1 and review the diff. \
         Expected:\n{table}",
        path.display()
    );
}

#[tokio::test(start_paused = true)]
async fn every_scenario_meets_its_expectations_through_library_and_binary() {
    let files = scenarios();
    assert!(files.len() >= 25, "the suite has {} scenarios", files.len());
    let mut reasons = BTreeSet::new();
    let mut design = BTreeSet::new();
    let mut fired = BTreeSet::new();
    let mut table =
        String::from("| scenario | ends | rules | what it shows |\n|---|---|---|---|\n");
    for file in &files {
        let scenario = Scenario::load(file).unwrap_or_else(|e| panic!("{e}"));
        let name = scenario.name().to_owned();
        let Some(expect) = scenario.expect() else {
            panic!("{name}: a conformance scenario needs an expect block");
        };
        check_expect_is_complete(&name, expect);
        let Some(description) = scenario.file().description.clone() else {
            panic!("{name}: a conformance scenario needs a description");
        };

        // The library, under tokio's paused clock.
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
            .unwrap_or_else(|e| panic!("{name}: the binary does not run: {e}"));
        let stdout = String::from_utf8_lossy(&out.stdout);
        let line = stdout.lines().last().unwrap_or_default();
        let binary: Report = serde_json::from_str(line).unwrap_or_else(|e| {
            panic!(
                "{name}: no report from the binary ({e}): {stdout}\n{}",
                String::from_utf8_lossy(&out.stderr)
            )
        });
        assert_eq!(
            out.status.code(),
            Some(if report.is_complete() { 0 } else { 1 }),
            "{name}: exit code contract (0 complete, 1 aborted)"
        );
        assert_eq!(
            out.status.code(),
            Some(i32::from(report.exit_code())),
            "{name}: exit code"
        );
        let binary_mismatches = expect.check(&binary);
        assert!(
            binary_mismatches.is_empty(),
            "{name}: binary {binary_mismatches:?}"
        );
        assert_eq!(binary.outcome, report.outcome, "{name}: outcome and reason");
        assert_eq!(binary.rule, report.rule, "{name}: rule");
        assert_eq!(binary.stats, report.stats, "{name}: counters");
        assert_eq!(binary.trace, report.trace, "{name}: trace");
        assert_eq!(binary.entries, report.entries, "{name}: entries");
        assert_eq!(binary.excluded_tools, report.excluded_tools, "{name}");
        assert_eq!(binary.result, report.result, "{name}: result");

        reasons.insert(report.outcome);
        for step in &report.trace {
            fired.insert(step.rule);
        }
        design.extend(rules_of(&report));
        table.push_str(&table_row(file, &report, &description));
        table.push('\n');
    }
    let all = every_stop_reason();
    let missing: Vec<_> = all.difference(&reasons).collect();
    assert!(
        missing.is_empty(),
        "stop reasons no scenario reaches: {missing:?}"
    );
    let rules: BTreeSet<u32> = (1..=8).collect();
    let missing: Vec<_> = rules.difference(&design).collect();
    assert!(
        missing.is_empty(),
        "rules of docs/design.md no scenario exercises: {missing:?}"
    );
    check_readme_table(&table);
    let unfired: Vec<&str> = Rule::ALL
        .into_iter()
        .filter(|r| !fired.contains(r))
        .map(Rule::name)
        .collect();
    eprintln!(
        "conformance: {} scenarios, {} of {} stop reasons, rules {design:?}, {} of {} kernel transitions fired (not fired: {unfired:?})",
        files.len(),
        reasons.len(),
        all.len(),
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

#[test]
fn the_kernel_lists_every_stop_reason() {
    assert_eq!(every_stop_reason().len(), 20);
}

/// `provider-usage-prunes.json` prunes because of the reported usage, not the tokenizer: the
/// same scenario without its `usage` fields (and without the `sees` that prove the prune) is
/// not pruned, since the heuristic alone counts its view under `prune_at`.
#[tokio::test(start_paused = true)]
async fn provider_usage_is_what_prunes() {
    let file = suite_dir().join("provider-usage-prunes.json");
    let text = std::fs::read_to_string(&file).unwrap_or_else(|e| panic!("{e}"));
    let mut json: serde_json::Value = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{e}"));
    let turns = json["model"]["turns"]
        .as_array_mut()
        .expect("the scenario has turns");
    for turn in turns {
        let turn = turn.as_object_mut().expect("a turn is an object");
        assert!(turn.remove("usage").is_some(), "every turn reports usage");
        turn.remove("sees");
        turn.remove("not_sees");
    }
    let expect = json["expect"].as_object_mut().expect("an expect block");
    expect.remove("prunes");
    expect.remove("input_tokens");

    let without = Scenario::parse(&json.to_string()).unwrap_or_else(|e| panic!("{e}"));
    let report = without
        .run()
        .execute()
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(report.outcome, Outcome::Complete(CompleteReason::Answered));
    let context = report.context.expect("the scenario has a context policy");
    assert_eq!(context.prunes, 0, "{context:?}");
    assert!(context.peak_tokens < 2_666, "{context:?}");

    let with = Scenario::load(&file).unwrap_or_else(|e| panic!("{e}"));
    let report = with.run().execute().await.unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(report.context.map(|c| c.prunes), Some(1));
}
