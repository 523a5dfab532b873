//! The live-agent config file (`docs/live-agents.md`, "The config"): TOML, every unknown key
//! refused with its path, every value checked before anything starts.

use serde::Deserialize;
use std::path::{Path, PathBuf};
use std::time::Duration;
use terminus_kernel::Policy;
use terminus_llm::{ApiKey, LlmConfig, Provider};
use terminus_scenario::ContextSpec;
use terminus_tools::{Elicitation, McpAuth, McpConfig, McpProtocol, McpTransport};

/// The whole file.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct AgentConfig {
    /// A system message before the task.
    pub(crate) system_prompt: Option<String>,
    /// `[agent]`: what the agent reads at start.
    #[serde(default)]
    pub(crate) agent: AgentSection,
    /// The model. Required by `terminus agent`; `terminus tools` needs only `[[mcp]]`.
    pub(crate) model: Option<ModelSection>,
    /// The kernel policy: the scenario `policy` fields, same names, same defaults.
    #[serde(default)]
    pub(crate) policy: Policy,
    /// The context window: the scenario `context` fields.
    pub(crate) context: Option<ContextSpec>,
    /// MCP servers; their tools are the agent's tools.
    #[serde(default)]
    pub(crate) mcp: Vec<McpSection>,
    /// Who judges completion claims.
    pub(crate) verifier: Option<VerifierSection>,
}

/// `[agent]`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct AgentSection {
    /// Files read at start and appended to the system prompt, each under a heading naming it
    /// (`AGENTS.md`): relative to the config's folder when the file is there, else to the
    /// folder the agent starts in.
    #[serde(default)]
    pub(crate) context_files: Vec<String>,
}

/// `[model]`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct ModelSection {
    pub(crate) provider: String,
    pub(crate) base_url: String,
    pub(crate) model: String,
    pub(crate) api_key_env: Option<String>,
    pub(crate) stream: Option<bool>,
    pub(crate) timeout_ms: Option<u64>,
    pub(crate) idle_timeout_ms: Option<u64>,
    pub(crate) max_output_tokens: Option<u32>,
}

/// One `[[mcp]]` entry.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct McpSection {
    pub(crate) name: String,
    pub(crate) command: Option<Vec<String>>,
    pub(crate) url: Option<String>,
    pub(crate) tool_timeout_ms: Option<u64>,
    pub(crate) idempotent: Option<bool>,
    /// Tools whose calls wait for a person's approval (`docs/approvals.md`).
    #[serde(default)]
    pub(crate) approval: Vec<String>,
    /// Tools answered from outside instead of run.
    #[serde(default)]
    pub(crate) deferred: Vec<String>,
    /// OAuth for an HTTP server (`auth = { ... }`).
    pub(crate) auth: Option<McpAuthSection>,
    /// How elicitation requests are answered: `"decline"` (default), `"defaults"` or
    /// `"person"`.
    pub(crate) elicitation: Option<String>,
    /// The protocol revision the session speaks: `"2025-11-25"` (default) or `"2026-07-28"`.
    pub(crate) protocol: Option<String>,
}

/// `[[mcp]] auth = { ... }`: OAuth 2.1 for a streamable-HTTP server. The secret is named by
/// the environment variable that holds it, never written in the file.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct McpAuthSection {
    pub(crate) client_id: Option<String>,
    pub(crate) client_secret_env: Option<String>,
    pub(crate) client_metadata_url: Option<String>,
    #[serde(default)]
    pub(crate) scopes: Vec<String>,
    pub(crate) redirect_uri: Option<String>,
    pub(crate) client_name: Option<String>,
}

/// `[verifier]`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct VerifierSection {
    pub(crate) kind: String,
}

/// A config that cannot be used: the message names the file and the key.
#[derive(Debug)]
pub(crate) struct ConfigError(pub(crate) String);

impl std::fmt::Display for ConfigError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl AgentConfig {
    /// Reads and checks `path`.
    pub(crate) fn load(path: &Path) -> Result<(AgentConfig, PathBuf), ConfigError> {
        let file = path.display();
        let text = std::fs::read_to_string(path)
            .map_err(|e| ConfigError(format!("{file}: cannot read: {e}")))?;
        let config = AgentConfig::parse(&text).map_err(|e| ConfigError(format!("{file}: {e}")))?;
        let dir = path
            .parent()
            .map(Path::to_path_buf)
            .unwrap_or_else(|| PathBuf::from("."));
        Ok((config, dir))
    }

