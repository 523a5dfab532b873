//! The plan builder (`terminus plan split`): a task over many files, split into phases of a
//! few files each, each phase an agent that depends on the one before. One agent over forty
//! files runs out of budget or context; phases keep each run small, and each phase is told what
//! the previous one reported, so the work carries over.

use crate::limits::LimitsSpec;
use crate::plan::{AgentSpec, OnError, PlanFile, Problem};
use serde_json::Value;

/// What each phase runs.
#[derive(Debug, Clone, PartialEq)]
pub enum PhaseProgram {
    /// A live-agent config file, as the plan names it, and whether its policy scales
    /// (`budget_scale`): then each phase gets a `scale`, the number of its files.
    Agent {
        /// The config file.
        config: String,
        /// Its policy has a `budget_scale`.
        scales: bool,
    },
    /// A scenario, inline (its JSON object). If its policy has a `budget_scale`, each phase's
    /// copy gets a `"scale"`: the number of its files, so its budgets fit its share.
    Scenario(Value),
}

/// A task over `files` files, split into phases of `per_phase` files.
#[derive(Debug, Clone, PartialEq)]
pub struct Split {
    /// The plan's name.
    pub name: String,
    /// The files in scope.
    pub files: u64,
    /// Their names, in order, when known (`terminus plan split --glob`): each phase's task
    /// lists its own. Empty: the phases name their files by number only.
    pub names: Vec<String>,
    /// The files a phase takes (the last phase takes what is left).
    pub per_phase: u64,
    /// The task, given to every phase with the files it covers.
    pub task: String,
    /// What each phase runs.
    pub program: PhaseProgram,
}

/// The most phases a split makes: the largest `max_phases` a plan may set.
pub const MAX_SPLIT_PHASES: u64 = 1000;

/// The id of phase `n` (from 1).
fn phase_id(n: u64) -> String {
    format!("phase-{n}")
}

/// The plan of the split: phase `n` covers files `(n-1)·K+1` to `min(n·K, N)` and depends on
/// phase `n-1`, whose result its task quotes. Deterministic. The plan still goes through
/// [`crate::Plan::from_file`] before it is written or run; this refuses only what no plan could
/// fix (no files, empty phases, too many phases, a task with placeholders of its own, a
/// scenario that is not an object), naming the option.
pub fn split(s: &Split) -> Result<PlanFile, Problem> {
    if s.files == 0 {
        return Err(Problem::new("--files", "must be at least 1"));
    }
    if !s.names.is_empty() && u64::try_from(s.names.len()) != Ok(s.files) {
        return Err(Problem::new(
            "--files",
            format!("{} files, but {} names", s.files, s.names.len()),
        ));
    }
    if s.per_phase == 0 {
        return Err(Problem::new("--per-phase", "must be at least 1"));
    }
    if s.task.trim().is_empty() {
        return Err(Problem::new("--task", "must not be empty"));
    }
    if let Some(name) = crate::plan::placeholders(&s.task).next() {
        return Err(Problem::new(
            "--task",
            format!(
                "must not hold a placeholder ({{{name}}}): each phase's task quotes the one before"
            ),
        ));
    }
    let phases = s.files.div_ceil(s.per_phase);
    if phases > MAX_SPLIT_PHASES {
        return Err(Problem::new(
            "--per-phase",
            format!(
                "{} files at {} a phase make {phases} phases, more than {MAX_SPLIT_PHASES}",
                s.files, s.per_phase
            ),
        ));
    }
    if let PhaseProgram::Scenario(v) = &s.program
        && !v.is_object()
    {
        return Err(Problem::new("--scenario", "must be a JSON object"));
    }
    let agents = (1..=phases)
        .map(|n| {
            let from = (n - 1) * s.per_phase + 1;
            // Past u64 the product is past the files anyway, so the last file it is.
            let to = n.saturating_mul(s.per_phase).min(s.files);
            let mut task = format!(
                "{}\n\nPhase {n} of {phases}: files {from} to {to} of {}.",
                s.task, s.files
            );
            let named = usize::try_from(from - 1)
                .ok()
                .and_then(|start| s.names.get(start..usize::try_from(to).ok()?));
            if let Some(names) = named.filter(|n| !n.is_empty()) {
                task.pop();
                task.push(':');
                for name in names {
                    task.push_str("\n- ");
                    task.push_str(name);
                }
            }
            let depends_on = if n > 1 {
                let before = phase_id(n - 1);
                task.push_str(&format!("\n\nThe previous phase reported: {{{before}}}"));
                vec![before]
            } else {
                Vec::new()
            };
            let size = to - from + 1;
            let (scenario, agent, scale) = match &s.program {
                PhaseProgram::Agent { config, scales } => {
                    (None, Some(config.clone()), scales.then_some(size))
                }
                PhaseProgram::Scenario(v) => (Some(scaled(v, size)), None, None),
            };
            AgentSpec {
                id: phase_id(n),
                depends_on,
                on_error: OnError::Fail,
                retryable: false,
                estimated_duration_ms: None,
                degraded_result: None,
                scenario,
                agent,
                task: Some(task),
                scale,
            }
        })
        .collect();
    Ok(PlanFile {
        name: s.name.clone(),
        limits: LimitsSpec {
            // As deep as the plan is (the default, 20, would stop a longer split).
            max_phases: Some(phases),
            ..LimitsSpec::default()
        },
        agents,
        expect: None,
    })
}

