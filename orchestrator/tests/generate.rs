//! The plan generator (`docs/plans.md`, "A plan written by a model"), driven as a host drives
//! it: each rejected plan goes back to the model with its problems named, at most
//! `max_attempts` model calls, then the fallback or `no_valid_plan`.

use proptest::prelude::*;
use serde_json::{Value, json};
use std::path::Path;
use terminus_orchestrator::{
    Context, GenerateFile, Generator, Own, PlanReason, PlanReport, PlanSource, Problem, Reply, Step,
};
use terminus_runtime::{Message, Role};

fn no_env(_: &str) -> Option<String> {
    None
}

fn no_live(_: &Path, _: Option<u64>) -> Result<Own, String> {
    Err("no live agents here".into())
}

/// What validation reads: no environment, no live agents, scenarios as the CLI reads them.
fn cx() -> Context<'static> {
    Context {
        base: Path::new("."),
        env: &no_env,
        live: &no_live,
        scenario: &terminus_scenario::plan::script,
        host_agents: false,
    }
}

fn member(id: &str, description: &str, reply: &str) -> Value {
    json!({
        "id": id,
        "description": description,
        "task": format!("Do the {id} part."),
        "scenario": { "task": "(the plan's)", "model": { "turns": [ { "text": reply } ] } }
    })
}

/// Seed 001's shape: a research agent that may be skipped with a degraded default, an
/// analysis that retries, a report.
fn file(fallback: bool, max_attempts: u32) -> GenerateFile {
    let mut research = member("research", "Finds sources on the topic.", "sources: a, b");
    research["on_error"] = json!("skip");
    research["degraded_result"] = json!([]);
    let mut analysis = member("analysis", "Analyses what research found.", "two findings");
    analysis["retryable"] = json!(true);
    let mut file = json!({
        "name": "seed-001",
        "registry": [research, analysis, member("report", "Writes the report.", "the report")],
        "generator": { "max_attempts": max_attempts },
    });
    if fallback {
        file["fallback"] = json!([
            { "id": "research" },
            { "id": "report", "depends_on": ["research"], "task": "Report on {research}" }
        ]);
    }
    serde_json::from_value(file).expect("a generator file")
}

fn generate<'r>(
    file: GenerateFile,
    replies: impl IntoIterator<Item = &'r str>,
) -> (Result<Vec<String>, ()>, Generator, Vec<Vec<Message>>) {
    let cx = cx();
    let mut generator = Generator::new(file, "Audit the site.", &cx).expect("a valid file");
    let mut replies = replies.into_iter();
    let mut asked = Vec::new();
    loop {
        let reply = match generator.step() {
            Step::Ask(messages) => {
                asked.push(messages.to_vec());
                replies.next().expect("a scripted reply for each ask")
            }
            Step::Run(plan) => {
                let ids = plan.agents.iter().map(|a| a.id.clone()).collect();
                return (Ok(ids), generator, asked);
            }
            Step::NoPlan => return (Err(()), generator, asked),
        };
        generator.answer(Reply::Text(reply), &cx);
    }
}

const CYCLE: &str = r#"{"agents": [
  {"id": "research", "depends_on": ["report"]},
  {"id": "analysis", "depends_on": ["research"], "task": "Analyse {research}"},
  {"id": "report", "depends_on": ["analysis"], "task": "Report on {analysis}"}]}"#;
const MISSING: &str = r#"{"agents": [
  {"id": "analysis", "depends_on": ["research"], "task": "Analyse {research}"},
  {"id": "report", "depends_on": ["analysis"]}]}"#;
const VALID: &str = r#"Here is the plan:
```json
{"agents": [
  {"id": "research", "depends_on": [], "task": "Find sources on the site."},
  {"id": "analysis", "depends_on": ["research"], "task": "Analyse {research}"},
  {"id": "report", "depends_on": ["analysis"], "task": "Report on {analysis}"}]}
```"#;

