//! The live-agent config file (`docs/live-agents.md`, "The config"): TOML, every unknown key
//! refused with its path, every value checked before anything starts.

use serde::Deserialize;
use std::path::{Path, PathBuf};
use std::time::Duration;
use terminus_kernel::Policy;
use terminus_llm::{ApiKey, LlmConfig, Provider};
use terminus_scenario::ContextSpec;
use terminus_tools::{
    Elicitation, IdentityProvider, McpAuth, McpConfig, McpGrant, McpProtocol, McpTransport, Poll,
    PrivateKey, SigningAlgorithm,
};

/// `[[mcp]] poll.NAME.every_ms` when not given.
const POLL_EVERY_MS: u64 = 1000;
/// `[[mcp]] poll.NAME.max_wait_ms` when not given.
const POLL_MAX_WAIT_MS: u64 = 60_000;

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
    /// The task's size from the work itself: the number of files this glob matches in the
    /// folder the agent starts in scales the policy's budgets (`budget_scale`), as
    /// `--scale-from` does (which wins).
    pub(crate) scale_from: Option<String>,
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
    /// The sampling temperature sent with every request; default: the server's.
    pub(crate) temperature: Option<f64>,
    /// The sampling seed sent with every request (Chat Completions' `seed`); default none.
    pub(crate) seed: Option<u64>,
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
    /// The only tools of the server offered to the model (empty: all).
    #[serde(default)]
    pub(crate) tools: Vec<String>,
    /// Tools called as MCP tasks: the client waits for each, within `tool_timeout_ms`.
    #[serde(default)]
    pub(crate) tasks: Vec<String>,
    /// Tools the client calls again while their result says "not ready" (`poll.NAME = {
    /// not_ready, every_ms, max_wait_ms }`): the model makes one call.
    #[serde(default)]
    pub(crate) poll: std::collections::BTreeMap<String, PollSection>,
    /// OAuth for an HTTP server (`auth = { ... }`).
    pub(crate) auth: Option<McpAuthSection>,
    /// How elicitation requests are answered: `"decline"` (default), `"defaults"` or
    /// `"person"`.
    pub(crate) elicitation: Option<String>,
    /// The protocol revision the session speaks: `"2025-11-25"` (default) or `"2026-07-28"`.
    pub(crate) protocol: Option<String>,
}

/// `[[mcp]] poll.NAME = { ... }`: how the client waits on a status tool.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct PollSection {
    /// A result holding this text (compared without case) is not ready.
    pub(crate) not_ready: String,
    /// The pause between two calls, in milliseconds (default 1000).
    pub(crate) every_ms: Option<u64>,
    /// The longest wait in all, in milliseconds (default 60000).
    pub(crate) max_wait_ms: Option<u64>,
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
    /// `"authorization_code"` (default), `"client_credentials"`, `"jwt_bearer"` or
    /// `"enterprise"`.
    pub(crate) grant: Option<String>,
    /// A client-credentials client's PEM key file, for `private_key_jwt` instead of a secret.
    pub(crate) private_key_file: Option<String>,
    /// The key's JWS algorithm (default `"RS256"`).
    pub(crate) signing_algorithm: Option<String>,
    /// The identity token file of `jwt_bearer` (the workload's JWT) and `enterprise` (the
    /// user's ID token).
    pub(crate) token_file: Option<String>,
    /// The enterprise identity provider of `enterprise`.
    pub(crate) idp: Option<IdpSection>,
    /// Where `authorization_code` keeps a person's login and its token (default: a file of
    /// the state folder, see [`state_dir`]).
    pub(crate) credentials_file: Option<String>,
}

/// `auth.idp = { ... }`: where an `enterprise` grant exchanges the user's ID token.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct IdpSection {
    pub(crate) issuer: String,
    pub(crate) token_endpoint: String,
    pub(crate) client_id: String,
    pub(crate) client_secret_env: Option<String>,
}

/// The grants `auth.grant` names.
const GRANTS: [(&str, McpGrant); 4] = [
    ("authorization_code", McpGrant::AuthorizationCode),
    ("client_credentials", McpGrant::ClientCredentials),
    ("jwt_bearer", McpGrant::JwtBearer),
    ("enterprise", McpGrant::Enterprise),
];