    /// Parses and checks a config's text.
    pub(crate) fn parse(text: &str) -> Result<AgentConfig, String> {
        let de = toml::Deserializer::parse(text).map_err(|e| e.to_string())?;
        let config: AgentConfig = serde_path_to_error::deserialize(de).map_err(|e| {
            let path = e.path().to_string();
            let inner = e.into_inner();
            let message = inner.message().to_owned();
            if path == "." {
                message
            } else {
                format!("{}: {message}", key_path(&path))
            }
        })?;
        config.check()?;
        Ok(config)
    }

    fn check(&self) -> Result<(), String> {
        if let Some(model) = &self.model {
            if Provider::from_name(&model.provider).is_none() {
                return Err(format!(
                    "[model].provider: unknown provider {:?}, expected one of \"openai\", \"openai-responses\", \"anthropic\"",
                    model.provider
                ));
            }
            if !(model.base_url.starts_with("http://") || model.base_url.starts_with("https://")) {
                return Err(format!(
                    "[model].base_url: {:?} is not an http:// or https:// URL",
                    model.base_url
                ));
            }
            if model.timeout_ms == Some(0) {
                return Err("[model].timeout_ms: must be at least 1".into());
            }
            if model.idle_timeout_ms == Some(0) {
                return Err("[model].idle_timeout_ms: must be at least 1".into());
            }
        }
        self.policy
            .validate()
            .map_err(|e| format!("[policy].{}: {}", e.field, e.problem))?;
        if let Some(context) = &self.context {
            context
                .policy()
                .validate()
                .map_err(|e| format!("[context].{}: {}", e.field, e.problem))?;
        }
        if let Some(i) = self
            .agent
            .context_files
            .iter()
            .position(|f| f.trim().is_empty())
        {
            return Err(format!(
                "[agent].context_files[{i}]: the file name is empty"
            ));
        }
        let mut names = std::collections::BTreeSet::new();
        for (i, server) in self.mcp.iter().enumerate() {
            let at = format!("[[mcp]] #{} `{}`", i + 1, server.name);
            if server.name.is_empty() {
                return Err(format!("[[mcp]] #{}: name is empty", i + 1));
            }
            if !names.insert(server.name.as_str()) {
                return Err(format!("{at}: another [[mcp]] entry has this name"));
            }
            match (&server.command, &server.url) {
                (Some(_), Some(_)) => {
                    return Err(format!("{at}: give either command or url, not both"));
                }
                (None, None) => return Err(format!("{at}: give a command or a url")),
                (Some(c), None) if c.is_empty() => return Err(format!("{at}: command is empty")),
                _ => {}
            }
            if server.tool_timeout_ms == Some(0) {
                return Err(format!("{at}: tool_timeout_ms must be at least 1"));
            }
            for (field, list) in [
                ("approval", &server.approval),
                ("deferred", &server.deferred),
            ] {
                if let Some(i) = list.iter().position(|t| t.trim().is_empty()) {
                    return Err(format!("{at}: {field}[{i}] is empty"));
                }
            }
            if let Some(e) = &server.elicitation
                && !matches!(e.as_str(), "decline" | "defaults" | "person")
            {
                return Err(format!(
                    "{at}: elicitation: unknown value {e:?}, expected \"decline\", \"defaults\" \
                     or \"person\""
                ));
            }
            if let Some(p) = &server.protocol
                && protocol(p).is_none()
            {
                return Err(format!(
                    "{at}: protocol: unknown value {p:?}, expected \"{INITIALIZE}\" or \"{STATELESS}\""
                ));
            }
            if let Some(auth) = &server.auth {
                if server.url.is_none() {
                    return Err(format!("{at}: auth is for a url server, not a command"));
                }
                if auth.client_secret_env.is_some() && auth.client_id.is_none() {
                    return Err(format!(
                        "{at}: auth.client_secret_env needs auth.client_id (a pre-registered client)"
                    ));
                }
                if let Some(u) = &auth.client_metadata_url
                    && !u.starts_with("https://")
                {
                    return Err(format!(
                        "{at}: auth.client_metadata_url must be an https:// URL"
                    ));
                }
            }
            if let Some(both) = server.approval.iter().find(|t| server.deferred.contains(t)) {
                return Err(format!(
                    "{at}: `{both}` is in both approval and deferred: a tool is approved or \
                     answered from outside, not both"
                ));
            }
        }
        if let Some(v) = &self.verifier
            && !matches!(v.kind.as_str(), "rules" | "model")
        {
            return Err(format!(
                "[verifier].kind: unknown kind {:?}, expected one of \"rules\", \"model\"",
                v.kind
            ));
        }
        Ok(())
    }

