//! The conformance plans: every plan in `spec/plans/` runs through the built `terminus` binary
//! (`terminus orchestrate FILE --json`) and must exit as its `expect` block's outcome says (0
//! complete, 1 aborted), print no `expectation not met` line, and give a report that this test
//! checks against the `expect` block on its own (outcome, reason, each agent's status, attempts
//! and degraded input), besides what the contract says of every report. Every plan in
//! `spec/plans/invalid/` must be refused before anything runs: exit 2, nothing on stdout, one
//! stderr line per problem. `spec/plans/README.md` must have a row for every file.

mod common;

use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Output;

fn plans_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../spec/plans")
}

/// The `*.json` files of `dir`, sorted.
fn json_files(dir: &Path) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.is_file() && p.extension().is_some_and(|x| x == "json"))
        .collect();
    files.sort();
    files
}

fn file_name(path: &Path) -> String {
    path.file_name()
        .expect("a file name")
        .to_string_lossy()
        .into_owned()
}

fn read_json(path: &Path) -> Value {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: not JSON: {e}", path.display()))
}

/// The binary with `args`, the limits' environment variables cleared (the plans set the limits
/// they depend on; a variable set where the tests run must not change them).
fn terminus(args: &[&str]) -> Output {
    let mut command = common::journal::terminus_without_limit_variables();
    command.args(args);
    command.output().expect("the binary runs")
}

fn orchestrate(plan: &Path) -> Output {
    let plan = plan.to_string_lossy().into_owned();
    terminus(&["orchestrate", &plan, "--json"])
}

fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// The plan report: the last line on stdout.
fn report_of(out: &Output) -> Result<Value, String> {
    let text = stdout(out);
    let last = text.lines().last().ok_or("stdout is empty")?;
    serde_json::from_str(last)
        .map_err(|e| format!("the last stdout line is not JSON ({e}): {last}"))
}

/// The agents of a plan file, by id, in file order.
fn plan_agents(plan: &Value) -> Vec<(String, &Value)> {
    plan["agents"]
        .as_array()
        .expect("a plan has an agents array")
        .iter()
        .map(|a| (a["id"].as_str().expect("an agent id").to_owned(), a))
        .collect()
}

