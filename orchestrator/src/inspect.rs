//! What `terminus inspect` says of a durable orchestration: the plan, how a model wrote it
//! (each rejected plan with its problems), and each agent's state, from the journal alone
//! (the spec keeps the plan and the generation, the cells the progress and the report).

use crate::conduct::{AgentCell, agent_key, attempt_execution};
use crate::error::OrchestrateError;
use crate::generate::Generation;
use crate::plan::PlanFile;
use crate::report::PlanReport;
use crate::run::{report_key, stored_generation, stored_plan};
use crate::schedule::{PlanReason, Saved};
use serde::Serialize;
use std::fmt::Write as _;
use terminus_runtime::Store;

/// A durable orchestration as its journal keeps it.
#[derive(Debug, Clone, Serialize)]
pub struct PlanInspection {
    /// The orchestration's execution id.
    pub execution: String,
    /// The plan's name.
    pub name: String,
    /// How it ended, when it did.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<PlanReason>,
    /// How a model wrote the plan, when one did.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub generation: Option<Generation>,
    /// Each agent, in plan order.
    pub agents: Vec<AgentInspection>,
}

/// One agent of a [`PlanInspection`].
#[derive(Debug, Clone, Serialize)]
pub struct AgentInspection {
    /// Its id.
    pub id: String,
    /// The agents it depends on.
    pub depends_on: Vec<String>,
    /// `complete`, `failed`, `skipped`, `degraded`, `not_run`; or, before the plan ended,
    /// `running`, `retrying` or `waiting`.
    pub state: String,
    /// Runs made.
    pub attempts: u32,
    /// Its last run's execution (inspect it on its own).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_execution: Option<String>,
    /// Why it did not complete, or its last run's error.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub why: Option<String>,
}

/// Reads what the journal keeps of the orchestration `execution`: `None` when it is not one
/// (no such execution, or a single run).
pub async fn inspect_plan(
    store: &dyn Store,
    execution: &str,
) -> Result<Option<PlanInspection>, OrchestrateError> {
    let Some(spec) = store.spec(execution).await? else {
        return Ok(None);
    };
    let Some(plan) = stored_plan(&spec) else {
        return Ok(None);
    };
    let file: PlanFile = serde_json::from_value(plan.clone())
        .map_err(|e| OrchestrateError::Corrupt(format!("the plan of `{execution}`: {e}")))?;
    let report: Option<PlanReport> = match store.cell(&report_key(execution)).await? {
        Some(cell) => Some(serde_json::from_value(cell.value).map_err(|e| {
            OrchestrateError::Corrupt(format!("cell `{}`: {e}", report_key(execution)))
        })?),
        None => None,
    };
    let mut agents = Vec::with_capacity(file.agents.len());
    for a in &file.agents {
        let ended = report
            .as_ref()
            .and_then(|r| r.agents.iter().find(|x| x.id == a.id));
        let agent = match ended {
            Some(r) => AgentInspection {
                id: a.id.clone(),
                depends_on: a.depends_on.clone(),
                state: r.status.name().to_owned(),
                attempts: r.attempts,
                last_execution: r.last_execution.clone(),
                why: r
                    .error
                    .clone()
                    .or_else(|| r.why.as_ref().map(|w| w.name().to_owned())),
            },
            None => {
                let key = agent_key(execution, &a.id);
                let cell: Option<AgentCell> = match store.cell(&key).await? {
                    Some(c) => Some(
                        serde_json::from_value(c.value)
                            .map_err(|e| OrchestrateError::Corrupt(format!("cell `{key}`: {e}")))?,
                    ),
                    None => None,
                };
                let (state, attempts, why) = match cell.as_ref().map(|c| &c.saved) {
                    None | Some(Saved::Fresh) => ("waiting".to_owned(), 0, None),
                    Some(Saved::Started { attempts }) => ("running".to_owned(), *attempts, None),
                    Some(Saved::Retrying { attempts }) => (
                        "retrying".to_owned(),
                        *attempts,
                        cell.as_ref().and_then(|c| c.error.clone()),
                    ),
                    Some(Saved::Ended(end)) => (
                        end.status.name().to_owned(),
                        end.attempts,
                        cell.as_ref()
                            .and_then(|c| c.error.clone())
                            .or_else(|| end.why.as_ref().map(|w| w.name().to_owned())),
                    ),
                };
                AgentInspection {
                    id: a.id.clone(),
                    depends_on: a.depends_on.clone(),
                    state,
                    attempts,
                    last_execution: (attempts > 0)
                        .then(|| attempt_execution(execution, &a.id, attempts)),
                    why,
                }
            }
        };
        agents.push(agent);
    }
    Ok(Some(PlanInspection {
        execution: execution.to_owned(),
        name: file.name.clone(),
        reason: report.as_ref().map(|r| r.reason),
        generation: report
            .and_then(|r| r.generation)
            .or_else(|| stored_generation(&spec)),
        agents,
    }))
}

impl PlanInspection {
    /// As `terminus inspect` prints it.
    pub fn text(&self) -> String {
        let mut out = String::new();
        let state = match self.reason {
            Some(reason) => format!(
                "{} ({})",
                if reason.is_complete() {
                    "complete"
                } else {
                    "aborted"
                },
                reason.name()
            ),
            None => "not ended (`terminus resume` goes on with it)".to_owned(),
        };
        let _ = writeln!(
            out,
            "plan {} (execution {}): {state}",
            self.name, self.execution
        );
        if let Some(g) = &self.generation {
            let _ = writeln!(
                out,
                "written by a model: {} ({} of at most {} model calls, {} rejected)",
                g.source,
                g.attempts,
                g.max_attempts,
                g.rejections.len()
            );
            for r in &g.rejections {
                let what = if r.cut {
                    "cut by the output limit"
                } else {
                    "rejected"
                };
                let _ = writeln!(out, "  attempt {} {what}:", r.attempt);
                for p in &r.problems {
                    let _ = writeln!(out, "    {p}");
                }
            }
        }
        let _ = writeln!(out, "agents:");
        let width = self.agents.iter().map(|a| a.id.len()).max().unwrap_or(0);
        for a in &self.agents {
            let runs = if a.attempts == 1 {
                "attempt"
            } else {
                "attempts"
            };
            let _ = write!(
                out,
                "  {:width$}  {:<9} {} {runs}",
                a.id, a.state, a.attempts
            );
            if !a.depends_on.is_empty() {
                let _ = write!(out, ", after {}", a.depends_on.join(", "));
            }
            if let Some(why) = &a.why {
                let _ = write!(out, ": {why}");
            }
            let _ = writeln!(out);
        }
        if let Some(run) = self.agents.iter().find_map(|a| a.last_execution.as_ref()) {
            let _ = writeln!(
                out,
                "one agent's run: terminus inspect --journal J --execution {run}"
            );
        }
        out
    }
}