    /// The MCP servers. A relative program path in a command is taken from the config's folder
    /// when such a file exists there; otherwise from `PATH`.
    pub(crate) fn mcp_configs(&self, dir: &Path) -> Vec<McpConfig> {
        self.mcp
            .iter()
            .map(|s| {
                let transport = match (&s.command, &s.url) {
                    (Some(command), _) => {
                        let mut command = command.clone();
                        if let Some(program) = command.first_mut() {
                            let local = dir.join(&*program);
                            if program.contains('/') && local.exists() {
                                *program = local.to_string_lossy().into_owned();
                            }
                        }
                        McpTransport::Stdio { command }
                    }
                    (None, url) => McpTransport::Http {
                        url: url.clone().unwrap_or_default(),
                    },
                };
                let mut config = McpConfig::new(s.name.clone(), transport);
                if let Some(ms) = s.tool_timeout_ms {
                    config.tool_timeout = Duration::from_millis(ms);
                }
                config.idempotent = s.idempotent.unwrap_or(false);
                config.approval.clone_from(&s.approval);
                config.deferred.clone_from(&s.deferred);
                config.elicitation = match s.elicitation.as_deref() {
                    Some("defaults") => Elicitation::Defaults,
                    Some("person") => Elicitation::Person,
                    _ => Elicitation::Decline,
                };
                if let Some(p) = s.protocol.as_deref().and_then(protocol) {
                    config.protocol = p;
                }
                config.auth = s.auth.as_ref().map(|a| McpAuth {
                    client_id: a.client_id.clone(),
                    client_secret: a
                        .client_secret_env
                        .as_deref()
                        .and_then(|name| std::env::var(name).ok())
                        .filter(|v| !v.is_empty()),
                    client_metadata_url: a.client_metadata_url.clone(),
                    scopes: a.scopes.clone(),
                    redirect_uri: a.redirect_uri.clone(),
                    client_name: a.client_name.clone(),
                });
                config
            })
            .collect()
    }

    /// The system prompt the agent starts with: `system_prompt`, then each of
    /// `[agent].context_files` under a heading naming it. A relative file is taken from `dir`
    /// (the config's folder) when it is there, else from `cwd` (the folder the agent starts in);
    /// a file found in neither, or that cannot be read, is an error naming it.
    pub(crate) fn system_prompt_with_files(
        &self,
        dir: &Path,
        cwd: &Path,
    ) -> Result<Option<String>, String> {
        if self.agent.context_files.is_empty() {
            return Ok(self.system_prompt.clone());
        }
        let mut prompt = self.system_prompt.clone().unwrap_or_default();
        for (i, name) in self.agent.context_files.iter().enumerate() {
            let field = format!("[agent].context_files[{i}]");
            let given = Path::new(name);
            let path = [dir.join(given), cwd.join(given)]
                .into_iter()
                .find(|p| p.is_file())
                .ok_or_else(|| {
                    if given.is_absolute() {
                        format!("{field}: {name:?}: no such file")
                    } else {
                        format!(
                            "{field}: {name:?}: no such file in the config's folder ({}) or the \
                             current folder ({})",
                            dir.display(),
                            cwd.display()
                        )
                    }
                })?;
            let text = std::fs::read_to_string(&path)
                .map_err(|e| format!("{field}: cannot read {}: {e}", path.display()))?;
            if !prompt.is_empty() {
                prompt.push_str("\n\n");
            }
            prompt.push_str("## ");
            prompt.push_str(name);
            prompt.push_str("\n\n");
            prompt.push_str(text.trim_end());
        }
        Ok(Some(prompt))
    }

    /// The model client's config; the key comes from the environment now.
    pub(crate) fn llm_config(&self) -> Result<LlmConfig, String> {
        let Some(m) = &self.model else {
            return Err("[model]: missing; a live agent needs a model".into());
        };
        let provider = Provider::from_name(&m.provider)
            .ok_or_else(|| format!("[model].provider: unknown provider {:?}", m.provider))?;
        let mut config = LlmConfig::new(provider, m.base_url.clone(), m.model.clone());
        config.api_key = m.api_key_env.as_deref().and_then(ApiKey::from_env);
        config.stream = m.stream.unwrap_or(true);
        if let Some(ms) = m.timeout_ms {
            config.timeout = Duration::from_millis(ms);
        }
        config.idle_timeout = m.idle_timeout_ms.map(Duration::from_millis);
        config.max_output_tokens = m.max_output_tokens;
        Ok(config)
    }
}