#[test]
fn a_cycle_then_a_missing_dependency_are_named_and_the_valid_plan_runs() {
    let (ran, generator, asked) = generate(file(true, 3), [CYCLE, MISSING, VALID]);
    assert_eq!(
        ran,
        Ok(vec!["research".into(), "analysis".into(), "report".into()])
    );
    let generation = generator.generation();
    assert_eq!(generation.source, PlanSource::AfterFeedback);
    assert_eq!(generation.attempts, 3);
    assert_eq!(generation.rejections.len(), 2);
    assert_eq!(
        generation.rejections[0].problems,
        ["cycle: research -> analysis -> report -> research"]
    );
    assert_eq!(
        generation.rejections[1].problems,
        ["$.agents[0].depends_on[0]: no agent `research` in the plan"]
    );
    // The model was told: its second ask holds its first plan and the problem, the third both.
    assert_eq!(asked.len(), 3);
    assert_eq!(asked[0].len(), 2);
    assert_eq!(asked[1].len(), 4);
    assert_eq!(asked[1][2].role, Role::Assistant);
    assert_eq!(asked[1][2].content, CYCLE);
    let told = &asked[2][5].content;
    assert!(told.contains("attempt 2 of 3"), "{told}");
    assert!(
        told.contains("$.agents[0].depends_on[0]: no agent `research`"),
        "{told}"
    );
    assert!(
        told.contains("its agents: research, analysis, report"),
        "{told}"
    );
    // The system prompt lists the registry with its descriptions.
    assert!(
        asked[0][0]
            .content
            .contains("- research: Finds sources on the topic.")
    );
    assert_eq!(asked[0][1].content, "The task: Audit the site.");
}

#[test]
fn a_model_that_never_writes_a_valid_plan_gets_the_fallback_after_its_attempts() {
    let (ran, generator, asked) = generate(file(true, 3), [CYCLE, MISSING, "I cannot plan this."]);
    assert_eq!(ran, Ok(vec!["research".into(), "report".into()]));
    let generation = generator.generation();
    assert_eq!(generation.source, PlanSource::Fallback);
    assert_eq!((generation.attempts, asked.len()), (3, 3));
    assert_eq!(
        generation.rejections[2].problems,
        ["$: the reply holds no JSON object: write the plan as one JSON object"]
    );
}

#[test]
fn without_a_fallback_there_is_no_plan_and_the_report_says_no_valid_plan() {
    let (ran, mut generator, asked) = generate(file(false, 2), [CYCLE, MISSING]);
    assert_eq!(ran, Err(()));
    assert_eq!(asked.len(), 2);
    assert!(matches!(generator.step(), Step::NoPlan), "it stays ended");
    let report = PlanReport::no_plan("x1", "seed-001", generator.generation());
    assert_eq!(report.reason, PlanReason::NoValidPlan);
    assert_eq!(report.exit_code(), 1);
    let line: Value = serde_json::from_str(&report.to_json_line()).expect("json");
    assert_eq!(line["outcome"], "aborted");
    assert_eq!(line["reason"], "no_valid_plan");
    assert_eq!(line["generation"]["source"], "no_plan");
    assert_eq!(line["generation"]["attempts"], 2);
    assert_eq!(line["generation"]["max_attempts"], 2);
}

#[test]
fn a_valid_first_plan_runs_as_written() {
    let (ran, generator, asked) = generate(file(true, 3), [VALID]);
    assert_eq!(
        ran,
        Ok(vec!["research".into(), "analysis".into(), "report".into()])
    );
    assert_eq!(asked.len(), 1);
    let generation = generator.generation();
    assert_eq!(generation.source, PlanSource::FirstTry);
    assert!(generation.rejections.is_empty());
}

#[test]
fn a_written_plan_is_checked_field_by_field_and_the_registry_keeps_its_own_fields() {
    let bad = r#"{"agents": [
      {"id": "research", "on_error": "fail"},
      {"id": "writer", "depends_on": [3]},
      {"id": 7},
      "report"], "steps": 3}"#;
    let unknown = r#"{"agents": [{"id": "writer"}, {"id": "research", "task": "Find sources."}]}"#;
    let (_, generator, _) = generate(file(false, 2), [bad, unknown]);
    let rejections = generator.generation().rejections;
    assert_eq!(
        rejections[0].problems,
        [
            "$.steps: unknown field: a plan has only `agents`",
            "$.agents[0].on_error: unknown field: an agent has `id`, `depends_on` and `task` (the rest is the registry's)",
            "$.agents[1].depends_on[0]: must be an agent id (a string)",
            "$.agents[2].id: must be a string",
            "$.agents[3]: an agent is an object with `id`, `depends_on` and `task`",
        ]
    );
    assert_eq!(
        rejections[1].problems,
        [
            "$.agents[0].id: `writer` is not in the registry (its agents: research, analysis, report)"
        ]
    );
}