/// The scenario with `"scale": files` when its policy scales its budgets.
fn scaled(scenario: &Value, files: u64) -> Value {
    let mut out = scenario.clone();
    let scales = scenario
        .get("policy")
        .and_then(|p| p.get("budget_scale"))
        .is_some();
    if scales && let Some(object) = out.as_object_mut() {
        object.insert("scale".into(), Value::from(files));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn of(files: u64, per_phase: u64) -> Split {
        Split {
            name: "audit".into(),
            files,
            per_phase,
            task: "Audit the files.".into(),
            names: Vec::new(),
            program: PhaseProgram::Agent {
                config: "agent.toml".into(),
                scales: false,
            },
        }
    }

    #[test]
    fn phases_cover_every_file_once_in_order() {
        let plan = split(&of(12, 5)).expect("splits");
        let tasks: Vec<&str> = plan
            .agents
            .iter()
            .filter_map(|a| a.task.as_deref())
            .collect();
        assert_eq!(plan.agents.len(), 3);
        assert!(
            tasks[0].ends_with("Phase 1 of 3: files 1 to 5 of 12."),
            "{}",
            tasks[0]
        );
        assert!(
            tasks[2].contains("Phase 3 of 3: files 11 to 12 of 12."),
            "{}",
            tasks[2]
        );
        assert!(tasks[2].ends_with("The previous phase reported: {phase-2}"));
        assert_eq!(plan.agents[0].depends_on, Vec::<String>::new());
        assert_eq!(plan.agents[2].depends_on, vec!["phase-2".to_owned()]);
        assert_eq!(plan.limits.max_phases, Some(3));
    }

    #[test]
    fn named_files_are_listed_in_their_phase_and_a_scaling_live_agent_gets_its_chunk() {
        let names: Vec<String> = ["a.rs", "b.rs", "c.rs", "d.rs", "e.rs"]
            .map(String::from)
            .to_vec();
        let plan = split(&Split {
            names: names.clone(),
            program: PhaseProgram::Agent {
                config: "agent.toml".into(),
                scales: true,
            },
            ..of(5, 2)
        })
        .expect("splits");
        let tasks: Vec<&str> = plan
            .agents
            .iter()
            .filter_map(|a| a.task.as_deref())
            .collect();
        assert!(
            tasks[0].ends_with("Phase 1 of 3: files 1 to 2 of 5:\n- a.rs\n- b.rs"),
            "{}",
            tasks[0]
        );
        assert!(
            tasks[2].contains("Phase 3 of 3: files 5 to 5 of 5:\n- e.rs\n\nThe previous"),
            "{}",
            tasks[2]
        );
        let scales: Vec<Option<u64>> = plan.agents.iter().map(|a| a.scale).collect();
        assert_eq!(scales, [Some(2), Some(2), Some(1)]);
        // A config whose policy does not scale gets no scale; names must match the count.
        let plain = split(&of(5, 2)).expect("splits");
        assert!(plain.agents.iter().all(|a| a.scale.is_none()));
        let wrong = split(&Split {
            names: names[..3].to_vec(),
            ..of(5, 2)
        });
        assert_eq!(
            wrong.map_err(|p| p.to_string()),
            Err("--files: 5 files, but 3 names".into())
        );
    }

    #[test]
    fn a_scaling_scenario_is_scaled_to_its_phase() {
        let scenario = json!({ "task": "t", "policy": { "budget_scale": {} }, "model": {} });
        let plan = split(&Split {
            program: PhaseProgram::Scenario(scenario),
            ..of(7, 3)
        })
        .expect("splits");
        let scales: Vec<&Value> = plan
            .agents
            .iter()
            .filter_map(|a| a.scenario.as_ref().and_then(|s| s.get("scale")))
            .collect();
        assert_eq!(scales, [&json!(3), &json!(3), &json!(1)]);
        let plain = split(&Split {
            program: PhaseProgram::Scenario(json!({ "task": "t" })),
            ..of(7, 3)
        })
        .expect("splits");
        assert!(plain.agents.iter().all(|a| {
            a.scenario
                .as_ref()
                .is_some_and(|s| s.get("scale").is_none())
        }));
    }

    #[test]
    fn bad_numbers_name_the_option() {
        let at = |s: Split| split(&s).expect_err("refused").to_string();
        assert_eq!(at(of(0, 5)), "--files: must be at least 1");
        assert_eq!(at(of(5, 0)), "--per-phase: must be at least 1");
        let huge = split(&of(u64::MAX, u64::MAX / 2 + 1)).expect("two phases");
        let last = huge.agents[1].task.as_deref().unwrap_or_default();
        assert!(
            last.contains(&format!("files {} to {} of", u64::MAX / 2 + 2, u64::MAX)),
            "{last}"
        );
        assert_eq!(
            at(of(5000, 1)),
            "--per-phase: 5000 files at 1 a phase make 5000 phases, more than 1000"
        );
        assert_eq!(
            at(Split {
                task: "Use {notes}.".into(),
                ..of(3, 1)
            }),
            "--task: must not hold a placeholder ({notes}): each phase's task quotes the one before"
        );
    }
}
