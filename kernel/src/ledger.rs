//! The tool ledger: calls, failures and exclusions per tool. It is the source of truth for
//! "which tools has the agent used" (rule 8), because the conversation can be pruned.

use crate::event::ToolErrorKind;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::fmt;

/// Why a tool is excluded: its calls are refused and the model is told.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "why")]
pub enum Exclusion {
    /// It failed `max_tool_failures` times.
    Failures {
        /// Failures so far.
        count: u32,
    },
    /// It failed with an unrecoverable class (rule 7); it is never retried.
    Unrecoverable {
        /// The class.
        kind: ToolErrorKind,
    },
    /// Its call budget (`tool_budgets.block_at`) is spent.
    Budget {
        /// The budget.
        block_at: u32,
    },
}

impl fmt::Display for Exclusion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Exclusion::Failures { count } => write!(f, "it failed {count} times"),
            Exclusion::Unrecoverable { kind } => {
                write!(
                    f,
                    "it failed with {} (not recoverable by retrying)",
                    kind.as_str()
                )
            }
            Exclusion::Budget { block_at } => write!(f, "its budget of {block_at} calls is spent"),
        }
    }
}

/// What the ledger knows about one tool.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ToolRecord {
    /// Executions issued.
    pub calls: u32,
    /// Executions that succeeded.
    pub successes: u32,
    /// Executions that failed.
    pub failures: u32,
    /// Calls refused while excluded.
    pub refused: u32,
    /// Set once the tool is excluded (it stays excluded).
    pub excluded: Option<Exclusion>,
}

/// Per-tool records, ordered by name so that serialization and reports are deterministic.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Ledger {
    tools: BTreeMap<String, ToolRecord>,
}

impl Ledger {
    /// The record of `tool`, if it was ever called.
    pub fn get(&self, tool: &str) -> Option<&ToolRecord> {
        self.tools.get(tool)
    }

    /// Whether `tool` succeeded at least once.
    pub fn succeeded(&self, tool: &str) -> bool {
        self.get(tool).is_some_and(|r| r.successes > 0)
    }

    /// The tools of `required` that never succeeded (what rule 5 still waits for).
    pub fn missing(&self, required: &[String]) -> Vec<String> {
        required
            .iter()
            .filter(|t| !self.succeeded(t))
            .cloned()
            .collect()
    }

    /// Why `tool` is excluded, if it is.
    pub fn exclusion(&self, tool: &str) -> Option<Exclusion> {
        self.get(tool).and_then(|r| r.excluded)
    }

    /// Executions issued for `tool`.
    pub fn calls(&self, tool: &str) -> u32 {
        self.get(tool).map_or(0, |r| r.calls)
    }

    /// Every tool with its record, by name.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &ToolRecord)> {
        self.tools.iter().map(|(k, v)| (k.as_str(), v))
    }

    /// Excluded tools, by name.
    pub fn excluded(&self) -> impl Iterator<Item = (&str, Exclusion)> {
        self.iter().filter_map(|(k, r)| r.excluded.map(|e| (k, e)))
    }

    /// Mutable record for `tool`; allocates its name only the first time.
    pub(crate) fn entry(&mut self, tool: &str) -> &mut ToolRecord {
        if !self.tools.contains_key(tool) {
            self.tools.insert(tool.to_owned(), ToolRecord::default());
        }
        match self.tools.get_mut(tool) {
            Some(record) => record,
            None => unreachable!("the record was inserted above"),
        }
    }
}