/// `[[mcp]] protocol = "2025-11-25"`: the `initialize` handshake (the default).
const INITIALIZE: &str = "2025-11-25";
/// `[[mcp]] protocol = "2026-07-28"`: `server/discover` and per-request metadata.
const STATELESS: &str = "2026-07-28";

/// The protocol revision an `[[mcp]] protocol` value names.
fn protocol(value: &str) -> Option<McpProtocol> {
    match value {
        INITIALIZE => Some(McpProtocol::Initialize),
        STATELESS => Some(McpProtocol::Stateless),
        _ => None,
    }
}

/// serde_path_to_error's `model.provider` as the config's own words: `[model].provider`.
fn key_path(path: &str) -> String {
    match path.split_once('.') {
        Some((table, rest)) if !table.contains('[') => format!("[{table}].{rest}"),
        _ => path.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const GOOD: &str = r#"
system_prompt = "You are careful."
[model]
provider = "openai"
base_url = "http://127.0.0.1:8000/v1"
model = "gpt-4.1-mini"
api_key_env = "OPENAI_API_KEY"
[policy]
max_steps = 200
[context]
window = 128000
[[mcp]]
name = "fs"
command = ["npx", "-y", "@modelcontextprotocol/server-filesystem", "./work"]
tool_timeout_ms = 60000
[verifier]
kind = "rules"
"#;

    #[test]
    fn the_designs_example_parses() {
        let c = AgentConfig::parse(GOOD).expect("valid");
        assert_eq!(c.policy.max_steps, 200);
        assert_eq!(c.mcp.len(), 1);
        assert_eq!(c.llm_config().expect("a model").model, "gpt-4.1-mini");
        assert_eq!(c.llm_config().expect("a model").idle_timeout, None);
        let idle = GOOD.replace(
            "api_key_env = \"OPENAI_API_KEY\"",
            "api_key_env = \"OPENAI_API_KEY\"\nidle_timeout_ms = 30000",
        );
        let c = AgentConfig::parse(&idle).expect("valid");
        assert_eq!(
            c.llm_config().expect("a model").idle_timeout,
            Some(std::time::Duration::from_secs(30))
        );
    }

    #[test]
    fn errors_name_the_key() {
        let cases = [
            (
                GOOD.replace("provider = \"openai\"", "provider = \"openia\""),
                "[model].provider: unknown provider \"openia\", expected one of \"openai\", \"openai-responses\", \"anthropic\"",
            ),
            (
                GOOD.replace("max_steps = 200", "max_stepz = 200"),
                "[policy].max_stepz",
            ),
            (
                GOOD.replace("tool_timeout_ms = 60000", "tool_timeout = 60000"),
                "mcp[0].tool_timeout",
            ),
            (
                GOOD.replace("kind = \"rules\"", "kind = \"vibes\""),
                "[verifier].kind: unknown kind",
            ),
            (
                GOOD.replace("window = 128000", "window = \"big\""),
                "[context].window",
            ),
            (format!("{GOOD}\nextra = 1\n"), "unknown field `extra`"),
            (
                GOOD.replace(
                    "api_key_env = \"OPENAI_API_KEY\"",
                    "api_key_env = \"OPENAI_API_KEY\"\nidle_timeout_ms = 0",
                ),
                "[model].idle_timeout_ms: must be at least 1",
            ),
            (
                GOOD.replace("window = 128000", "window = 128000\nmax_system_tokens = 0"),
                "[context].max_system_tokens: must be at least 1",
            ),
            (
                GOOD.replace("[model]", "[agent]\ncontext_files = [\"\"]\n[model]"),
                "[agent].context_files[0]: the file name is empty",
            ),
            (
                GOOD.replace(
                    "[model]",
                    "[agent]\ncontext_file = [\"AGENTS.md\"]\n[model]",
                ),
                "[agent].context_file",
            ),
        ];
        for (text, says) in cases {
            let err = AgentConfig::parse(&text).expect_err("invalid");
            assert!(err.contains(says), "expected {says:?} in {err:?}");
        }
    }

    #[test]
    fn context_files_follow_the_system_prompt_under_their_names() {
        let config_dir = tempfile::tempdir().expect("a temp dir");
        let cwd = tempfile::tempdir().expect("a temp dir");
        std::fs::write(config_dir.path().join("AGENTS.md"), "Run the tests.\n").expect("write");
        std::fs::write(cwd.path().join("NOTES.md"), "Prefer small diffs.").expect("write");
        let text = GOOD.replace(
            "[model]",
            "[agent]\ncontext_files = [\"AGENTS.md\", \"NOTES.md\"]\n[model]",
        );
        let c = AgentConfig::parse(&text).expect("valid");
        let prompt = c
            .system_prompt_with_files(config_dir.path(), cwd.path())
            .expect("both files are found");
        assert_eq!(
            prompt.as_deref(),
            Some(
                "You are careful.\n\n## AGENTS.md\n\nRun the tests.\n\n## NOTES.md\n\n\
                 Prefer small diffs."
            )
        );
        // Without a system prompt the first file starts it.
        let bare = text.replace("system_prompt = \"You are careful.\"\n", "");
        let c = AgentConfig::parse(&bare).expect("valid");
        let prompt = c
            .system_prompt_with_files(config_dir.path(), cwd.path())
            .expect("found");
        assert!(
            prompt.is_some_and(|p| p.starts_with("## AGENTS.md\n\nRun the tests.")),
            "the first heading starts the prompt"
        );
        // A missing file names the field and the file.
        let missing = GOOD.replace("[model]", "[agent]\ncontext_files = [\"GONE.md\"]\n[model]");
        let err = AgentConfig::parse(&missing)
            .expect("valid syntax")
            .system_prompt_with_files(config_dir.path(), cwd.path())
            .expect_err("no such file");
        assert!(
            err.starts_with("[agent].context_files[0]: \"GONE.md\": no such file"),
            "{err}"
        );
    }

    #[test]
    fn an_mcp_entry_needs_exactly_one_transport() {
        let both = GOOD.replace(
            "tool_timeout_ms = 60000",
            "url = \"http://127.0.0.1:1/mcp\"",
        );
        let err = AgentConfig::parse(&both).expect_err("invalid");
        assert!(
            err.contains("[[mcp]] #1 `fs`: give either command or url"),
            "{err}"
        );
    }

    #[test]
    fn the_mcp_protocol_key_selects_the_revision_and_refuses_others() {
        let c = AgentConfig::parse(GOOD).expect("valid");
        assert_eq!(
            c.mcp_configs(Path::new("."))[0].protocol,
            McpProtocol::Initialize,
            "the default"
        );
        for (value, want) in [
            ("2025-11-25", McpProtocol::Initialize),
            ("2026-07-28", McpProtocol::Stateless),
        ] {
            let text = GOOD.replace(
                "tool_timeout_ms = 60000",
                &format!("protocol = \"{value}\""),
            );
            let c = AgentConfig::parse(&text).expect("valid");
            assert_eq!(c.mcp_configs(Path::new("."))[0].protocol, want, "{value}");
        }
        let bad = GOOD.replace("tool_timeout_ms = 60000", "protocol = \"2026-01-01\"");
        let err = AgentConfig::parse(&bad).expect_err("invalid");
        assert_eq!(
            err,
            "[[mcp]] #1 `fs`: protocol: unknown value \"2026-01-01\", expected \"2025-11-25\" \
             or \"2026-07-28\""
        );
    }

    #[test]
    fn an_mcp_auth_entry_reads_its_secret_from_the_environment() {
        let text = r#"
[[mcp]]
name = "remote"
url = "http://127.0.0.1:1/mcp"
elicitation = "defaults"
auth = { client_id = "terminus", client_secret_env = "TERMINUS_TEST_MCP_SECRET_UNSET", scopes = ["mcp:read"] }
"#;
        let c = AgentConfig::parse(text).expect("valid");
        let configs = c.mcp_configs(Path::new("."));
        let auth = configs[0].auth.as_ref().expect("auth");
        assert_eq!(auth.client_id.as_deref(), Some("terminus"));
        assert_eq!(auth.client_secret, None);
        assert_eq!(auth.scopes, ["mcp:read"]);
        assert_eq!(configs[0].elicitation, Elicitation::Defaults);

        let on_command = GOOD.replace("tool_timeout_ms = 60000", "auth = { client_id = \"x\" }");
        let err = AgentConfig::parse(&on_command).expect_err("invalid");
        assert!(err.contains("auth is for a url server"), "{err}");
        let bad = text.replace("\"defaults\"", "\"accept\"");
        let err = AgentConfig::parse(&bad).expect_err("invalid");
        assert!(err.contains("elicitation: unknown value"), "{err}");
        let secret_alone = text.replace("client_id = \"terminus\", ", "");
        let err = AgentConfig::parse(&secret_alone).expect_err("invalid");
        assert!(
            err.contains("client_secret_env needs auth.client_id"),
            "{err}"
        );
    }
}