impl McpAuthSection {
    /// The grant, or why the entry is wrong (`at` names the entry).
    fn check(&self, at: &str) -> Result<McpGrant, String> {
        let grant = match &self.grant {
            None => McpGrant::AuthorizationCode,
            Some(name) => GRANTS
                .iter()
                .find(|(n, _)| n == name)
                .map(|(_, g)| *g)
                .ok_or_else(|| {
                    format!(
                        "{at}: auth.grant: unknown value {name:?}, expected one of {}",
                        GRANTS.map(|(n, _)| format!("{n:?}")).join(", ")
                    )
                })?,
        };
        let only = |set: bool, key: &str, grants: &str| {
            if set {
                Err(format!("{at}: auth.{key} is only for grant = {grants}"))
            } else {
                Ok(())
            }
        };
        let needs = |set: bool, key: &str, grant: &str| {
            if set {
                Ok(())
            } else {
                Err(format!("{at}: grant = \"{grant}\" needs auth.{key}"))
            }
        };
        let service = matches!(grant, McpGrant::ClientCredentials);
        only(
            self.private_key_file.is_some() && !service,
            "private_key_file",
            "\"client_credentials\"",
        )?;
        only(
            self.signing_algorithm.is_some() && self.private_key_file.is_none(),
            "signing_algorithm",
            "\"client_credentials\" with a private_key_file",
        )?;
        only(
            self.token_file.is_some()
                && !matches!(grant, McpGrant::JwtBearer | McpGrant::Enterprise),
            "token_file",
            "\"jwt_bearer\" or \"enterprise\"",
        )?;
        only(
            self.idp.is_some() && grant != McpGrant::Enterprise,
            "idp",
            "\"enterprise\"",
        )?;
        only(
            self.credentials_file.is_some() && grant != McpGrant::AuthorizationCode,
            "credentials_file",
            "\"authorization_code\"",
        )?;
        if let Some(a) = &self.signing_algorithm
            && SigningAlgorithm::from_name(a).is_none()
        {
            return Err(format!(
                "{at}: auth.signing_algorithm: unknown value {a:?}, expected one of {}",
                SigningAlgorithm::ALL
                    .map(|a| format!("{:?}", a.as_str()))
                    .join(", ")
            ));
        }
        match grant {
            McpGrant::ClientCredentials => {
                needs(self.client_id.is_some(), "client_id", "client_credentials")?;
                match (&self.client_secret_env, &self.private_key_file) {
                    (Some(_), Some(_)) => {
                        return Err(format!(
                            "{at}: give auth.client_secret_env or auth.private_key_file, not both"
                        ));
                    }
                    (None, None) => {
                        return Err(format!(
                            "{at}: grant = \"client_credentials\" needs auth.client_secret_env \
                             or auth.private_key_file"
                        ));
                    }
                    _ => {}
                }
            }
            McpGrant::JwtBearer => needs(self.token_file.is_some(), "token_file", "jwt_bearer")?,
            McpGrant::Enterprise => {
                needs(self.client_id.is_some(), "client_id", "enterprise")?;
                needs(
                    self.client_secret_env.is_some(),
                    "client_secret_env",
                    "enterprise",
                )?;
                needs(self.token_file.is_some(), "token_file", "enterprise")?;
                let idp = self
                    .idp
                    .as_ref()
                    .ok_or_else(|| format!("{at}: grant = \"enterprise\" needs auth.idp"))?;
                for (key, url) in [
                    ("issuer", &idp.issuer),
                    ("token_endpoint", &idp.token_endpoint),
                ] {
                    if !(url.starts_with("http://") || url.starts_with("https://")) {
                        return Err(format!(
                            "{at}: auth.idp.{key}: {url:?} is not an http:// or https:// URL"
                        ));
                    }
                }
            }
            _ => {}
        }
        Ok(grant)
    }