#[test]
fn a_failed_model_call_is_an_attempt_the_next_call_is_told_of() {
    let cx = cx();
    let mut generator = Generator::new(file(false, 2), "t", &cx).expect("valid");
    assert!(matches!(generator.step(), Step::Ask(_)));
    generator.answer(Reply::Failed("connection refused"), &cx);
    let Step::Ask(messages) = generator.step() else {
        panic!("a second ask")
    };
    assert_eq!(messages.len(), 3);
    assert!(
        messages[2]
            .content
            .contains("model: the model call failed: connection refused")
    );
    generator.answer(Reply::Text(VALID), &cx);
    assert!(matches!(generator.step(), Step::Run(_)));
    assert_eq!(generator.generation().source, PlanSource::AfterFeedback);
}

#[test]
fn a_bad_generator_file_is_refused_with_every_problem_named() {
    let mut bad = serde_json::to_value(file(true, 3)).expect("json");
    bad["generator"]["max_attempts"] = json!(0);
    bad["registry"][1]["description"] = json!(" ");
    bad["registry"][2]["scenario"] = json!({ "task": "t" });
    bad["fallback"] = json!([{ "id": "research" }, { "id": "nobody", "depends_on": ["research"] }]);
    let file: GenerateFile = serde_json::from_value(bad).expect("a generator file");
    let cx = cx();
    let problems: Vec<String> = Generator::new(file, "t", &cx)
        .expect_err("refused")
        .iter()
        .map(Problem::to_string)
        .collect();
    assert_eq!(
        problems[0],
        "$.registry[1].description: empty: the model chooses agents by their description"
    );
    assert_eq!(
        problems[1],
        "$.generator.max_attempts: 0 is out of range 1..=10"
    );
    assert!(
        problems[2].starts_with("$.registry[2].scenario"),
        "{problems:?}"
    );
    assert_eq!(
        problems[3],
        "$.fallback[1].id: `nobody` is not in the registry (its agents: research, analysis, report)"
    );
    assert_eq!(problems.len(), 4, "{problems:?}");
}

proptest! {
    /// Whatever the model writes, it is asked at most `max_attempts` times; the first valid
    /// plan within them runs, else the fallback (when there is one) or no plan.
    #[test]
    fn the_model_is_asked_at_most_max_attempts_times(
        max_attempts in 1u32..=10,
        fallback in any::<bool>(),
        picks in proptest::collection::vec(0usize..4, 10),
    ) {
        let pool = [CYCLE, MISSING, "no plan", VALID];
        let replies: Vec<&str> = picks.iter().map(|&i| pool[i]).collect();
        let (ran, generator, asked) = generate(file(fallback, max_attempts), replies.iter().copied());
        let first_valid = picks.iter().position(|&i| i == 3).filter(|&i| i < max_attempts as usize);
        let generation = generator.generation();
        prop_assert!(asked.len() <= max_attempts as usize);
        prop_assert_eq!(generation.attempts as usize, asked.len());
        match first_valid {
            Some(i) => {
                prop_assert_eq!(asked.len(), i + 1);
                prop_assert_eq!(ran.map(|ids| ids.len()), Ok(3));
                prop_assert_eq!(generation.source, if i == 0 { PlanSource::FirstTry } else { PlanSource::AfterFeedback });
            }
            None => {
                prop_assert_eq!(asked.len(), max_attempts as usize);
                prop_assert_eq!(generation.rejections.len(), max_attempts as usize);
                if fallback {
                    prop_assert_eq!(ran.map(|ids| ids.len()), Ok(2));
                    prop_assert_eq!(generation.source, PlanSource::Fallback);
                } else {
                    prop_assert_eq!(ran, Err(()));
                    prop_assert_eq!(generation.source, PlanSource::NoPlan);
                }
            }
        }
    }
}

/// The root of the workspace.
fn root() -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the workspace")
        .to_path_buf()
}