/// Everything wrong with a run of the conformance plan `path` (empty: it conforms).
fn check_plan(path: &Path) -> Vec<String> {
    let plan = read_json(path);
    let mut problems = Vec::new();
    let Some(expect) = plan.get("expect").and_then(Value::as_object) else {
        return vec!["no `expect` block".into()];
    };
    let outcome = expect["outcome"].as_str().unwrap_or_default();
    let reason = expect["reason"].as_str().unwrap_or_default();
    let (code, reasons): (i32, &[&str]) = match outcome {
        "complete" => (0, &["all_complete", "degraded"]),
        "aborted" => (
            1,
            &[
                "agent_failed",
                "execution_timeout",
                "max_phases",
                "cancelled",
            ],
        ),
        other => {
            return vec![format!(
                "expect.outcome `{other}` is not complete or aborted"
            )];
        }
    };
    if !reasons.contains(&reason) {
        problems.push(format!(
            "expect.reason `{reason}` is not a reason of outcome {outcome}"
        ));
    }
    let agents = plan_agents(&plan);
    let expected: BTreeMap<&str, &Value> = expect
        .get("agents")
        .and_then(Value::as_object)
        .map(|m| m.iter().map(|(k, v)| (k.as_str(), v)).collect())
        .unwrap_or_default();
    // A conformance plan says what becomes of every agent it has, and of no other.
    for (id, _) in &agents {
        if !expected.contains_key(id.as_str()) {
            problems.push(format!("expect.agents does not list agent `{id}`"));
        }
    }
    for id in expected.keys() {
        if !agents.iter().any(|(a, _)| a == id) {
            problems.push(format!("expect.agents lists `{id}`, which the plan lacks"));
        }
    }

    let out = orchestrate(path);
    let err = stderr(&out);
    if out.status.code() != Some(code) {
        problems.push(format!(
            "exit code {:?} (expected {code} for outcome {outcome})",
            out.status.code()
        ));
    }
    for line in err.lines().filter(|l| l.contains("expectation not met")) {
        problems.push(format!("the binary says: {line}"));
    }
    let report = match report_of(&out) {
        Ok(report) => report,
        Err(e) => {
            problems.push(e);
            return problems;
        }
    };
    if report["outcome"] != outcome {
        problems.push(format!(
            "outcome {} (expected {outcome})",
            report["outcome"]
        ));
    }
    if report["reason"] != reason {
        problems.push(format!("reason {} (expected {reason})", report["reason"]));
    }
    let Some(got) = report["agents"].as_array() else {
        problems.push("the report has no agents array".into());
        return problems;
    };
    let got_ids: Vec<&str> = got.iter().filter_map(|a| a["id"].as_str()).collect();
    let plan_ids: Vec<&str> = agents.iter().map(|(id, _)| id.as_str()).collect();
    if got_ids != plan_ids {
        problems.push(format!(
            "report agents {got_ids:?} (expected one per plan agent, in plan order: {plan_ids:?})"
        ));
    }
    for (id, want) in &expected {
        let Some(a) = got.iter().find(|a| a["id"] == *id) else {
            problems.push(format!("agent {id}: not in the report"));
            continue;
        };
        if a["status"] != want["status"] {
            problems.push(format!(
                "agent {id}: status {} (expected {})",
                a["status"], want["status"]
            ));
        }
        if let Some(attempts) = want.get("attempts")
            && a["attempts"] != *attempts
        {
            problems.push(format!(
                "agent {id}: attempts {} (expected {attempts})",
                a["attempts"]
            ));
        }
        if let Some(degraded) = want.get("degraded_input")
            && a["degraded_input"] != *degraded
        {
            problems.push(format!(
                "agent {id}: degraded_input {} (expected {degraded})",
                a["degraded_input"]
            ));
        }
    }
    // What the contract says of every agent of every report.
    for a in got {
        let id = a["id"].as_str().unwrap_or("?");
        let spec = agents.iter().find(|(i, _)| i == id).map(|(_, s)| *s);
        let attempts = a["attempts"].as_u64();
        let ran = a.get("report").is_some() || a.get("error").is_some();
        match attempts {
            Some(0) if ran => problems.push(format!("agent {id}: a report without a run")),
            Some(n) if n > 0 && !ran => {
                problems.push(format!("agent {id}: {n} attempts but no report or error"));
            }
            None => problems.push(format!("agent {id}: attempts is not a number")),
            _ => {}
        }
        // An agent that ran has its wall time, within the plan's; one that never started has
        // none.
        match (a.get("duration_ms").map(Value::as_u64), ran) {
            (Some(Some(ms)), true) => {
                let elapsed = report["elapsed_ms"].as_u64().unwrap_or_default();
                if ms > elapsed {
                    problems.push(format!(
                        "agent {id}: duration_ms {ms} beyond the plan's elapsed_ms {elapsed}"
                    ));
                }
            }
            (None, false) => {}
            (Some(None), _) => problems.push(format!("agent {id}: duration_ms is not a number")),
            (Some(_), false) => problems.push(format!("agent {id}: a duration without a run")),
            (None, true) => problems.push(format!("agent {id}: ran but has no duration_ms")),
        }
        let result = a.get("result").unwrap_or(&Value::Null);
        match a["status"].as_str() {
            Some("complete") if result.is_null() => {
                problems.push(format!("agent {id}: complete without a result"));
            }
            Some("degraded") => {
                let degraded = spec.and_then(|s| s.get("degraded_result"));
                if Some(result) != degraded {
                    problems.push(format!(
                        "agent {id}: degraded with result {result} (expected its \
                         degraded_result {degraded:?})"
                    ));
                }
            }
            Some("failed" | "skipped" | "not_run") if !result.is_null() => {
                problems.push(format!("agent {id}: {} with result {result}", a["status"]));
            }
            Some("complete" | "failed" | "skipped" | "not_run") => {}
            _ => problems.push(format!("agent {id}: unknown status {}", a["status"])),
        }
    }
    problems.extend(check_specifics(&file_name(path), &report, &err));
    problems
}

fn agent<'a>(report: &'a Value, id: &str) -> &'a Value {
    report["agents"]
        .as_array()
        .and_then(|agents| agents.iter().find(|a| a["id"] == id))
        .unwrap_or(&Value::Null)
}

