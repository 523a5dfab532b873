//! The native core of the `terminus-kernel` npm package: the Terminus kernel for Node.js.
//!
//! A thin layer over [`terminus_runtime::host::Host`] (the kernel with the embedding contract's
//! JSON vocabulary, its journal, report and explanation) and over the runtime for
//! [`run_scenario`]. Values cross the boundary as JSON text: the package's JavaScript layer
//! (`index.js`) checks a JavaScript value is JSON (naming the path of what is not), serializes
//! it and parses what comes back, so every event is read by the same `serde` code as in Rust and
//! Python and every error names its JSON path. Nothing here panics on any input (every input
//! error is a `Result`); `catch_unwind` on every export is only a backstop that would turn a bug
//! into a JavaScript `Error` instead of aborting the process.

use napi::{Error, Result, Status};
use napi_derive::napi;
use terminus_runtime::host::{EventIn, Handle, Host, InputError, policy_from_json};

fn invalid(e: impl std::fmt::Display) -> Error {
    Error::new(Status::InvalidArg, e.to_string())
}

/// An error in an event or a policy, worded as the Python binding words it: serde_json reading
/// text adds where in the text (` at line 1 column 23`), which says nothing to a host that gave
/// an object (the path already says where).
fn input(e: InputError) -> Error {
    let message = match e.message.rsplit_once(" at line ") {
        Some((head, tail))
            if tail.split_once(" column ").is_some_and(|(line, column)| {
                !line.is_empty()
                    && !column.is_empty()
                    && line
                        .bytes()
                        .chain(column.bytes())
                        .all(|b| b.is_ascii_digit())
            }) =>
        {
            head
        }
        _ => e.message.as_str(),
    };
    invalid(format!("{}: {message}", e.path))
}

fn failed(e: impl std::fmt::Display) -> Error {
    Error::new(Status::GenericFailure, e.to_string())
}

/// The kernel: feed it events with `handle`, take its commands with `nextCommand` (all JSON
/// text; `index.js` wraps it as the package's `Machine`).
#[napi]
pub struct NativeMachine {
    host: Host,
}

#[napi]
impl NativeMachine {
    /// A run under `policy` (JSON text of the scenario `policy` fields, or absent for the
    /// defaults); `task` and `name` only label the run in `explain()`.
    #[napi(constructor, catch_unwind)]
    pub fn new(policy: Option<String>, task: Option<String>, name: Option<String>) -> Result<Self> {
        let policy = match policy {
            Some(json) => policy_from_json(&json).map_err(input)?,
            None => terminus_kernel::Policy::default(),
        };
        let host = Host::new(policy, task.unwrap_or_default(), name).map_err(input)?;
        Ok(NativeMachine { host })
    }

    /// Feeds one event (JSON text). Returns what the kernel did in the low two bits (0: a step,
    /// 1: observed, 2: ignored) and above them how many commands now wait for `nextCommand`
    /// (`index.js` answers `null` without a call when none do). A malformed event is an error
    /// naming its JSON path and changes nothing.
    #[napi(catch_unwind)]
    pub fn handle(&mut self, event: String) -> Result<u32> {
        // The common case without the path bookkeeping; an error is read again for its path.
        let event = match serde_json::from_str::<EventIn>(&event) {
            Ok(event) => event,
            Err(_) => EventIn::from_json(&event).map_err(input)?,
        };
        let handled = match self.host.handle(event).map_err(input)? {
            Handle::Step => 0,
            Handle::Observed => 1,
            Handle::Ignored => 2,
        };
        Ok(handled | (self.pending() << 2))
    }

    /// How many commands wait for `nextCommand`.
    #[napi(getter, catch_unwind)]
    pub fn pending(&self) -> u32 {
        u32::try_from(self.host.pending())
            .unwrap_or(u32::MAX >> 2)
            .min(u32::MAX >> 2)
    }

    /// The next command as JSON text, or nothing while the kernel waits for an event.
    #[napi(catch_unwind)]
    pub fn next_command(&mut self) -> Option<String> {
        if let Some((delay_ms, tools)) = self.host.next_call_model() {
            return Some(format!(
                r#"{{"command":"call_model","delay_ms":{delay_ms},"tools":{tools}}}"#
            ));
        }
        let command = self.host.next_command()?;
        // Plain data with string keys: serializing cannot fail.
        Some(serde_json::to_string(&command).unwrap_or_default())
    }

    /// The current state: `Exploring`, `Acting`, `Verifying`, `Nudged`, `Complete`, `Aborted`.
    #[napi(getter, catch_unwind)]
    pub fn phase(&self) -> &'static str {
        self.host.phase().as_str()
    }

    /// Every counter of the kernel, as JSON text.
    #[napi(catch_unwind)]
    pub fn stats(&self) -> String {
        serde_json::to_string(&self.host.machine().stats()).unwrap_or_default()
    }

    /// The report as JSON text: the fields of `terminus run --json` without the execution id
    /// (while the run goes on, `outcome`, `reason` and `rule` are null).
    #[napi(catch_unwind)]
    pub fn report(&self) -> String {
        self.host.report_json().to_string()
    }

    /// Why the run stopped and what to change: the text of `terminus inspect`.
    #[napi(catch_unwind)]
    pub fn explain(&self) -> String {
        self.host.explain().text()
    }

    /// The whole machine as JSON text.
    #[napi(catch_unwind)]
    pub fn snapshot(&self) -> String {
        self.host.snapshot()
    }

    /// A machine saved by `snapshot`; text that is not one is an error naming what is wrong.
    #[napi(factory, catch_unwind)]
    pub fn restore(snapshot: String) -> Result<Self> {
        let host = Host::restore(&snapshot).map_err(input)?;
        Ok(NativeMachine { host })
    }
}

/// Runs a scenario in process and returns its report as JSON text (that of `terminus run
/// --json` without the execution id). `scenario` is a path, or with `inline` the scenario's JSON
/// text. An invalid scenario is an `InvalidArg` error with the command line's message.
#[napi(catch_unwind)]
pub fn run_scenario(scenario: String, inline: bool) -> Result<String> {
    use terminus_scenario::Scenario;
    let (loaded, what) = if inline {
        let parsed = Scenario::parse(&scenario).map_err(invalid)?;
        (parsed, "scenario".to_owned())
    } else {
        let path = std::path::PathBuf::from(&scenario);
        (Scenario::load(&path).map_err(invalid)?, scenario)
    };
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .map_err(|e| failed(format!("cannot start a runtime: {e}")))?;
    let execution = loaded.name().to_owned();
    let config = terminus_runtime::RuntimeConfig {
        system_prompt: loaded.file().system_prompt.clone(),
        ..terminus_runtime::RuntimeConfig::default()
    };
    let report = runtime
        .block_on(loaded.run().execution(execution).config(config).execute())
        .map_err(|e| {
            let message = format!("{what}: {e}");
            if e.exit_code() == 2 {
                invalid(message)
            } else {
                failed(message)
            }
        })?;
    let mut value = serde_json::to_value(&report).map_err(failed)?;
    if let serde_json::Value::Object(map) = &mut value {
        map.remove("execution");
    }
    Ok(value.to_string())
}
