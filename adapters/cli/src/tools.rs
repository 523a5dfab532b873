//! `terminus tools CONFIG.toml list | call NAME 'JSON'`: the `[[mcp]]` servers of a live-agent
//! config, checked by hand before an agent runs on them.

use crate::config::AgentConfig;
use crate::{INVALID, ToolsAction};
use std::path::Path;
use terminus_kernel::ToolOutcome;
use terminus_runtime::{ToolSet, render_outcome};
use terminus_tools::McpTools;

/// Runs the subcommand; the exit code.
pub(crate) async fn run(path: &Path, action: ToolsAction) -> u8 {
    let (config, dir) = match AgentConfig::load(path) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("terminus: {e}");
            return INVALID;
        }
    };
    let arguments = match &action {
        ToolsAction::List => None,
        ToolsAction::Call { arguments, .. } => match serde_json::from_str(arguments) {
            Ok(v @ serde_json::Value::Object(_)) => Some(v),
            Ok(_) => {
                eprintln!("terminus: the arguments must be a JSON object: {arguments}");
                return INVALID;
            }
            Err(e) => {
                eprintln!("terminus: the arguments are not JSON ({e}): {arguments}");
                return INVALID;
            }
        },
    };
    let servers = match McpTools::connect(&config.mcp_configs(&dir)).await {
        Ok(s) => s,
        Err(e) => {
            eprintln!("terminus: {}: {e}", path.display());
            return INVALID;
        }
    };
    let mut set = ToolSet::new();
    servers.add_to(&mut set);
    let code = match action {
        ToolsAction::List => {
            for spec in set.specs() {
                let description = spec
                    .description
                    .split_whitespace()
                    .collect::<Vec<_>>()
                    .join(" ");
                println!("{}\t{description}", spec.name);
            }
            0
        }
        ToolsAction::Call { name, .. } => match set.get(&name) {
            None => {
                eprintln!(
                    "terminus: no tool named `{name}`; the tools are: {}",
                    set.names().collect::<Vec<_>>().join(", ")
                );
                INVALID
            }
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
                        0
                    }
                    ToolOutcome::Error { kind, message } => {
                        eprintln!("{}: {message}", kind.as_str());
                        1
                    }
                }
            }
        },
    };
    servers.shutdown().await;
    code
}