/// What a plan shows beyond its `expect` block: the mechanism that ended it.
fn check_specifics(file: &str, report: &Value, err: &str) -> Vec<String> {
    let mut problems = Vec::new();
    let mut want = |ok: bool, what: String| {
        if !ok {
            problems.push(what);
        }
    };
    let retries = err.lines().filter(|l| l.contains("retry  fetch")).count();
    let opened = err.contains("breaker fetch: closed -> open");
    match file {
        "retries-bounded.json" => {
            want(
                retries == 2,
                format!("{retries} retries of fetch (expected 2)"),
            );
            want(
                !opened,
                "the breaker opened: the retry cap must stop it".into(),
            );
            // Three attempts with backoffs of 1 and 2 ms between them.
            let took = agent(report, "fetch")["duration_ms"].as_u64();
            want(
                took.is_some_and(|ms| ms >= 3),
                format!("fetch took {took:?} ms (expected at least its 3 ms of backoff)"),
            );
        }
        "breaker-opens.json" => {
            want(opened, "no `breaker fetch: closed -> open` line".into());
            want(
                retries == 1,
                format!("{retries} retries of fetch (expected 1)"),
            );
        }
        "budget-clamp.json" => {
            let survey = agent(report, "survey");
            want(
                survey["clamped"] == serde_json::json!(["max_model_calls"]),
                format!(
                    "survey clamped {} (expected [max_model_calls])",
                    survey["clamped"]
                ),
            );
            want(
                survey["report"]["model_calls"] == 4
                    && survey["report"]["reason"] == "max_model_calls",
                format!(
                    "survey's run: {} model calls, reason {} (expected 4, max_model_calls)",
                    survey["report"]["model_calls"], survey["report"]["reason"]
                ),
            );
            want(
                agent(report, "digest")["why"]["why"] == "budget_spent",
                format!(
                    "digest why {} (expected budget_spent)",
                    agent(report, "digest")["why"]
                ),
            );
            want(
                report["used"]["model_calls"] == 4,
                format!(
                    "the plan used {} model calls (expected 4)",
                    report["used"]["model_calls"]
                ),
            );
        }
        "execution-timeout.json" => {
            let elapsed = report["elapsed_ms"].as_u64().unwrap_or(u64::MAX);
            want(
                (300..2_000).contains(&elapsed),
                format!("elapsed {elapsed} ms (expected from 300 ms to under 2 s)"),
            );
            let crawl = agent(report, "crawl");
            want(
                crawl["clamped"]
                    .as_array()
                    .is_some_and(|c| c.iter().any(|f| f == "deadline_ms")),
                format!("crawl clamped {} (expected deadline_ms)", crawl["clamped"]),
            );
            // Cut at the plan's deadline, 300 ms in.
            let took = crawl["duration_ms"].as_u64().unwrap_or(u64::MAX);
            want(
                (250..2_000).contains(&took),
                format!("crawl took {took} ms (expected about 300)"),
            );
        }
        "max-phases.json" => {
            want(
                err.contains("warning: phase 2 of at most 2 starts"),
                "no warning that phase 2 of at most 2 starts".into(),
            );
        }
        "skip-cascades.json" => {
            let why = &agent(report, "compare")["why"];
            want(
                why["why"] == "dependency_skipped" && why["dependency"] == 0,
                format!("compare why {why} (expected dependency_skipped on agent 0)"),
            );
        }
        _ => {}
    }
    problems
}

#[test]
fn every_conformance_plan_meets_its_expect_block() {
    let files = json_files(&plans_dir());
    let names: BTreeSet<String> = files.iter().map(|f| file_name(f)).collect();
    for required in [
        "all-complete.json",
        "retries-bounded.json",
        "breaker-opens.json",
        "skip-degrades.json",
        "skip-cascades.json",
        "fail-stops-early.json",
        "max-phases.json",
        "execution-timeout.json",
        "budget-clamp.json",
    ] {
        assert!(names.contains(required), "spec/plans/{required} is missing");
    }
    let mut failures = Vec::new();
    for file in &files {
        for problem in check_plan(file) {
            failures.push(format!("{}: {problem}", file_name(file)));
        }
    }
    assert!(
        failures.is_empty(),
        "{} problem(s):\n{}",
        failures.len(),
        failures.join("\n")
    );
}

