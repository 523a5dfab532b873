//! What makes a recorded trial evidence: what it ran on (commit, model file, server build,
//! sampling), what it was (task, check, condition, config digest) and what it left (the checked
//! files); and the recording folder's manifest, written only when a run is whole.

use super::CheckSpec;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use sha2::{Digest, Sha256};
use std::collections::BTreeMap;
use std::io::Read as _;
use std::path::{Component, Path, PathBuf};
use std::time::Duration;

/// The largest file kept as evidence; a larger one is recorded by its digest only.
const MAX_KEPT_FILE: u64 = 256 * 1024;

/// What one trial ran on, what it was, and what it left.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct Evidence {
    /// The project's commit (`-dirty` when tracked files differ from it).
    pub(super) commit: String,
    /// The model file the server loaded, as it reports it.
    pub(super) model: Option<ModelFile>,
    /// The server's build, as it reports it.
    pub(super) server: Option<String>,
    /// This trial's sampling (`None`: the server's own settings).
    pub(super) sampling: Option<TrialSampling>,
    /// The trial's time limit.
    pub(super) timeout_s: u64,
    /// The task text.
    pub(super) task: String,
    /// The check, as the suite wrote it.
    pub(super) check: CheckSpec,
    /// The condition's policy overrides.
    pub(super) condition: Value,
    /// SHA-256 of the agent config under the condition (without `[model].base_url`).
    pub(super) config_sha256: String,
    /// The checked files as the run left them (path to text; a file that was missing is absent).
    pub(super) files: BTreeMap<String, String>,
}

impl Evidence {
    /// What of the trial's definition differs from `want` (the suite's), if anything.
    pub(super) fn differs_from(&self, want: &Evidence) -> Option<String> {
        if self.task != want.task {
            return Some(format!(
                "the task was {:?}, the suite says {:?}",
                self.task, want.task
            ));
        }
        if self.check != want.check {
            return Some(format!(
                "the check was {}, the suite says {}",
                json(&self.check),
                json(&want.check)
            ));
        }
        if self.condition != want.condition {
            return Some(format!(
                "the condition's policy was {}, the suite says {}",
                self.condition, want.condition
            ));
        }
        if self.config_sha256 != want.config_sha256 {
            return Some(format!(
                "the agent config's digest was {}, the config now gives {}",
                self.config_sha256, want.config_sha256
            ));
        }
        if self.sampling != want.sampling {
            return Some(format!(
                "the sampling was {:?}, the suite gives {:?}",
                self.sampling, want.sampling
            ));
        }
        if self.timeout_s != want.timeout_s {
            return Some(format!(
                "the time limit was {} s, the suite says {} s",
                self.timeout_s, want.timeout_s
            ));
        }
        None
    }
}

fn json<T: Serialize>(v: &T) -> String {
    serde_json::to_string(v).unwrap_or_default()
}

/// One trial's sampling.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct TrialSampling {
    pub(super) temperature: f64,
    pub(super) seed: u64,
}

/// A model file: its name, size and SHA-256.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct ModelFile {
    pub(super) name: String,
    pub(super) size: u64,
    pub(super) sha256: String,
}

/// What a model server says of itself (llama.cpp's `GET /props`: `model_path`, `build_info`).
#[derive(Debug, Clone, Default)]
pub(super) struct Server {
    pub(super) model: Option<ModelFile>,
    pub(super) build: Option<String>,
}

impl Server {
    /// Asks the server at `base_url` (the API root, `/v1` or not) for its model file and build;
    /// what it does not say (another server, or none) stays `None`. The model file is hashed
    /// when it is on this machine.
    pub(super) async fn probe(base_url: &str) -> Server {
        let root = base_url.trim_end_matches('/').trim_end_matches("/v1");
        let Ok(client) = reqwest::Client::builder()
            .timeout(Duration::from_secs(10))
            .build()
        else {
            return Server::default();
        };
        let Ok(response) = client.get(format!("{root}/props")).send().await else {
            return Server::default();
        };
        let Ok(props) = response.json::<Value>().await else {
            return Server::default();
        };
        let build = props["build_info"].as_str().map(str::to_owned);
        let model = match props["model_path"].as_str() {
            Some(path) => tokio::task::spawn_blocking({
                let path = PathBuf::from(path);
                move || model_file(&path)
            })
            .await
            .ok()
            .flatten(),
            None => None,
        };
        Server { model, build }
    }
}

