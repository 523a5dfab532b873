//! `terminus orchestrate --generate FILE --task TEXT`: a model writes the plan
//! (`docs/plans.md`, "A plan written by a model"). The generator file is checked before the
//! model is asked (every problem on its own line, exit 2); each plan the model writes is
//! validated as a plan file is, and a rejected one goes back to it with its problems, one
//! progress line per attempt.

use crate::agent::{LiveAgent, StoredAgent};
use crate::error::CliError;
use crate::orchestrate::{context, folder_of, read_file, refused};
use std::path::Path;
use terminus_kernel::Finish;
use terminus_orchestrator::{GenerateFile, Generation, Generator, Plan, Reply, Step};
use terminus_runtime::{ModelError, ModelRequest, Purpose};

/// The plan's name a generator file gives (its `name`, else `plan`), for a report written
/// when no plan ran.
pub(crate) fn name(path: &Path) -> String {
    read_file::<GenerateFile>(path).map_or_else(|_| "plan".into(), |file| file.name)
}

/// Asks the generator's model for a plan: the plan to run (none when no written plan was
/// valid and there is no fallback) and what the generation came to.
pub(crate) async fn generate(
    path: &Path,
    task: &str,
) -> Result<(Option<Plan>, Generation), CliError> {
    let shown = path.display().to_string();
    let base = folder_of(path);
    let cx = context(&base);
    let file: GenerateFile = read_file(path).map_err(|e| e.context(&shown))?;
    let Some(agent) = file.generator.agent.clone() else {
        return Err(CliError::Invalid(format!(
            "{shown}: $.generator.agent: missing: the live-agent config whose model writes the plan"
        )));
    };
    let mut generator = Generator::new(file, task, &cx).map_err(|p| refused(&p, &shown))?;
    let config = base.join(&agent);
    let live = StoredAgent::read(&config)
        .and_then(|stored| LiveAgent::new(&stored))
        .map_err(|e| e.context(format!("{shown}: $.generator.agent")))?;
    let model = live.model();
    let max = generator.generation().max_attempts;
    eprintln!(
        "terminus: asking {} for a plan (at most {max} attempts)",
        live.file()
    );
    loop {
        let messages = match generator.step() {
            Step::Ask(messages) => messages.to_vec(),
            Step::Run(plan) => {
                let generation = generator.generation();
                eprintln!(
                    "terminus: the plan runs: {} ({} agents: {})",
                    generation.source,
                    plan.agents.len(),
                    plan.agents
                        .iter()
                        .map(|a| a.id.as_str())
                        .collect::<Vec<_>>()
                        .join(", ")
                );
                return Ok((Some(*plan), generation));
            }
            Step::NoPlan => {
                eprintln!(
                    "terminus: no valid plan in {max} attempts and no fallback: nothing runs"
                );
                return Ok((None, generator.generation()));
            }
        };
        let attempt = generator.generation().attempts + 1;
        let request = ModelRequest {
            messages: &messages,
            tools: &[],
            tools_enabled: false,
            purpose: Purpose::Plan { attempt },
        };
        match model.complete(request).await {
            Ok(turn) if matches!(turn.finish, Finish::Stop | Finish::ToolCalls) => {
                generator.answer(Reply::Text(&turn.text), &cx);
            }
            Ok(turn) => generator.answer(Reply::Cut(&turn.text), &cx),
            Err(ModelError::Failure(failure)) => {
                generator.answer(Reply::Failed(&failure.to_string()), &cx);
            }
            Err(ModelError::Fault(fault)) => {
                generator.answer(Reply::Failed(&fault.to_string()), &cx);
            }
        }
        let generation = generator.generation();
        match generation.rejections.last() {
            Some(rejected) if rejected.attempt == attempt => {
                eprintln!(
                    "terminus: plan attempt {attempt} of {max} rejected ({} problem(s)):",
                    rejected.problems.len()
                );
                for problem in &rejected.problems {
                    eprintln!("  {problem}");
                }
            }
            _ => eprintln!("terminus: plan attempt {attempt} of {max} accepted"),
        }
    }
}