    /// The adapter's auth config: secrets read from their environment variables, the key
    /// file read now, files taken from `dir` when relative; the credentials file of server
    /// `name` at `url`, when none is named, in [`state_dir`].
    fn auth(&self, at: &str, dir: &Path, name: &str, url: &str) -> Result<McpAuth, String> {
        let grant = self.check(at)?;
        let secret = |name: &Option<String>, key: &str| -> Result<Option<String>, String> {
            let Some(name) = name else { return Ok(None) };
            match std::env::var(name).ok().filter(|v| !v.is_empty()) {
                Some(v) => Ok(Some(v)),
                // A public client of the authorization-code flow may go without its secret.
                None if grant == McpGrant::AuthorizationCode && key == "client_secret_env" => {
                    Ok(None)
                }
                None => Err(format!(
                    "{at}: auth.{key}: the environment variable {name} is not set"
                )),
            }
        };
        let private_key = match &self.private_key_file {
            None => None,
            Some(file) => {
                let path = dir.join(file);
                let pem = std::fs::read_to_string(&path)
                    .map_err(|e| format!("{at}: auth.private_key_file: {}: {e}", path.display()))?;
                if !pem.contains("-----BEGIN ") {
                    return Err(format!(
                        "{at}: auth.private_key_file: {} is not a PEM key",
                        path.display()
                    ));
                }
                let algorithm = self
                    .signing_algorithm
                    .as_deref()
                    .and_then(SigningAlgorithm::from_name)
                    .unwrap_or(SigningAlgorithm::RS256);
                Some(PrivateKey { pem, algorithm })
            }
        };
        let idp = match &self.idp {
            None => None,
            Some(idp) => Some(IdentityProvider {
                issuer: idp.issuer.clone(),
                token_endpoint: idp.token_endpoint.clone(),
                client_id: idp.client_id.clone(),
                client_secret: secret(&idp.client_secret_env, "idp.client_secret_env")?,
            }),
        };
        Ok(McpAuth {
            client_id: self.client_id.clone(),
            client_secret: secret(&self.client_secret_env, "client_secret_env")?,
            client_metadata_url: self.client_metadata_url.clone(),
            scopes: self.scopes.clone(),
            redirect_uri: self.redirect_uri.clone(),
            client_name: self.client_name.clone(),
            grant,
            private_key,
            token_file: self.token_file.as_ref().map(|f| dir.join(f)),
            idp,
            credentials_file: match (&self.credentials_file, grant) {
                (Some(file), _) => Some(dir.join(file)),
                (None, McpGrant::AuthorizationCode) => {
                    state_dir().map(|d| d.join("mcp-auth").join(credentials_name(name, url)))
                }
                (None, _) => None,
            },
        })
    }
}

/// The folder where `terminus` keeps what outlives a run but is no journal's (a person's MCP
/// logins): `$TERMINUS_STATE_DIR`, else `$XDG_STATE_HOME/terminus`, else
/// `~/.local/state/terminus`; `None` when none of those is set.
pub(crate) fn state_dir() -> Option<PathBuf> {
    let var = |name: &str| std::env::var_os(name).filter(|v| !v.is_empty());
    if let Some(dir) = var("TERMINUS_STATE_DIR") {
        return Some(PathBuf::from(dir));
    }
    if let Some(dir) = var("XDG_STATE_HOME") {
        return Some(PathBuf::from(dir).join("terminus"));
    }
    var("HOME").map(|home| PathBuf::from(home).join(".local/state/terminus"))
}