fn model_file(path: &Path) -> Option<ModelFile> {
    // The file itself, not a link to it (`target/peers/qwen.gguf` links into the cache).
    let path = &std::fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf());
    let mut file = std::fs::File::open(path).ok()?;
    let mut hasher = Sha256::new();
    let mut buf = vec![0u8; 1 << 20];
    let mut size = 0u64;
    loop {
        let n = file.read(&mut buf).ok()?;
        if n == 0 {
            break;
        }
        size += n as u64;
        hasher.update(&buf[..n]);
    }
    Some(ModelFile {
        name: path.file_name()?.to_string_lossy().into_owned(),
        size,
        sha256: hex(&hasher.finalize()),
    })
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The commit of the repository `dir` is in, `-dirty` when tracked files differ from it;
/// `unknown` outside a repository.
pub(super) fn commit(dir: &Path) -> String {
    let git = |args: &[&str]| {
        std::process::Command::new("git")
            .arg("-C")
            .arg(dir)
            .args(args)
            .output()
            .ok()
            .filter(|o| o.status.success())
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
    };
    match git(&["rev-parse", "HEAD"]) {
        Some(head) if !head.is_empty() => {
            let dirty = git(&["status", "--porcelain", "--untracked-files=no"])
                .is_some_and(|s| !s.is_empty());
            if dirty { format!("{head}-dirty") } else { head }
        }
        _ => "unknown".to_owned(),
    }
}

/// The `[model].base_url` of a config text.
pub(super) fn base_url(config: &str) -> String {
    config
        .parse::<toml::Table>()
        .ok()
        .and_then(|t| t.get("model")?.get("base_url")?.as_str().map(str::to_owned))
        .unwrap_or_default()
}

/// SHA-256 of a config text without its `[model].base_url` (which differs between machines),
/// over its canonical TOML form.
pub(super) fn config_digest(config: &str) -> Result<String, String> {
    let mut table: toml::Table = config.parse().map_err(|e: toml::de::Error| e.to_string())?;
    if let Some(model) = table.get_mut("model").and_then(toml::Value::as_table_mut) {
        model.remove("base_url");
    }
    let text = toml::to_string(&table).map_err(|e| e.to_string())?;
    Ok(hex(&Sha256::digest(text.as_bytes())))
}

/// A condition's policy overrides as JSON.
pub(super) fn policy_json(policy: &toml::Table) -> Value {
    serde_json::to_value(policy).unwrap_or(Value::Null)
}

/// The files a check reads, as the run left them: the named files of a `files` check; every
/// file of the folder (hidden ones too) for a `command` check. A file larger than 256 KiB or
/// not UTF-8 is kept as `sha256:<digest>`.
pub(super) fn checked_files(check: &CheckSpec, folder: &Path) -> BTreeMap<String, String> {
    let mut files = BTreeMap::new();
    let mut keep = |rel: String, path: &Path| {
        let Ok(meta) = std::fs::metadata(path) else {
            return;
        };
        if !meta.is_file() {
            return;
        }
        let bytes = std::fs::read(path).unwrap_or_default();
        let text = match String::from_utf8(bytes) {
            Ok(text) if meta.len() <= MAX_KEPT_FILE => text,
            Ok(text) => format!("sha256:{}", hex(&Sha256::digest(text.as_bytes()))),
            Err(e) => format!("sha256:{}", hex(&Sha256::digest(e.as_bytes()))),
        };
        files.insert(rel, text);
    };
    if check.command.is_some() {
        let mut stack = vec![PathBuf::new()];
        while let Some(rel) = stack.pop() {
            let Ok(entries) = std::fs::read_dir(folder.join(&rel)) else {
                continue;
            };
            for entry in entries.flatten() {
                let rel = rel.join(entry.file_name());
                match entry.file_type() {
                    Ok(t) if t.is_dir() => stack.push(rel),
                    Ok(t) if t.is_file() => {
                        keep(rel.to_string_lossy().into_owned(), &folder.join(&rel));
                    }
                    _ => {}
                }
            }
        }
    } else {
        for f in &check.files {
            keep(f.path.clone(), &folder.join(&f.path));
        }
    }
    files
}

