//! `terminus plan split`: a task over N files split into phases of K files, each an agent that
//! depends on the one before; the plan it writes validates and runs through `terminus
//! orchestrate`, each phase's scenario scaled to its files. Bad input is exit 2, nothing written.

mod common;

use common::{keyless_config, last_json, reply, run_terminus, terminus, text};
use serde_json::{Value, json};
use std::path::Path;
use terminus_fixture::Fixture;

/// One read and an answer: 3 steps, which the base budget of 1 step does not allow; 2 steps a
/// file (up to 20) do, for any phase of at least one file.
fn phase_scenario(dir: &Path) -> String {
    let scenario = json!({
        "task": "Read the files of this phase.",
        "policy": {
            "max_steps": 1,
            "budget_scale": { "per_unit": { "max_steps": 2 }, "max": { "max_steps": 20 } }
        },
        "model": { "turns": [
            { "tool_calls": [ { "name": "read", "arguments": { "file": "next" } } ] },
            { "text": "Phase read.", "needs_more_work": false }
        ] },
        "tools": { "read": { "results": [ { "ok": "contents" } ], "repeat": "last" } }
    });
    let path = dir.join("phase.json");
    std::fs::write(&path, scenario.to_string()).expect("write the scenario");
    path.to_string_lossy().into_owned()
}

