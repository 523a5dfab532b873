//! `terminus tools CONFIG.toml list | call NAME 'JSON'`: the `[[mcp]]` servers of a live-agent
//! config, checked by hand before an agent runs on them.

use crate::config::AgentConfig;
use crate::error::CliError;
use clap::Subcommand;
use std::path::Path;
use terminus_kernel::ToolOutcome;
use terminus_runtime::{ToolSet, render_outcome};
use terminus_tools::McpTools;

#[derive(Debug, Subcommand)]
pub(crate) enum ToolsAction {
    /// One tool a line: `name<TAB>description`.
    List,
    /// Call one tool with JSON arguments.
    Call {
        /// The tool's name, as the model sees it.
        name: String,
        /// The arguments: a JSON object.
        #[arg(default_value = "{}")]
        arguments: String,
    },
}

/// Runs the subcommand: 0, or 1 when the tool called answers with an error (printed as
/// `kind: message`, the tool's answer, on stderr).
pub(crate) async fn run(path: &Path, action: ToolsAction) -> Result<u8, CliError> {
    let (config, dir) = AgentConfig::load(path).map_err(|e| CliError::Invalid(e.to_string()))?;
    let arguments = match &action {
        ToolsAction::List => None,
        ToolsAction::Call { arguments, .. } => match serde_json::from_str(arguments) {
            Ok(v @ serde_json::Value::Object(_)) => Some(v),
            Ok(_) => {
                return Err(CliError::Invalid(format!(
                    "the arguments must be a JSON object: {arguments}"
                )));
            }
            Err(e) => {
                return Err(CliError::Invalid(format!(
                    "the arguments are not JSON ({e}): {arguments}"
                )));
            }
        },
    };
    let configs = config
        .mcp_configs(&dir)
        .map_err(|e| CliError::Invalid(format!("{}: {e}", path.display())))?;
    let servers = McpTools::connect(&configs)
        .await
        .map_err(|e| CliError::Invalid(format!("{}: {e}", path.display())))?;
    let mut set = ToolSet::new();
    servers.add_to(&mut set);
    let result = match action {
        ToolsAction::List => {
            for spec in set.specs() {
                let description = spec
                    .description
                    .split_whitespace()
                    .collect::<Vec<_>>()
                    .join(" ");
                println!("{}\t{description}", spec.name);
            }
            Ok(0)
        }
        ToolsAction::Call { name, .. } => match set.get(&name) {
            None => Err(CliError::Invalid(format!(
                "no tool named `{name}`; the tools are: {}",
                set.names().collect::<Vec<_>>().join(", ")
            ))),
            Some(tool) => {
                let outcome = tool
                    .call(arguments.unwrap_or_default())
                    .await
                    .unwrap_or_else(|fault| ToolOutcome::Error {
                        kind: terminus_kernel::ToolErrorKind::Failed,
                        message: fault.to_string(),
                    });
                match &outcome {
                    ToolOutcome::Ok(_) => {
                        println!("{}", render_outcome(&outcome));
                        Ok(0)
                    }
                    ToolOutcome::Error { kind, message } => {
                        // The tool's answer, not the command's failure: exit 1, as an aborted
                        // run's report.
                        eprintln!("{}: {message}", kind.as_str());
                        Ok(1)
                    }
                }
            }
        },
    };
    servers.shutdown().await;
    result
}