/// Seed 001's plan generator on the real model (`examples/seed-001/trials.sh`): each recorded
/// trial's replies, fed again to the generator, give the recorded generation exactly (every
/// verdict is the code's, not the recording's), and the table in `docs/plans.md` is rendered
/// from them (`TERMINUS_BLESS=1` rewrites it).
#[test]
fn recorded_real_model_trials_replay_to_their_generation_and_the_table_in_docs() {
    let dir = root().join("examples/seed-001");
    let text = std::fs::read_to_string(dir.join("generate.json")).expect("generate.json");
    let file: GenerateFile = serde_json::from_str(&text).expect("a generator file");
    let mut trials: Vec<Value> = std::fs::read_dir(dir.join("trials"))
        .expect("examples/seed-001/trials")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "json"))
        .map(|p| serde_json::from_str(&std::fs::read_to_string(&p).expect("read")).expect("json"))
        .collect();
    trials.sort_by_key(|t| t["trial"].as_u64());
    assert!(
        trials.len() >= 5,
        "5 recorded trials, found {}",
        trials.len()
    );
    let cx = Context {
        base: &dir,
        env: &no_env,
        live: &no_live,
        scenario: &terminus_scenario::plan::script,
        host_agents: false,
    };
    let mut rows = String::new();
    let mut counts = [0usize; 4];
    for trial in &trials {
        let recorded = &trial["generation"];
        let task = trial["task"].as_str().expect("task");
        // (text, cut) or the failed call's error.
        let mut replies: Vec<Result<(String, bool), String>> = recorded["rejections"]
            .as_array()
            .expect("rejections")
            .iter()
            .map(|r| match r["reply"].as_str() {
                Some(reply) => Ok((reply.to_owned(), r["cut"] == true)),
                None => Err(r["problems"][0]
                    .as_str()
                    .and_then(|p| p.strip_prefix("model: the model call failed: "))
                    .expect("a failed call's problem")
                    .to_owned()),
            })
            .collect();
        replies.extend(
            recorded["reply"]
                .as_str()
                .map(|r| Ok((r.to_owned(), false))),
        );
        let mut generator = Generator::new(file.clone(), task, &cx).expect("a valid file");
        let mut replies = replies.into_iter();
        loop {
            match generator.step() {
                Step::Ask(_) => {}
                Step::Run(_) | Step::NoPlan => break,
            }
            let next = replies.next().expect("a recorded reply for each ask");
            let reply = match &next {
                Ok((text, false)) => Reply::Text(text),
                Ok((text, true)) => Reply::Cut(text),
                Err(error) => Reply::Failed(error),
            };
            generator.answer(reply, &cx);
        }
        let replayed = serde_json::to_value(generator.generation()).expect("json");
        assert_eq!(
            &replayed, recorded,
            "trial {} replays to its generation",
            trial["trial"]
        );
        let source = generator.generation().source;
        counts[source as usize] += 1;
        let plan: Vec<String> = recorded["plan"]
            .as_array()
            .expect("plan")
            .iter()
            .map(|w| {
                let deps: Vec<&str> = w["depends_on"]
                    .as_array()
                    .map(|d| d.iter().filter_map(Value::as_str).collect())
                    .unwrap_or_default();
                match deps.is_empty() {
                    true => format!("`{}`", w["id"].as_str().unwrap_or("?")),
                    false => format!(
                        "`{}` ← {}",
                        w["id"].as_str().unwrap_or("?"),
                        deps.join(", ")
                    ),
                }
            })
            .collect();
        let problems: Vec<String> = recorded["rejections"]
            .as_array()
            .expect("rejections")
            .iter()
            .map(|r| {
                let all: Vec<&str> = r["problems"]
                    .as_array()
                    .map(|p| p.iter().filter_map(Value::as_str).collect())
                    .unwrap_or_default();
                format!("{}: {}", r["attempt"], all.join("; ").replace('|', "\\|"))
            })
            .collect();
        rows.push_str(&format!(
            "| {} | {} | {} | {} | {} | {} ({}) | {} s |\n",
            trial["trial"],
            source,
            recorded["attempts"],
            if problems.is_empty() {
                "none".into()
            } else {
                problems.join("<br>")
            },
            plan.join("; "),
            trial["outcome"].as_str().unwrap_or("?"),
            trial["reason"].as_str().unwrap_or("?"),
            trial["seconds"],
        ));
    }
    let table = format!(
        "<!-- generate-table -->\n\
         {} trials: **{} valid at the first try, {} after feedback, {} fell back, {} without a plan**.\n\n\
         | trial | plan from | model calls | rejected (attempt: problems) | the plan that ran | plan | time |\n\
         |---|---|---|---|---|---|---|\n{rows}<!-- /generate-table -->",
        trials.len(),
        counts[PlanSource::FirstTry as usize],
        counts[PlanSource::AfterFeedback as usize],
        counts[PlanSource::Fallback as usize],
        counts[PlanSource::NoPlan as usize],
    );
    let docs = root().join("docs/plans.md");
    let stored = std::fs::read_to_string(&docs).expect("docs/plans.md");
    let (Some(start), Some(end)) = (
        stored.find("<!-- generate-table -->"),
        stored.find("<!-- /generate-table -->"),
    ) else {
        panic!("docs/plans.md has no generate-table markers");
    };
    let current = &stored[start..end + "<!-- /generate-table -->".len()];
    if std::env::var_os("TERMINUS_BLESS").is_some() {
        std::fs::write(&docs, stored.replace(current, &table)).expect("write docs/plans.md");
        return;
    }
    assert_eq!(
        current, table,
        "docs/plans.md's table differs; TERMINUS_BLESS=1 rewrites it"
    );
}

