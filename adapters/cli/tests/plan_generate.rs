//! `terminus orchestrate --generate FILE --task TEXT`: a model writes the plan. A scripted
//! model server answers as a planner that keeps writing invalid plans would: each rejected plan
//! goes back to it with its problems named, at most `generator.max_attempts` calls, then the
//! fallback runs or the plan ends `no_valid_plan`. The agents are scenarios, so only the
//! planner is a model here.

mod common;

use common::{keyless_config, last_json, reply, terminus, text};
use serde_json::{Value, json};
use std::path::Path;
use terminus_fixture::Fixture;

fn member(id: &str, description: &str, result: &str) -> Value {
    json!({
        "id": id,
        "description": description,
        "task": format!("Do the {id} part."),
        "scenario": { "task": "(the plan's)", "model": { "turns": [ { "text": result } ] } }
    })
}

/// Seed 001's registry: research may be skipped with an empty default, analysis retries.
fn generator_file(dir: &Path, max_attempts: u32, fallback: bool) -> String {
    let mut research = member("research", "Finds sources on the topic.", "sources: a, b");
    research["on_error"] = json!("skip");
    research["degraded_result"] = json!([]);
    let mut analysis = member("analysis", "Analyses what research found.", "two findings");
    analysis["retryable"] = json!(true);
    let mut file = json!({
        "name": "seed-001",
        "registry": [research, analysis, member("report", "Writes the report.", "the report")],
        "generator": { "agent": "agent.toml", "max_attempts": max_attempts },
    });
    if fallback {
        file["fallback"] = json!([
            { "id": "research" },
            { "id": "report", "depends_on": ["research"], "task": "Report on {research}" }
        ]);
    }
    let path = dir.join("generate.json");
    std::fs::write(&path, file.to_string()).expect("write the generator file");
    path.to_string_lossy().into_owned()
}

const CYCLE: &str = r#"{"agents": [{"id": "research", "depends_on": ["report"]}, {"id": "analysis", "depends_on": ["research"]}, {"id": "report", "depends_on": ["analysis"]}]}"#;
const MISSING: &str = r#"{"agents": [{"id": "analysis", "depends_on": ["research"], "task": "Analyse {research}"}, {"id": "report", "depends_on": ["analysis"]}]}"#;
const VALID: &str = "```json\n{\"agents\": [{\"id\": \"research\", \"task\": \"Find sources.\"}, {\"id\": \"analysis\", \"depends_on\": [\"research\"], \"task\": \"Analyse {research}\"}, {\"id\": \"report\", \"depends_on\": [\"analysis\"], \"task\": \"Report on {analysis}\"}]}\n```";