/// Writes recorded files into `dir` (for the check to run on them again); a path that leaves
/// the folder is refused.
pub(super) fn write_files(dir: &Path, files: &BTreeMap<String, String>) -> Result<(), String> {
    for (rel, text) in files {
        let path = Path::new(rel);
        if path.is_absolute()
            || path
                .components()
                .any(|c| !matches!(c, Component::Normal(_)))
        {
            return Err(format!("{rel:?} is not a path inside the trial's folder"));
        }
        let target = dir.join(path);
        if let Some(parent) = target.parent() {
            std::fs::create_dir_all(parent).map_err(|e| format!("{rel}: {e}"))?;
        }
        std::fs::write(&target, text).map_err(|e| format!("{rel}: {e}"))?;
    }
    Ok(())
}

/// The recording folder's `manifest.json`: what a whole run recorded.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct Manifest {
    /// Trials per task and condition.
    pub(super) trials: u32,
    /// The conditions every task ran under.
    pub(super) conditions: Vec<String>,
    /// The suite's sampling (temperature, seed), if any.
    pub(super) sampling: Option<(f64, u64)>,
    /// The tasks recorded.
    pub(super) tasks: Vec<String>,
}

impl Manifest {
    pub(super) fn read(dir: &Path) -> Result<Manifest, String> {
        let path = dir.join("manifest.json");
        let text = std::fs::read_to_string(&path).map_err(|e| {
            format!(
                "no manifest.json ({e}): not the recording of a run that finished (an interrupted run's trials stay in DIR.partial)"
            )
        })?;
        serde_json::from_str(&text).map_err(|e| format!("manifest.json: {e}"))
    }
}

/// Moves a whole run's recording from `partial` into `record`: each task's folder replaces the
/// one `record` held, and the manifest lists the tasks recorded under the same trials,
/// conditions and sampling (those of an earlier, different run are left out of it).
pub(super) fn commit_recording(
    partial: &Path,
    record: &Path,
    manifest: &Manifest,
) -> Result<(), String> {
    let io = |what: &Path, e: std::io::Error| format!("cannot move into {}: {e}", what.display());
    std::fs::create_dir_all(record).map_err(|e| io(record, e))?;
    let mut tasks = match Manifest::read(record) {
        Ok(old)
            if old.trials == manifest.trials
                && old.conditions == manifest.conditions
                && old.sampling == manifest.sampling =>
        {
            old.tasks
        }
        _ => Vec::new(),
    };
    for task in &manifest.tasks {
        let from = partial.join(task);
        let to = record.join(task);
        if to.exists() {
            std::fs::remove_dir_all(&to).map_err(|e| io(&to, e))?;
        }
        if from.exists() {
            std::fs::rename(&from, &to).map_err(|e| io(&to, e))?;
        }
        if !tasks.contains(task) {
            tasks.push(task.clone());
        }
    }
    let whole = Manifest {
        tasks,
        ..manifest.clone()
    };
    let mut text = serde_json::to_string_pretty(&whole).map_err(|e| e.to_string())?;
    text.push('\n');
    std::fs::write(record.join("manifest.json"), text).map_err(|e| io(record, e))?;
    let _ = std::fs::remove_dir_all(partial);
    Ok(())
}
