//! A scenario run in this process, as the packages run one (`run_scenario` in Python and Node):
//! `terminus run`'s run on a current-thread runtime of its own, its report as JSON without the
//! execution id, and, when asked, what the scripted model was sent ([`crate::sent`]). One
//! function, so the two packages cannot differ on how a scenario runs or how its failure reads.

use crate::Scenario;
use crate::sent::Sent;
use serde_json::Value;

/// What an in-process run gives.
#[derive(Debug)]
pub struct Ran {
    /// The report of `terminus run --json`, without the execution id.
    pub report: Value,
    /// What the scripted model was sent, call by call, when it was asked for.
    pub transcript: Option<Vec<Value>>,
}

/// Why an in-process run gave no report.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RunError {
    /// The scenario cannot run as written (the command line's exit 2): the caller's input.
    Invalid(String),
    /// The run failed otherwise, or no runtime could start.
    Failed(String),
}

impl std::fmt::Display for RunError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RunError::Invalid(message) | RunError::Failed(message) => f.write_str(message),
        }
    }
}

impl std::error::Error for RunError {}

/// Runs `scenario` in this thread (`what` names it in an error: its path, or `scenario`), with
/// the system prompt it declares, recording what its model is sent when `transcript` is set.
pub fn run_in_process(scenario: Scenario, what: &str, transcript: bool) -> Result<Ran, RunError> {
    let sent = transcript.then(Sent::new);
    let scenario = match &sent {
        Some(sent) => scenario.with_sent(sent.clone()),
        None => scenario,
    };
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .map_err(|e| RunError::Failed(format!("cannot start a runtime: {e}")))?;
    let execution = scenario.name().to_owned();
    let config = terminus_runtime::RuntimeConfig {
        system_prompt: scenario.file().system_prompt.clone(),
        ..terminus_runtime::RuntimeConfig::default()
    };
    let report = runtime
        .block_on(scenario.run().execution(execution).config(config).execute())
        .map_err(|e| {
            let message = format!("{what}: {e}");
            if e.exit_code() == 2 {
                RunError::Invalid(message)
            } else {
                RunError::Failed(message)
            }
        })?;
    let mut report =
        serde_json::to_value(&report).map_err(|e| RunError::Failed(format!("{what}: {e}")))?;
    if let Value::Object(map) = &mut report {
        map.remove("execution");
    }
    Ok(Ran {
        report,
        transcript: sent.map(|sent| sent.calls()),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scenario(text: &str) -> Scenario {
        match Scenario::parse(text) {
            Ok(s) => s,
            Err(e) => panic!("the test's scenario parses: {e}"),
        }
    }

    #[test]
    fn a_run_gives_the_report_without_its_execution_and_the_transcript_when_asked() {
        let text = r#"{ "name": "hello", "task": "Say hello.", "system_prompt": "Be brief.",
            "model": { "turns": [ { "text": "Hello." } ] } }"#;
        let ran = run_in_process(scenario(text), "scenario", true).expect("it runs");
        assert_eq!(ran.report["outcome"], "complete");
        assert_eq!(ran.report["result"], "Hello.");
        assert!(ran.report.get("execution").is_none());
        let calls = ran.transcript.expect("asked for");
        assert_eq!(calls.len(), 1);
        assert_eq!(calls[0][0]["role"], "system");
        assert_eq!(calls[0][0]["text"], "Be brief.");
        let plain = run_in_process(scenario(text), "scenario", false).expect("it runs");
        assert!(plain.transcript.is_none());
        assert_eq!(plain.report, ran.report);
    }

    #[test]
    fn a_script_the_run_outlives_is_the_callers_input_named_by_what() {
        let text = r#"{ "name": "short", "task": "t",
            "model": { "turns": [ { "tool_calls": [ { "name": "read", "arguments": {} } ] } ] },
            "tools": { "read": { "results": [ { "ok": "x" } ] } } }"#;
        match run_in_process(scenario(text), "short.json", false) {
            Err(RunError::Invalid(message)) => {
                assert!(message.starts_with("short.json: "), "{message}");
                assert!(message.contains("model script exhausted"), "{message}");
            }
            other => panic!("a script the run outlives gave {other:?}"),
        }
    }
}
