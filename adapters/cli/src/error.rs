//! The one error type of the command line: every subcommand returns `Result<u8, CliError>`,
//! `Ok` the outcome's exit code (0 complete, 1 aborted, 5 suspended), `Err` a failure that
//! `main` prints (`terminus: MESSAGE` on stderr) and maps to its exit code, in one place. The
//! codes are the contract of `docs/design.md`, "Exit codes".

use std::fmt;
use std::io::Write as _;
use terminus_runtime::{RunError, StoreError};

/// Invalid input: nothing is run or written.
pub(crate) const INVALID: u8 = 2;
/// An internal or storage error.
pub(crate) const INTERNAL: u8 = 3;
/// The execution is claimed by another worker.
pub(crate) const CLAIMED: u8 = 4;
/// Suspended: held calls wait for a decision (`docs/approvals.md`).
pub(crate) const SUSPENDED: u8 = 5;

/// Why a command failed, by exit-code class; each variant carries what to tell the user.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum CliError {
    /// Invalid input (exit 2): the message names the file, field, flag or JSON path.
    Invalid(String),
    /// An internal or storage error (exit 3).
    Internal(String),
    /// The execution is claimed by another worker (exit 4).
    Claimed(String),
    /// A failure whose code is given rather than classed: an execution a worker marked failed
    /// exits with the code the worker recorded.
    Exit {
        /// The exit code.
        code: u8,
        /// What to tell the user.
        message: String,
    },
    /// A failure the command's output already tells (the `FAIL` lines of `check` on stdout):
    /// nothing more is printed, the code is as given.
    Reported(u8),
    /// Several failures, each printed on its own line, in order; the exit code is the last
    /// one's (a plan's problems and their count).
    Several(Vec<CliError>),
    /// An `[[mcp]]` server's authorization waits for a person to log in (exit 5, suspended):
    /// nothing was run.
    Login(Box<LoginWait>),
}

/// An `[[mcp]]` server whose authorization server wants a person to log in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct LoginWait {
    /// The agent config, as the user named it.
    pub(crate) config: String,
    /// The `[[mcp]]` entry's name.
    pub(crate) server: String,
    /// The authorization URL the person opens.
    pub(crate) url: String,
}

impl CliError {
    /// The failure with exit code `code`: classed when the contract names it, else as given.
    pub(crate) fn with_code(code: u8, message: impl Into<String>) -> CliError {
        let message = message.into();
        match code {
            INVALID => CliError::Invalid(message),
            INTERNAL => CliError::Internal(message),
            CLAIMED => CliError::Claimed(message),
            code => CliError::Exit { code, message },
        }
    }

    /// A run that could not finish, described as `message`, with the run error's exit code.
    pub(crate) fn run(error: &RunError, message: impl Into<String>) -> CliError {
        CliError::with_code(error.exit_code(), message)
    }

    /// A journal that failed: its message, and its code as a run's (3, or 2 for what is not
    /// there, 4 for a claim another worker holds).
    pub(crate) fn store(error: &StoreError) -> CliError {
        CliError::run(&RunError::Store(error.clone()), error.to_string())
    }

    /// The exit code.
    pub(crate) fn code(&self) -> u8 {
        match self {
            CliError::Invalid(_) => INVALID,
            CliError::Internal(_) => INTERNAL,
            CliError::Claimed(_) => CLAIMED,
            CliError::Login(_) => SUSPENDED,
            CliError::Exit { code, .. } | CliError::Reported(code) => *code,
            CliError::Several(errors) => errors.last().map_or(INTERNAL, CliError::code),
        }
    }

    /// The same failure, its message (each one's, for [`CliError::Several`]) after `prefix: `.
    pub(crate) fn context(self, prefix: impl fmt::Display) -> CliError {
        self.prefixed(&prefix.to_string())
    }