#[test]
fn a_task_that_says_nothing_is_refused_and_an_unquoted_dependency_is_appended() {
    let empty = r#"{"agents": [{"id": "research", "task": "..."},
      {"id": "report", "depends_on": ["research"], "task": "... {research} ..."}]}"#;
    let unquoted = r#"{"agents": [{"id": "research", "task": "Find sources."},
      {"id": "report", "depends_on": ["research"], "task": "Write the report."}]}"#;
    let cx = cx();
    let mut generator = Generator::new(file(false, 2), "t", &cx).expect("valid");
    generator.answer(Reply::Text(empty), &cx);
    assert_eq!(
        generator.generation().rejections[0].problems,
        [
            "$.agents[0].task: `...` says nothing the agent can do: write its task in words (quote a dependency's result as {id})",
            "$.agents[1].task: `... {research} ...` says nothing the agent can do: write its task in words (quote a dependency's result as {id})",
        ]
    );
    generator.answer(Reply::Text(unquoted), &cx);
    let Step::Run(plan) = generator.step() else {
        panic!("the second plan runs")
    };
    assert_eq!(plan.agents[0].task.as_deref(), Some("Find sources."));
    assert_eq!(
        plan.agents[1].task.as_deref(),
        Some("Write the report.\n\nThe results it builds on:\n- research: {research}")
    );
    // As written in the report: the model's words, not the appended line.
    assert_eq!(
        generator.generation().plan[1].task.as_deref(),
        Some("Write the report.")
    );
}

#[test]
fn an_optional_agent_is_named_so_and_depending_on_it_is_refused_in_the_writers_words() {
    let mut with_optional = serde_json::to_value(file(false, 2)).expect("json");
    with_optional["registry"][0]["degraded_result"] = Value::Null;
    let file: GenerateFile = serde_json::from_value(with_optional).expect("a generator file");
    let required = r#"{"agents": [{"id": "research", "task": "Find sources."},
      {"id": "report", "depends_on": ["research"], "task": "Report on {research}"}]}"#;
    let (_, generator, asked) = generate(file, [required, required]);
    assert!(asked[0][0].content.contains(
        "- research: Finds sources on the topic. (optional: it may give no result, so only optional agents may depend on it)\n"
    ));
    assert!(
        !asked[0][0]
            .content
            .contains("- report: Writes the report. (optional")
    );
    assert_eq!(
        generator.generation().rejections[0].problems,
        [
            "$.agents[1].depends_on[0]: `report` must not be skipped, but depends on `research`, which is optional and may give no result: remove `research` from `report`'s depends_on"
        ]
    );
}

#[test]
fn a_reply_cut_at_the_output_limit_is_not_read_and_the_model_is_told_so() {
    let cx = cx();
    let mut generator = Generator::new(file(false, 2), "t", &cx).expect("valid");
    // Cut, even though the text happens to hold a whole plan: a cut reply is never read.
    generator.answer(Reply::Cut(VALID), &cx);
    let rejection = &generator.generation().rejections[0];
    assert!(rejection.cut);
    assert_eq!(
        rejection.problems,
        [
            "$: the reply was cut at the model's output limit before the plan ended: write a shorter plan (a short task each), as one JSON object"
        ]
    );
    let Step::Ask(messages) = generator.step() else {
        panic!("asked again")
    };
    assert_eq!(messages[2].content, VALID);
    assert!(
        messages[3]
            .content
            .contains("cut at the model's output limit")
    );
}

#[test]
fn a_task_quoting_its_own_agent_is_told_to_drop_the_quote_not_to_depend_on_itself() {
    let own = r#"{"agents": [{"id": "research", "task": "Find sources, then check {research}."}]}"#;
    let (_, generator, _) = generate(file(false, 1), [own]);
    assert_eq!(
        generator.generation().rejections[0].problems,
        [
            "$.agents[0].task: `{research}` is `research`'s own result, which its task cannot have: remove it from the task"
        ]
    );
}