#[test]
fn a_split_plan_runs_its_phases_in_order_each_scaled_to_its_files() {
    let dir = tempfile::tempdir().expect("tempdir");
    let scenario = phase_scenario(dir.path());
    let plan = dir.path().join("plan.json").to_string_lossy().into_owned();
    let out = run_terminus(&[
        "plan",
        "split",
        "--files",
        "7",
        "--per-phase",
        "3",
        "--task",
        "Audit the modules.",
        "--scenario",
        &scenario,
        "--out",
        &plan,
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let file: Value =
        serde_json::from_str(&std::fs::read_to_string(&plan).expect("written")).expect("JSON");
    let agents = file["agents"].as_array().expect("agents");
    let shape: Vec<(&Value, &Value, &Value)> = agents
        .iter()
        .map(|a| (&a["id"], &a["depends_on"], &a["scenario"]["scale"]))
        .collect();
    assert_eq!(
        shape,
        [
            (&json!("phase-1"), &json!([]), &json!(3)),
            (&json!("phase-2"), &json!(["phase-1"]), &json!(3)),
            (&json!("phase-3"), &json!(["phase-2"]), &json!(1)),
        ]
    );
    assert_eq!(
        agents[2]["task"],
        "Audit the modules.\n\nPhase 3 of 3: files 7 to 7 of 7.\n\nThe previous phase reported: \
         {phase-2}"
    );

    // Unscaled, the phase's own budget of 1 step stops it.
    let alone = run_terminus(&["run", &scenario, "--json"]);
    assert_eq!(last_json(&alone.stdout)["reason"], "max_steps");

    let ran = run_terminus(&["orchestrate", &plan, "--json"]);
    assert_eq!(ran.status.code(), Some(0), "{}", text(&ran.stderr));
    let report = last_json(&ran.stdout);
    assert_eq!(report["reason"], "all_complete");
    let order: Vec<(&Value, &Value)> = report["agents"]
        .as_array()
        .expect("agents")
        .iter()
        .map(|a| (&a["id"], &a["status"]))
        .collect();
    assert_eq!(order.len(), 3);
    assert!(
        order.iter().all(|(_, status)| *status == "complete"),
        "{order:?}"
    );
}

#[test]
fn bad_input_is_exit_2_and_writes_nothing() {
    let dir = tempfile::tempdir().expect("tempdir");
    let scenario = phase_scenario(dir.path());
    let plan = dir.path().join("plan.json");
    let out_arg = plan.to_string_lossy().into_owned();
    let bad_scenario = dir.path().join("bad.json");
    std::fs::write(
        &bad_scenario,
        r#"{ "task": "t", "model": { "turnz": [] } }"#,
    )
    .expect("write");
    let bad_scenario = bad_scenario.to_string_lossy().into_owned();
    let cases: [(&[&str], &str); 4] = [
        (
            &["--files", "0", "--per-phase", "3", "--scenario", &scenario],
            "--files: must be at least 1",
        ),
        (
            &["--files", "3", "--per-phase", "0", "--scenario", &scenario],
            "--per-phase: must be at least 1",
        ),
        (
            &[
                "--files",
                "3",
                "--per-phase",
                "1",
                "--agent",
                "missing.toml",
            ],
            "--agent missing.toml",
        ),
        (
            &[
                "--files",
                "3",
                "--per-phase",
                "1",
                "--scenario",
                &bad_scenario,
            ],
            "$.agents[0].scenario",
        ),
    ];
    for (args, want) in cases {
        let mut all = vec!["plan", "split", "--task", "Audit.", "--out", &out_arg];
        all.extend_from_slice(args);
        let out = run_terminus(&all);
        assert_eq!(
            out.status.code(),
            Some(2),
            "{args:?}: {}",
            text(&out.stderr)
        );
        assert!(
            text(&out.stderr).contains(want),
            "{args:?}: {}",
            text(&out.stderr)
        );
        assert!(!plan.exists(), "{args:?} wrote a plan");
    }
}

/// `plan split --glob` on a real folder: each phase names its files; with a live agent whose
/// policy scales, each phase's agent gets the scale of its own files and runs under it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_glob_split_names_each_phases_files_and_scales_each_live_phase() {
    let dir = tempfile::tempdir().expect("tempdir");
    common::project(
        dir.path(),
        &[
            "src/a.rs",
            "src/b.rs",
            "src/c.rs",
            "src/deep/d.rs",
            "src/e.rs",
            "notes.md",
        ],
    );
    let fixture = Fixture::start((0..3).map(|_| reply("Phase done.", &[], 1)).collect())
        .await
        .expect("a port");
    let config = keyless_config(
        dir.path(),
        &fixture.url(),
        "[policy]\nmax_steps = 2\n[policy.budget_scale.per_unit]\nmax_steps = 3\n\
         [policy.budget_scale.max]\nmax_steps = 50\n",
    );
    let config = config.to_string_lossy().into_owned();
    let split = std::process::Command::new(env!("CARGO_BIN_EXE_terminus"))
        .args([
            "plan",
            "split",
            "--glob",
            "src/**/*.rs",
            "--per-phase",
            "2",
            "--task",
            "Audit the modules.",
            "--agent",
            &config,
            "--out",
            "plan.json",
        ])
        .current_dir(dir.path())
        .output()
        .expect("the binary runs");
    assert_eq!(split.status.code(), Some(0), "{}", text(&split.stderr));
    let plan = dir.path().join("plan.json");
    let file: Value =
        serde_json::from_str(&std::fs::read_to_string(&plan).expect("written")).expect("JSON");
    let agents = file["agents"].as_array().expect("agents");
    let tasks: Vec<&str> = agents.iter().filter_map(|a| a["task"].as_str()).collect();
    assert_eq!(
        tasks[0],
        "Audit the modules.\n\nPhase 1 of 3: files 1 to 2 of 5:\n- src/a.rs\n- src/b.rs"
    );
    assert!(
        tasks[1].starts_with(
            "Audit the modules.\n\nPhase 2 of 3: files 3 to 4 of 5:\n- src/c.rs\n- src/deep/d.rs\n\n"
        ),
        "{}",
        tasks[1]
    );
    assert!(
        tasks[2].contains("files 5 to 5 of 5:\n- src/e.rs\n"),
        "{}",
        tasks[2]
    );
    let scales: Vec<&Value> = agents.iter().map(|a| &a["scale"]).collect();
    assert_eq!(scales, [&json!(2), &json!(2), &json!(1)]);

    let plan = plan.to_string_lossy().into_owned();
    let ran = terminus(vec!["orchestrate".into(), plan, "--json".into()]).await;
    assert_eq!(ran.status.code(), Some(0), "{}", text(&ran.stderr));
    let report = last_json(&ran.stdout);
    assert_eq!(report["reason"], "all_complete", "{report}");
    let scaled: Vec<(&Value, &Value)> = report["agents"]
        .as_array()
        .expect("agents")
        .iter()
        .map(|a| {
            (
                &a["report"]["scale"]["units"],
                &a["report"]["scale"]["budgets"]["max_steps"],
            )
        })
        .collect();
    // 2 steps, 3 more a file.
    assert_eq!(
        scaled,
        [
            (&json!(2), &json!(8)),
            (&json!(2), &json!(8)),
            (&json!(1), &json!(5))
        ]
    );
}
