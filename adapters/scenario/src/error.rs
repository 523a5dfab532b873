//! Scenario errors: every one names the JSON path at fault and the problem.

use std::fmt;
use std::path::PathBuf;

/// A scenario that cannot be run: the JSON path (`$.model.turns[2].txt`), the problem, and the
/// position in the file when the JSON reader knows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScenarioError {
    /// The JSON path of the value at fault, `$` for the whole file.
    pub path: String,
    /// What is wrong with it.
    pub problem: String,
    /// Line and column (1-based) in the file, when known.
    pub position: Option<(usize, usize)>,
}

impl ScenarioError {
    pub(crate) fn at(path: impl Into<String>, problem: impl Into<String>) -> ScenarioError {
        ScenarioError {
            path: path.into(),
            problem: problem.into(),
            position: None,
        }
    }
}

impl fmt::Display for ScenarioError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.path, self.problem)?;
        if let Some((line, column)) = self.position {
            write!(f, " (line {line}, column {column})")?;
        }
        Ok(())
    }
}

impl std::error::Error for ScenarioError {}

/// A scenario file that cannot be loaded: unreadable, or invalid.
#[derive(Debug)]
pub enum LoadError {
    /// The file cannot be read.
    Read {
        /// The file.
        file: PathBuf,
        /// Why.
        error: std::io::Error,
    },
    /// The file's content is not a valid scenario.
    Invalid {
        /// The file.
        file: PathBuf,
        /// What is wrong, and where.
        error: ScenarioError,
    },
}

impl fmt::Display for LoadError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LoadError::Read { file, error } => {
                write!(f, "{}: cannot read the file: {error}", file.display())
            }
            LoadError::Invalid { file, error } => write!(f, "{}: {error}", file.display()),
        }
    }
}

impl std::error::Error for LoadError {}

pub(crate) use terminus_runtime::json_path::push_key;