    fn prefixed(self, prefix: &str) -> CliError {
        match self {
            CliError::Invalid(m) => CliError::Invalid(format!("{prefix}: {m}")),
            CliError::Internal(m) => CliError::Internal(format!("{prefix}: {m}")),
            CliError::Claimed(m) => CliError::Claimed(format!("{prefix}: {m}")),
            CliError::Exit { code, message } => CliError::Exit {
                code,
                message: format!("{prefix}: {message}"),
            },
            CliError::Reported(code) => CliError::Reported(code),
            CliError::Several(errors) => {
                CliError::Several(errors.into_iter().map(|e| e.prefixed(prefix)).collect())
            }
            // Its message names the config and the server already.
            CliError::Login(wait) => CliError::Login(wait),
        }
    }

    /// Prints the failure on stderr, `terminus: ` before each line it is made of, in one write.
    pub(crate) fn print(&self) {
        let mut lines = String::new();
        self.write_lines(&mut lines);
        let _ = std::io::stderr().lock().write_all(lines.as_bytes());
    }

    fn write_lines(&self, out: &mut String) {
        match self {
            CliError::Several(errors) => {
                for e in errors {
                    e.write_lines(out);
                }
            }
            CliError::Reported(_) => {}
            one => {
                out.push_str("terminus: ");
                out.push_str(&one.to_string());
                out.push('\n');
            }
        }
    }
}

/// The message without the `terminus: ` prefix; [`CliError::Several`]'s one a line.
impl fmt::Display for CliError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CliError::Invalid(m) | CliError::Internal(m) | CliError::Claimed(m) => f.write_str(m),
            CliError::Exit { message, .. } => f.write_str(message),
            CliError::Login(wait) => write!(
                f,
                "{}: [[mcp]] `{}`: authorization waits for a person to log in at {}",
                wait.config, wait.server, wait.url
            ),
            CliError::Reported(_) => Ok(()),
            CliError::Several(errors) => {
                let shown = errors
                    .iter()
                    .filter(|e| !matches!(e, CliError::Reported(_)));
                for (i, e) in shown.enumerate() {
                    if i > 0 {
                        f.write_str("\n")?;
                    }
                    write!(f, "{e}")?;
                }
                Ok(())
            }
        }
    }
}

impl std::error::Error for CliError {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_code_the_contract_names_gets_its_class() {
        assert_eq!(CliError::with_code(2, "m"), CliError::Invalid("m".into()));
        assert_eq!(CliError::with_code(3, "m"), CliError::Internal("m".into()));
        assert_eq!(CliError::with_code(4, "m"), CliError::Claimed("m".into()));
        let other = CliError::with_code(7, "m");
        assert_eq!(other.code(), 7);
        assert_eq!(other.to_string(), "m");
    }

    #[test]
    fn store_errors_keep_the_runs_exit_codes() {
        let missing = CliError::store(&StoreError::NotFound("x".into()));
        assert_eq!(missing.code(), INVALID);
        let claimed = CliError::store(&StoreError::Claimed {
            execution: "x".into(),
            worker: "w".into(),
        });
        assert_eq!(claimed.code(), CLAIMED);
        let corrupt = StoreError::Corrupt {
            journal: "j.db".into(),
            what: "row 1".into(),
        };
        let broken = CliError::store(&corrupt);
        assert_eq!(broken.code(), INTERNAL);
        assert_eq!(broken.to_string(), corrupt.to_string());
    }

    #[test]
    fn context_prefixes_every_message_and_keeps_the_code() {
        let e = CliError::Several(vec![
            CliError::Invalid("a".into()),
            CliError::Invalid("b".into()),
        ])
        .context("plan.json");
        assert_eq!(e.code(), INVALID);
        assert_eq!(e.to_string(), "plan.json: a\nplan.json: b");
        let mut lines = String::new();
        e.write_lines(&mut lines);
        assert_eq!(lines, "terminus: plan.json: a\nterminus: plan.json: b\n");
    }

    #[test]
    fn a_reported_failure_prints_nothing_and_gives_the_code() {
        let e = CliError::Several(vec![CliError::Invalid("a".into()), CliError::Reported(3)]);
        assert_eq!(e.code(), 3);
        assert_eq!(e.to_string(), "a");
        let mut lines = String::new();
        e.write_lines(&mut lines);
        assert_eq!(lines, "terminus: a\n");
    }
}