async fn orchestrate(file: &str) -> std::process::Output {
    terminus(vec![
        "orchestrate".into(),
        "--generate".into(),
        file.into(),
        "--task".into(),
        "Audit the site.".into(),
        "--json".into(),
    ])
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cycle_then_a_missing_dependency_are_sent_back_and_the_valid_plan_runs() {
    let dir = tempfile::tempdir().expect("tempdir");
    let replies = [CYCLE, MISSING, VALID];
    let fixture = Fixture::start(replies.iter().map(|r| reply(r, &[], 1)).collect())
        .await
        .expect("a port");
    keyless_config(dir.path(), &fixture.url(), "");
    let file = generator_file(dir.path(), 3, true);
    let ran = orchestrate(&file).await;
    let stderr = text(&ran.stderr);
    assert_eq!(ran.status.code(), Some(0), "{stderr}");
    let report = last_json(&ran.stdout);
    assert_eq!(report["reason"], "all_complete", "{report}");
    let results: Vec<&Value> = report["agents"]
        .as_array()
        .expect("agents")
        .iter()
        .map(|a| &a["result"])
        .collect();
    assert_eq!(
        results,
        [
            &json!("sources: a, b"),
            &json!("two findings"),
            &json!("the report")
        ]
    );
    let generation = &report["generation"];
    assert_eq!(generation["source"], "after_feedback", "{generation}");
    assert_eq!(generation["attempts"], 3);
    assert_eq!(
        generation["rejections"],
        json!([
            { "attempt": 1, "problems": ["cycle: research -> analysis -> report -> research"],
              "reply": CYCLE },
            { "attempt": 2, "problems": ["$.agents[0].depends_on[0]: no agent `research` in the plan"],
              "reply": MISSING }
        ])
    );
    assert_eq!(
        generation["plan"],
        json!([
            { "id": "research", "depends_on": [], "task": "Find sources." },
            { "id": "analysis", "depends_on": ["research"], "task": "Analyse {research}" },
            { "id": "report", "depends_on": ["analysis"], "task": "Report on {analysis}" }
        ])
    );
    assert!(
        stderr.contains("plan attempt 1 of 3 rejected (1 problem(s)):\n  cycle: research"),
        "{stderr}"
    );
    assert!(stderr.contains("plan attempt 3 of 3 accepted"), "{stderr}");
    // The model was asked three times, without tools, and told why each plan was refused.
    let requests = fixture.requests();
    assert_eq!(requests.len(), 3);
    let last = requests[2].json();
    assert!(last.get("tools").is_none(), "{last}");
    let messages = last["messages"].as_array().expect("messages");
    assert_eq!(
        messages.len(),
        6,
        "system, task, and two plans with their feedback"
    );
    assert_eq!(messages[4]["content"], MISSING);
    let told = messages[5]["content"].as_str().expect("text");
    assert!(
        told.starts_with("The plan was refused (attempt 2 of 3):\n- $.agents[0].depends_on[0]"),
        "{told}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_planner_that_never_writes_a_valid_plan_gets_the_fallback() {
    let dir = tempfile::tempdir().expect("tempdir");
    let replies = ["I am sorry, I cannot plan this.", CYCLE];
    let fixture = Fixture::start(replies.iter().map(|r| reply(r, &[], 1)).collect())
        .await
        .expect("a port");
    keyless_config(dir.path(), &fixture.url(), "");
    let file = generator_file(dir.path(), 2, true);
    let ran = orchestrate(&file).await;
    assert_eq!(ran.status.code(), Some(0), "{}", text(&ran.stderr));
    let report = last_json(&ran.stdout);
    assert_eq!(report["generation"]["source"], "fallback", "{report}");
    assert_eq!(
        report["generation"]["plan"][1],
        json!({ "id": "report", "depends_on": ["research"], "task": "Report on {research}" })
    );
    let ids: Vec<&Value> = report["agents"]
        .as_array()
        .expect("agents")
        .iter()
        .map(|a| &a["id"])
        .collect();
    assert_eq!(ids, [&json!("research"), &json!("report")]);
    assert_eq!(fixture.count(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_fallback_the_plan_ends_no_valid_plan_and_nothing_runs() {
    let dir = tempfile::tempdir().expect("tempdir");
    let replies = [CYCLE, MISSING];
    let fixture = Fixture::start(replies.iter().map(|r| reply(r, &[], 1)).collect())
        .await
        .expect("a port");
    keyless_config(dir.path(), &fixture.url(), "");
    let file = generator_file(dir.path(), 2, false);
    let ran = orchestrate(&file).await;
    let stderr = text(&ran.stderr);
    assert_eq!(ran.status.code(), Some(1), "{stderr}");
    let report = last_json(&ran.stdout);
    assert_eq!(report["outcome"], "aborted");
    assert_eq!(report["reason"], "no_valid_plan");
    assert_eq!(report["agents"], json!([]));
    assert_eq!(report["generation"]["source"], "no_plan");
    assert_eq!(report["generation"]["plan"], json!([]));
    assert_eq!(
        report["generation"]["rejections"].as_array().map(Vec::len),
        Some(2)
    );
    assert!(
        stderr.contains("no valid plan in 2 attempts and no fallback"),
        "{stderr}"
    );
    assert_eq!(fixture.count(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bad_generator_file_is_exit_2_before_the_model_is_asked() {
    let dir = tempfile::tempdir().expect("tempdir");
    let fixture = Fixture::start(Vec::new()).await.expect("a port");
    keyless_config(dir.path(), &fixture.url(), "");
    let file = generator_file(dir.path(), 11, true);
    let mut bad: Value =
        serde_json::from_str(&std::fs::read_to_string(&file).expect("read")).expect("json");
    bad["fallback"][1]["depends_on"] = json!(["nobody"]);
    std::fs::write(&file, bad.to_string()).expect("write");
    let ran = orchestrate(&file).await;
    let stderr = text(&ran.stderr);
    assert_eq!(ran.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("$.generator.max_attempts: 11 is out of range 1..=10"),
        "{stderr}"
    );
    assert!(
        stderr.contains("$.fallback[1].depends_on[0]: no agent `nobody` in the plan"),
        "{stderr}"
    );
    bad["generator"] = json!({});
    bad["fallback"] = Value::Null;
    std::fs::write(&file, bad.to_string()).expect("write");
    let ran = orchestrate(&file).await;
    let stderr = text(&ran.stderr);
    assert_eq!(ran.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("$.generator.agent: missing"), "{stderr}");
    let ran = terminus(vec!["orchestrate".into(), "--task".into(), "t".into()]).await;
    assert_eq!(ran.status.code(), Some(2), "{}", text(&ran.stderr));
    assert_eq!(
        fixture.count(),
        0,
        "the model is never asked for a bad file"
    );
}

/// With `--journal` the plan that runs is stored with the orchestration: `terminus resume`
/// goes on with it, and the model is not asked again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_generated_plan_is_stored_and_resumed_without_asking_the_model_again() {
    let dir = tempfile::tempdir().expect("tempdir");
    let fixture = Fixture::start(vec![reply(CYCLE, &[], 1), reply(VALID, &[], 1)])
        .await
        .expect("a port");
    keyless_config(dir.path(), &fixture.url(), "");
    let file = generator_file(dir.path(), 3, false);
    let journal = dir.path().join("plans.db").to_string_lossy().into_owned();
    let args = |more: &[&str]| -> Vec<String> { more.iter().map(|s| (*s).to_owned()).collect() };
    let ran = terminus(args(&[
        "orchestrate",
        "--generate",
        &file,
        "--task",
        "Audit the site.",
        "--journal",
        &journal,
        "--execution",
        "gen-1",
        "--json",
    ]))
    .await;
    assert_eq!(ran.status.code(), Some(0), "{}", text(&ran.stderr));
    let generation = last_json(&ran.stdout)["generation"].clone();
    assert_eq!(generation["source"], "after_feedback");
    // `inspect` shows the plan as the journal keeps it: how the model wrote it, each agent.
    let inspected = terminus(args(&[
        "inspect",
        "--journal",
        &journal,
        "--execution",
        "gen-1",
    ]))
    .await;
    assert_eq!(
        inspected.status.code(),
        Some(0),
        "{}",
        text(&inspected.stderr)
    );
    let shown = text(&inspected.stdout);
    assert!(
        shown.starts_with("plan seed-001 (execution gen-1): complete (all_complete)\n"),
        "{shown}"
    );
    assert!(
        shown.contains(
            "written by a model: after_feedback (2 of at most 3 model calls, 1 rejected)\n  \
             attempt 1 rejected:\n    cycle: research -> analysis -> report -> research\n"
        ),
        "{shown}"
    );
    assert!(
        shown.contains("  analysis  complete  1 attempt, after research\n"),
        "{shown}"
    );
    assert!(
        shown
            .contains("one agent's run: terminus inspect --journal J --execution gen-1/research/1"),
        "{shown}"
    );
    let as_json = terminus(args(&[
        "inspect",
        "--journal",
        &journal,
        "--execution",
        "gen-1",
        "--json",
    ]))
    .await;
    assert_eq!(last_json(&as_json.stdout)["generation"], generation);
    let resumed = terminus(args(&[
        "resume",
        "--journal",
        &journal,
        "--execution",
        "gen-1",
        "--json",
    ]))
    .await;
    assert_eq!(resumed.status.code(), Some(0), "{}", text(&resumed.stderr));
    let report = last_json(&resumed.stdout);
    assert_eq!(report["reason"], "all_complete", "{report}");
    let agents: Vec<(&Value, &Value)> = report["agents"]
        .as_array()
        .expect("agents")
        .iter()
        .map(|a| (&a["id"], &a["attempts"]))
        .collect();
    assert_eq!(
        agents,
        [
            (&json!("research"), &json!(1)),
            (&json!("analysis"), &json!(1)),
            (&json!("report"), &json!(1))
        ]
    );
    assert_eq!(report["generation"], generation, "kept with the plan");
    assert_eq!(
        fixture.count(),
        2,
        "the model wrote the plan once (two calls)"
    );
}