/// The inspected execution's task.
fn task_of(journal: &str, execution: &str) -> String {
    let out = terminus(&[
        "inspect",
        "--journal",
        journal,
        "--execution",
        execution,
        "--json",
    ]);
    assert_eq!(out.status.code(), Some(0), "inspect: {}", stderr(&out));
    let inspected = report_of(&out).expect("inspect prints JSON");
    inspected["task"]
        .as_str()
        .unwrap_or_else(|| panic!("no task in {inspected}"))
        .to_owned()
}

#[test]
fn results_flow_to_dependents_through_their_task_placeholders() {
    let dir = tempfile::tempdir().expect("a temp dir");
    let journal = dir.path().join("plans.db").to_string_lossy().into_owned();
    let plan = plans_dir()
        .join("all-complete.json")
        .to_string_lossy()
        .into_owned();
    let out = terminus(&[
        "orchestrate",
        &plan,
        "--journal",
        &journal,
        "--execution",
        "diamond",
        "--json",
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let report = report_of(&out).expect("the plan report");
    let result = |id: &str| {
        agent(&report, id)["result"]
            .as_str()
            .unwrap_or_else(|| panic!("{id} has no string result"))
            .to_owned()
    };
    assert_eq!(result("collect"), "pages: /, /about, /pricing");
    assert_eq!(
        task_of(&journal, "diamond/analyse/1"),
        format!("Analyse the copy of {}", result("collect"))
    );
    assert_eq!(
        task_of(&journal, "diamond/audit/1"),
        format!("Audit the links of {}", result("collect"))
    );
    assert_eq!(
        task_of(&journal, "diamond/report/1"),
        format!(
            "Write the site report from [{}] and [{}]",
            result("analyse"),
            result("audit")
        )
    );
    assert_eq!(result("report"), "report: 2 findings");
}

/// The problems each invalid plan must be refused with, in order (each line is
/// `terminus: FILE: ` and this).
fn refusals() -> BTreeMap<&'static str, Vec<&'static str>> {
    BTreeMap::from([
        (
            "cycle.json",
            vec![
                "cycle: collect -> analyse -> report -> collect",
                "cycle: analyse -> report -> analyse",
                "cycle: draft -> edit -> draft",
            ],
        ),
        (
            "missing-dependency.json",
            vec![
                "$.agents[1].depends_on[1]: no agent `crawl` in the plan",
                "$.agents[2].depends_on[0]: no agent `analysis` in the plan",
            ],
        ),
        (
            "duplicate-id.json",
            vec!["$.agents[2].id: duplicate id `collect` (first at $.agents[0])"],
        ),
        (
            "unsatisfiable.json",
            vec![
                "$.agents[1].depends_on[0]: unsatisfiable: `analysis` (on_error fail) depends on \
                 `research`, which may be skipped (on_error skip) without a degraded_result; give \
                 `research` a degraded_result or make `analysis` on_error skip",
            ],
        ),
        (
            "bad-limits.json",
            vec![
                "$.limits.max_phases: must be in 1..=1000, got 0",
                "$.limits.max_concurrency: must be in 1..=1024, got 0",
            ],
        ),
    ])
}

#[test]
fn invalid_plans_are_refused_before_anything_runs_one_line_per_problem() {
    let files = json_files(&plans_dir().join("invalid"));
    let refusals = refusals();
    let names: BTreeSet<String> = files.iter().map(|f| file_name(f)).collect();
    let known: BTreeSet<String> = refusals.keys().map(|k| (*k).to_owned()).collect();
    assert_eq!(
        names, known,
        "every invalid plan has its expected problems here"
    );
    for file in &files {
        let name = file_name(file);
        let shown = file.to_string_lossy().into_owned();
        let out = orchestrate(file);
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(2), "{name}: {err}");
        assert_eq!(stdout(&out), "", "{name}: nothing on stdout");
        let problems = &refusals[name.as_str()];
        let mut want: Vec<String> = problems
            .iter()
            .map(|p| format!("terminus: {shown}: {p}"))
            .collect();
        want.push(format!(
            "terminus: {shown}: {} problem(s); nothing was run",
            problems.len()
        ));
        let got: Vec<&str> = err.lines().collect();
        assert_eq!(got, want, "{name}: the stderr lines");
    }
}

/// Every elementary cycle of `deps` (`deps[i]`: the agents `i` depends on), each as the path
/// results flow along (a dependency before its dependent) from its agent first in the plan.
fn all_cycles(deps: &[Vec<usize>]) -> BTreeSet<Vec<usize>> {
    let n = deps.len();
    let feeds: Vec<Vec<usize>> = (0..n)
        .map(|d| (0..n).filter(|&i| deps[i].contains(&d)).collect())
        .collect();
    let mut found = BTreeSet::new();
    // Depth-first search of every simple path from every agent; a path back to its start is a
    // cycle, found once per agent on it and kept rotated to start at its first agent.
    fn walk(feeds: &[Vec<usize>], path: &mut Vec<usize>, found: &mut BTreeSet<Vec<usize>>) {
        let last = *path.last().expect("a path has an agent");
        for &next in &feeds[last] {
            if next == path[0] {
                let first = (0..path.len())
                    .min_by_key(|&k| path[k])
                    .expect("a cycle has an agent");
                let mut cycle = path[first..].to_vec();
                cycle.extend_from_slice(&path[..first]);
                found.insert(cycle);
            } else if !path.contains(&next) {
                path.push(next);
                walk(feeds, path, found);
                path.pop();
            }
        }
    }
    for start in 0..n {
        walk(&feeds, &mut vec![start], &mut found);
    }
    found
}

#[test]
fn the_cycle_plan_lists_every_cycle_it_has_and_no_other() {
    let file = plans_dir().join("invalid/cycle.json");
    let plan = read_json(&file);
    let agents = plan_agents(&plan);
    let index: BTreeMap<&str, usize> = agents
        .iter()
        .enumerate()
        .map(|(i, (id, _))| (id.as_str(), i))
        .collect();
    let deps: Vec<Vec<usize>> = agents
        .iter()
        .map(|(_, a)| {
            a["depends_on"]
                .as_array()
                .map(|d| {
                    d.iter()
                        .map(|id| index[id.as_str().expect("a dependency id")])
                        .collect()
                })
                .unwrap_or_default()
        })
        .collect();
    let cycles = all_cycles(&deps);
    assert!(cycles.len() >= 2, "the cycle plan has more than one cycle");

    let out = orchestrate(&file);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    let err = stderr(&out);
    let prefix = format!("terminus: {}: cycle: ", file.to_string_lossy());
    let listed: Vec<Vec<usize>> = err
        .lines()
        .filter_map(|l| l.strip_prefix(&prefix))
        .map(|path| {
            let ids: Vec<usize> = path
                .split(" -> ")
                .map(|id| {
                    *index
                        .get(id)
                        .unwrap_or_else(|| panic!("`{id}` in `{path}` is no agent of the plan"))
                })
                .collect();
            assert!(
                ids.len() >= 2 && ids.first() == ids.last(),
                "`{path}` is closed"
            );
            for pair in ids.windows(2) {
                assert!(
                    deps[pair[1]].contains(&pair[0]),
                    "`{path}`: {} does not depend on {}",
                    agents[pair[1]].0,
                    agents[pair[0]].0
                );
            }
            ids[..ids.len() - 1].to_vec()
        })
        .collect();
    assert!(
        err.lines().any(|l| l
            == format!(
                "terminus: {}: cycle: collect -> analyse -> report -> collect",
                file.to_string_lossy()
            )),
        "the three-agent cycle is listed with its path: {err}"
    );
    let unique: BTreeSet<Vec<usize>> = listed.iter().cloned().collect();
    assert_eq!(unique.len(), listed.len(), "no cycle listed twice: {err}");
    assert_eq!(unique, cycles, "every cycle listed, and only cycles: {err}");
}

#[test]
fn the_readme_has_a_row_for_every_plan() {
    let readme = std::fs::read_to_string(plans_dir().join("README.md")).expect("the README");
    let dir = plans_dir();
    let rows: Vec<String> = json_files(&dir)
        .iter()
        .map(|f| format!("| `{}` |", file_name(f)))
        .chain(
            json_files(&dir.join("invalid"))
                .iter()
                .map(|f| format!("| `invalid/{}` |", file_name(f))),
        )
        .collect();
    assert!(rows.len() >= 14, "all plans found: {rows:?}");
    for row in rows {
        assert_eq!(
            readme.lines().filter(|l| l.starts_with(&row)).count(),
            1,
            "spec/plans/README.md has one row starting {row}"
        );
    }
}