/// The credentials file's name for server `name` at `url`: the name (its letters, digits,
/// `-` and `_`), and a hash of the URL (FNV-1a, stable across builds), so that two configs
/// naming different servers alike never share a login.
fn credentials_name(name: &str, url: &str) -> String {
    let name: String = name
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                c
            } else {
                '_'
            }
        })
        .collect();
    let hash = url.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
    });
    format!("{name}-{hash:016x}.json")
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
            // Whether each names one of the agent's tools is known once the servers list them.
            if let Some(i) = context.keep.iter().position(|t| t.trim().is_empty()) {
                return Err(format!("[context].keep[{i}]: the tool name is empty"));
            }
            context
                .check_auto_checkpoint(&self.policy)
                .map_err(|(field, problem)| format!("[context].{field}: {problem}"))?;
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
                ("tools", &server.tools),
                ("tasks", &server.tasks),
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
            for (tool, poll) in &server.poll {
                let at = format!("{at}: poll.{tool}");
                if poll.not_ready.trim().is_empty() {
                    return Err(format!("{at}.not_ready is empty: every result would wait"));
                }
                if poll.every_ms == Some(0) {
                    return Err(format!("{at}.every_ms must be at least 1"));
                }
                let every = poll.every_ms.unwrap_or(POLL_EVERY_MS);
                if poll.max_wait_ms.unwrap_or(POLL_MAX_WAIT_MS) < every {
                    return Err(format!(
                        "{at}.max_wait_ms must be at least every_ms ({every}): no second call \
                         would be made"
                    ));
                }
                if server.tasks.contains(tool) {
                    return Err(format!(
                        "{at}: a task is waited for by the protocol already (it is in tasks)"
                    ));
                }
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
                auth.check(&at)?;
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
    /// when such a file exists there; otherwise from `PATH`. An auth entry's secrets are read
    /// from their environment variables and its key file from `dir`: one that is missing is an
    /// error naming it.
    pub(crate) fn mcp_configs(&self, dir: &Path) -> Result<Vec<McpConfig>, String> {
        self.mcp
            .iter()
            .enumerate()
            .map(|(i, s)| {
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
                config.tools.clone_from(&s.tools);
                config.tasks.clone_from(&s.tasks);
                config.poll = s
                    .poll
                    .iter()
                    .map(|(tool, p)| {
                        let wait = Poll {
                            not_ready: p.not_ready.clone(),
                            every: Duration::from_millis(p.every_ms.unwrap_or(POLL_EVERY_MS)),
                            max_wait: Duration::from_millis(
                                p.max_wait_ms.unwrap_or(POLL_MAX_WAIT_MS),
                            ),
                        };
                        (tool.clone(), wait)
                    })
                    .collect();
                config.elicitation = match s.elicitation.as_deref() {
                    Some("defaults") => Elicitation::Defaults,
                    Some("person") => Elicitation::Person,
                    _ => Elicitation::Decline,
                };
                if let Some(p) = s.protocol.as_deref().and_then(protocol) {
                    config.protocol = p;
                }
                if let Some(a) = &s.auth {
                    let at = format!("[[mcp]] #{} `{}`", i + 1, s.name);
                    let url = s.url.as_deref().unwrap_or_default();
                    config.auth = Some(a.auth(&at, dir, &s.name, url)?);
                }
                Ok(config)
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
        if let Some(t) = m.temperature
            && !(0.0..=2.0).contains(&t)
        {
            return Err(format!("[model].temperature: must be in 0..=2, got {t}"));
        }
        config.temperature = m.temperature;
        config.seed = m.seed;
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
            (
                GOOD.replace(
                    "tool_timeout_ms = 60000",
                    "tool_timeout_ms = 60000\ntasks = [\"\"]",
                ),
                "`fs`: tasks[0] is empty",
            ),
            (
                GOOD.replace(
                    "tool_timeout_ms = 60000",
                    "tool_timeout_ms = 60000\npoll = { status = { not_ready = \" \" } }",
                ),
                "`fs`: poll.status.not_ready is empty",
            ),
            (
                GOOD.replace(
                    "tool_timeout_ms = 60000",
                    "tool_timeout_ms = 60000\npoll = { status = { not_ready = \"wait\", every_ms = 0 } }",
                ),
                "`fs`: poll.status.every_ms must be at least 1",
            ),
            (
                GOOD.replace(
                    "tool_timeout_ms = 60000",
                    "tool_timeout_ms = 60000\npoll = { status = { not_ready = \"wait\", every_ms = 500, max_wait_ms = 100 } }",
                ),
                "`fs`: poll.status.max_wait_ms must be at least every_ms (500)",
            ),
            (
                GOOD.replace(
                    "tool_timeout_ms = 60000",
                    "tool_timeout_ms = 60000\ntasks = [\"status\"]\npoll = { status = { not_ready = \"wait\" } }",
                ),
                "`fs`: poll.status: a task is waited for by the protocol already",
            ),
            (
                GOOD.replace(
                    "tool_timeout_ms = 60000",
                    "tool_timeout_ms = 60000\npoll = { status = { not_ready = \"wait\", every = 1 } }",
                ),
                "unknown field `every`",
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
                GOOD.replace(
                    "window = 128000",
                    "window = 128000\nkeep = [\"read_file\", \"\"]",
                ),
                "[context].keep[1]: the tool name is empty",
            ),
            (
                GOOD.replace(
                    "window = 128000",
                    "window = 128000\nauto_checkpoint = { max_tokens = 200 }",
                ),
                "[context].auto_checkpoint: policy.auto_checkpoints is 0",
            ),
            (
                GOOD.replace(
                    "window = 128000",
                    "window = 128000\nauto_checkpoint = { max_tokens = 0 }",
                )
                .replace("max_steps = 200", "max_steps = 200\nauto_checkpoints = 1"),
                "[context].auto_checkpoint.max_tokens: must be at least 1",
            ),
            (
                GOOD.replace(
                    "window = 128000",
                    "window = 128000\nauto_checkpoint = { model = \" \" }",
                )
                .replace("max_steps = 200", "max_steps = 200\nauto_checkpoints = 1"),
                "[context].auto_checkpoint.model: the model name is empty",
            ),
            (
                GOOD.replace(
                    "window = 128000",
                    "window = 128000\nauto_checkpoint = { tokens = 9 }",
                ),
                "unknown field `tokens`",
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
            c.mcp_configs(Path::new(".")).expect("configs")[0].protocol,
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
            assert_eq!(
                c.mcp_configs(Path::new(".")).expect("configs")[0].protocol,
                want,
                "{value}"
            );
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
        let configs = c.mcp_configs(Path::new(".")).expect("configs");
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

    #[test]
    fn the_grants_of_an_auth_entry_and_what_each_needs() {
        let entry = |auth: &str| {
            format!(
                "[[mcp]]\nname = \"remote\"\nurl = \"http://127.0.0.1:1/mcp\"\nauth = {{ {auth} }}\n"
            )
        };
        let refused = |auth: &str, want: &str| {
            let err = AgentConfig::parse(&entry(auth)).expect_err(auth);
            assert!(err.contains(want), "{auth}: {err}");
            assert!(err.contains("[[mcp]] #1 `remote`"), "{err}");
        };
        refused(
            r#"grant = "password""#,
            r#"auth.grant: unknown value "password", expected one of "authorization_code", "client_credentials", "jwt_bearer", "enterprise""#,
        );
        refused(
            r#"grant = "client_credentials", private_key_file = "k.pem""#,
            r#"grant = "client_credentials" needs auth.client_id"#,
        );
        refused(
            r#"grant = "client_credentials", client_id = "svc""#,
            "needs auth.client_secret_env or auth.private_key_file",
        );
        refused(
            r#"grant = "client_credentials", client_id = "svc", client_secret_env = "S", private_key_file = "k.pem""#,
            "not both",
        );
        refused(
            r#"client_id = "svc", private_key_file = "k.pem""#,
            r#"auth.private_key_file is only for grant = "client_credentials""#,
        );
        refused(
            r#"grant = "client_credentials", client_id = "svc", private_key_file = "k.pem", signing_algorithm = "HS256""#,
            r#"auth.signing_algorithm: unknown value "HS256""#,
        );
        refused(
            r#"grant = "jwt_bearer""#,
            r#"grant = "jwt_bearer" needs auth.token_file"#,
        );
        refused(
            r#"token_file = "t.jwt""#,
            r#"auth.token_file is only for grant = "jwt_bearer" or "enterprise""#,
        );
        refused(
            r#"grant = "enterprise", client_id = "c", client_secret_env = "S", token_file = "id.jwt""#,
            r#"grant = "enterprise" needs auth.idp"#,
        );
        refused(
            r#"grant = "enterprise", client_id = "c", client_secret_env = "S", token_file = "id.jwt", idp = { issuer = "idp.example", token_endpoint = "https://idp.example/token", client_id = "i" }"#,
            r#"auth.idp.issuer: "idp.example" is not an http:// or https:// URL"#,
        );

        // What is read when the servers are configured: the key file, the secrets.
        let dir = tempfile::tempdir().expect("dir");
        let key = "-----BEGIN PRIVATE KEY-----\nMIGHAgEAMBMGByqGSM49AgEGCCqGSM49AwEHBG0wawIBAQQg\n-----END PRIVATE KEY-----\n";
        std::fs::write(dir.path().join("svc.pem"), key).expect("key");
        std::fs::write(dir.path().join("plain.txt"), "not a key").expect("file");
        let signed = AgentConfig::parse(&entry(
            r#"grant = "client_credentials", client_id = "svc", private_key_file = "svc.pem", signing_algorithm = "ES256", scopes = ["mcp:read"]"#,
        ))
        .expect("valid");
        let configs = signed.mcp_configs(dir.path()).expect("configs");
        let auth = configs[0].auth.as_ref().expect("auth");
        assert_eq!(auth.grant, McpGrant::ClientCredentials);
        let private_key = auth.private_key.as_ref().expect("key");
        assert_eq!(private_key.pem, key);
        assert_eq!(private_key.algorithm, SigningAlgorithm::ES256);
        assert!(!format!("{auth:?}").contains("MIGHAgEA"), "{auth:?}");
        let err = signed
            .mcp_configs(&dir.path().join("elsewhere"))
            .expect_err("no key there");
        assert!(
            err.contains("auth.private_key_file") && err.contains("svc.pem"),
            "{err}"
        );
        let plain = AgentConfig::parse(&entry(
            r#"grant = "client_credentials", client_id = "svc", private_key_file = "plain.txt""#,
        ))
        .expect("valid");
        let err = plain.mcp_configs(dir.path()).expect_err("not PEM");
        assert!(err.contains("plain.txt is not a PEM key"), "{err}");
        let unset = AgentConfig::parse(&entry(
            r#"grant = "client_credentials", client_id = "svc", client_secret_env = "TERMINUS_TEST_MCP_SECRET_UNSET""#,
        ))
        .expect("valid");
        let err = unset.mcp_configs(dir.path()).expect_err("no secret");
        assert!(
            err.contains(
                "auth.client_secret_env: the environment variable TERMINUS_TEST_MCP_SECRET_UNSET is not set"
            ),
            "{err}"
        );
        let workload = AgentConfig::parse(&entry(
            r#"grant = "jwt_bearer", client_id = "w", token_file = "tokens/mcp.jwt""#,
        ))
        .expect("valid");
        let configs = workload.mcp_configs(dir.path()).expect("configs");
        let auth = configs[0].auth.as_ref().expect("auth");
        assert_eq!(auth.grant, McpGrant::JwtBearer);
        assert_eq!(
            auth.token_file.as_deref(),
            Some(dir.path().join("tokens/mcp.jwt").as_path())
        );
        assert_eq!(
            auth.credentials_file, None,
            "no person logs in for a workload"
        );
    }

    #[test]
    fn a_login_is_kept_in_the_credentials_file_of_its_server() {
        let entry = |name: &str, url: &str, auth: &str| {
            format!("[[mcp]]\nname = \"{name}\"\nurl = \"{url}\"\nauth = {{ {auth} }}\n")
        };
        let err = AgentConfig::parse(&entry(
            "remote",
            "http://127.0.0.1:1/mcp",
            r#"grant = "jwt_bearer", token_file = "t.jwt", credentials_file = "c.json""#,
        ))
        .expect_err("no login");
        assert!(
            err.contains(r#"auth.credentials_file is only for grant = "authorization_code""#),
            "{err}"
        );
        let named = AgentConfig::parse(&entry(
            "remote",
            "http://127.0.0.1:1/mcp",
            r#"credentials_file = "logins/remote.json""#,
        ))
        .expect("valid");
        let dir = Path::new("/agents");
        let configs = named.mcp_configs(dir).expect("configs");
        assert_eq!(
            configs[0]
                .auth
                .as_ref()
                .and_then(|a| a.credentials_file.as_deref()),
            Some(dir.join("logins/remote.json").as_path())
        );
        // Unnamed: a file of the state folder, by server name and a hash of its URL.
        let a = credentials_name("remote", "https://a.example/mcp");
        assert!(a.starts_with("remote-") && a.ends_with(".json"), "{a}");
        assert_eq!(a, credentials_name("remote", "https://a.example/mcp"));
        assert_ne!(a, credentials_name("remote", "https://b.example/mcp"));
        assert_eq!(
            credentials_name("team/x y", "u").split('-').next(),
            Some("team_x_y")
        );
        let unnamed = AgentConfig::parse(&entry("remote", "https://a.example/mcp", ""))
            .expect("valid")
            .mcp_configs(dir)
            .expect("configs");
        let file = unnamed[0]
            .auth
            .as_ref()
            .and_then(|a| a.credentials_file.clone());
        assert_eq!(
            file,
            state_dir().map(|d| d.join("mcp-auth").join(&a)),
            "in the state folder"
        );
    }
}
