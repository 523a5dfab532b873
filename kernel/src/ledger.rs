//! The tool ledger: calls, failures and exclusions per tool. It is the source of truth for
//! "which tools has the agent used" (rule 8), because the conversation can be pruned.

use crate::event::ToolErrorKind;
use crate::name::Name;
use crate::tool_budget::{self, Tier, TierMarks, ToolBound};
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use std::collections::BTreeMap;
use std::fmt;
use std::hash::{Hash, Hasher};

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
    /// A bound of its call budget (`tool_budgets.NAME`) is reached: the call is refused and
    /// the run goes on. (Not kept in the ledger: a block follows from the counts.)
    Budget(Block),
}

/// A call refused at a bound of its tool's budget. In JSON, the bound's field and its value,
/// e.g. `{"block_at": 3}` (inside an [`Exclusion`]: `{"why": "budget", "block_at": 3}`); for a
/// tier, its index, its `block_at` and the call's number as the tier counts it:
/// `{"tier": 0, "block_at": 10, "call": 11}`.
#[derive(Debug, Clone, Copy)]
pub struct Block {
    /// The bound that refused the call.
    pub by: BlockedBy,
    /// Its value: the call, as the bound counts them, from which calls are refused.
    pub at: u32,
}

/// What refused a call: a bound of the single-tier form, or a tier.
#[derive(Debug, Clone, Copy)]
pub enum BlockedBy {
    /// A bound of [`tool_budget::TOOL_BOUNDS`].
    Bound(&'static ToolBound),
    /// Tier `index` of the budget's `tiers`, at the call numbered `call` as the tier counts.
    Tier {
        /// The tier's place in `tiers` (0-based).
        index: u8,
        /// The refused call's number, as the tier counts.
        call: u32,
    },
}

impl Block {
    /// A block by a bound of the single-tier form.
    pub const fn bound(bound: &'static ToolBound, at: u32) -> Block {
        Block {
            by: BlockedBy::Bound(bound),
            at,
        }
    }

    /// The tier that refused the call, if one did.
    pub const fn tier(&self) -> Option<usize> {
        match self.by {
            BlockedBy::Tier { index, .. } => Some(index as usize),
            BlockedBy::Bound(_) => None,
        }
    }

    /// Whether a checkpoint of the single-tier form (`reset_on`) lifts it.
    pub const fn lifted_by_reset(&self) -> bool {
        matches!(self.by, BlockedBy::Bound(bound) if bound.resets)
    }
}

impl PartialEq for Block {
    fn eq(&self, other: &Block) -> bool {
        let by = match (self.by, other.by) {
            (BlockedBy::Bound(a), BlockedBy::Bound(b)) => a.field == b.field,
            (BlockedBy::Tier { index: a, call: c }, BlockedBy::Tier { index: b, call: d }) => {
                a == b && c == d
            }
            _ => false,
        };
        by && self.at == other.at
    }
}

impl Eq for Block {}

impl Hash for Block {
    fn hash<H: Hasher>(&self, state: &mut H) {
        match self.by {
            BlockedBy::Bound(bound) => bound.field.hash(state),
            BlockedBy::Tier { index, call } => {
                index.hash(state);
                call.hash(state);
            }
        }
        self.at.hash(state);
    }
}

impl Serialize for Block {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match self.by {
            BlockedBy::Bound(bound) => serializer.collect_map([(bound.field, self.at)]),
            BlockedBy::Tier { index, call } => serializer.collect_map([
                ("tier", u32::from(index)),
                ("block_at", self.at),
                ("call", call),
            ]),
        }
    }
}

impl<'de> Deserialize<'de> for Block {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Block, D::Error> {
        let fields = BTreeMap::<String, u32>::deserialize(deserializer)?;
        if let Some(&tier) = fields.get("tier") {
            return match (fields.get("block_at"), fields.get("call"), fields.len()) {
                (Some(&at), Some(&call), 3) => match u8::try_from(tier) {
                    Ok(index) if usize::from(index) < tool_budget::MAX_TIERS => Ok(Block {
                        by: BlockedBy::Tier { index, call },
                        at,
                    }),
                    _ => Err(serde::de::Error::custom(format!(
                        "tier {tier} is past the last one a budget may have ({})",
                        tool_budget::MAX_TIERS - 1
                    ))),
                },
                _ => Err(serde::de::Error::custom(
                    "a tier's block names `tier`, `block_at` and `call`",
                )),
            };
        }
        let mut bounds = fields.iter();
        match (bounds.next(), bounds.next()) {
            (Some((field, &at)), None) => match tool_budget::ToolBound::named(field) {
                Some(bound) => Ok(Block::bound(bound, at)),
                None => Err(serde::de::Error::custom(format!(
                    "unknown tool budget bound `{field}`, expected one of {}",
                    bound_names()
                ))),
            },
            _ => Err(serde::de::Error::custom(format!(
                "a budget block names one bound, one of {}, or a tier",
                bound_names()
            ))),
        }
    }
}

fn bound_names() -> String {
    let names: Vec<&str> = tool_budget::TOOL_BOUNDS.iter().map(|b| b.field).collect();
    names.join(", ")
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
            Exclusion::Budget(Block {
                by: BlockedBy::Tier { index, .. },
                at,
            }) => {
                write!(f, "tier {} of its budget blocks from call {at}", index + 1)
            }
            Exclusion::Budget(block) if block.lifted_by_reset() => {
                write!(f, "its budget of {} calls is spent", block.at)
            }
            Exclusion::Budget(block) => {
                write!(
                    f,
                    "its budget of {} calls in the whole run is spent",
                    block.at
                )
            }
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
    /// Set once the tool is excluded for failures; it stays excluded. (A saved run of an earlier
    /// edition may hold a budget block here, which a reset of its budget lifts.)
    pub excluded: Option<Exclusion>,
    /// Executions issued before its budget was last reset (`reset_on`): the budget counts the
    /// calls after them. 0 until a reset (and then absent from the JSON form).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub budget_base: u32,
    /// Tool turns since its budget's last reset in which a call of it was refused by a bound a
    /// reset lifts (`block_at`): from the second, a checkpoint is due (`policy.auto_checkpoints`).
    /// 0 until then (and then absent from the JSON form).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub blocked_turns: u32,
    /// Per tier of its budget (`tiers`), the calls at the tier's last lift (see
    /// [`tool_budget::Tier::count`]). All 0 until a lift (and then absent from the JSON form).
    #[serde(default, skip_serializing_if = "TierMarks::is_clear")]
    pub tier_marks: TierMarks,
}

#[allow(clippy::trivially_copy_pass_by_ref)] // serde's `skip_serializing_if` passes a reference
const fn is_zero(n: &u32) -> bool {
    *n == 0
}

impl ToolRecord {
    /// Executions that count against the tool's budget: those since its last reset.
    pub const fn budget_calls(&self) -> u32 {
        self.calls.saturating_sub(self.budget_base)
    }
}

/// Per-tool records, ordered by name so that serialization and reports are deterministic.
///
/// An agent has a handful of tools, and the machine looks one up on every tool event, so the
/// records are a vector in name order (serialized as a map, as before) searched by name length
/// first, which for a few names is cheaper than a tree's string comparisons. A name carries its
/// fingerprint ([`Name`]), so the machine's own lookups compare those before the strings.
/// Whether any tool is excluded is kept on the side, so that a turn can skip the exclusion lookup
/// of each call while none is; a budget reset that lifts an exclusion recomputes it (`reset_on`,
/// see [`crate::ToolBudget`]).
#[derive(Debug, Clone, Default)]
pub struct Ledger {
    tools: Vec<(Name, ToolRecord)>,
    /// Some record has `excluded` set (derived from `tools`, so not compared or saved).
    any_excluded: bool,
}

impl PartialEq for Ledger {
    fn eq(&self, other: &Ledger) -> bool {
        self.tools == other.tools
    }
}

impl Eq for Ledger {}

impl Hash for Ledger {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.tools.hash(state);
    }
}

impl Serialize for Ledger {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_map(self.tools.iter().map(|(name, record)| (name, record)))
    }
}

impl<'de> Deserialize<'de> for Ledger {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Ledger, D::Error> {
        let tools: Vec<(Name, ToolRecord)> =
            BTreeMap::<String, ToolRecord>::deserialize(deserializer)?
                .into_iter()
                .map(|(name, record)| (Name::new(name), record))
                .collect();
        let any_excluded = tools.iter().any(|(_, r)| r.excluded.is_some());
        Ok(Ledger {
            tools,
            any_excluded,
        })
    }
}

impl Ledger {
    /// The position of `tool`'s record.
    #[inline]
    fn find(&self, tool: &str) -> Option<usize> {
        self.tools
            .iter()
            .position(|(name, _)| name.len() == tool.len() && name.as_str() == tool)
    }

    /// The position of `tool`'s record, by its fingerprint first.
    #[inline]
    fn find_name(&self, tool: &Name) -> Option<usize> {
        self.tools.iter().position(|(name, _)| name.is(tool))
    }

    /// The record of `tool`, if it was ever called.
    pub fn get(&self, tool: &str) -> Option<&ToolRecord> {
        self.find(tool).map(|i| &self.tools[i].1)
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
        if !self.any_excluded {
            return None;
        }
        self.get(tool).and_then(|r| r.excluded)
    }

    /// Whether any tool is excluded.
    #[inline]
    pub(crate) fn any_excluded(&self) -> bool {
        self.any_excluded
    }

    /// Executions issued for `tool`.
    pub fn calls(&self, tool: &str) -> u32 {
        self.get(tool).map_or(0, |r| r.calls)
    }

    /// Executions of `tool` that count against its budget (those since its last reset).
    pub fn budget_calls(&self, tool: &str) -> u32 {
        self.get(tool).map_or(0, ToolRecord::budget_calls)
    }

    /// Resets `tool`'s budget (`tool_budgets.NAME.reset_on`): its calls so far no longer count,
    /// and an exclusion by its budget is lifted (other exclusions stay). Returns whether an
    /// exclusion was lifted.
    pub(crate) fn reset_budget(&mut self, tool: &str) -> bool {
        let Some(i) = self.find(tool) else {
            return false;
        };
        let record = &mut self.tools[i].1;
        record.budget_base = record.calls;
        record.blocked_turns = 0;
        if !matches!(record.excluded, Some(Exclusion::Budget(block)) if block.lifted_by_reset()) {
            return false;
        }
        record.excluded = None;
        self.any_excluded = self.tools.iter().any(|(_, r)| r.excluded.is_some());
        true
    }

    /// Lifts the tiers of `tool`'s budget whose `reset_on` names a tool that succeeded (`lifts`
    /// answers for each tier): each keeps its mark ([`Tier::lifted`]).
    pub(crate) fn lift_tiers(&mut self, tool: &str, tiers: &[Tier], lifts: impl Fn(&Tier) -> bool) {
        let Some(i) = self.find(tool) else {
            return;
        };
        let record = &mut self.tools[i].1;
        for (index, tier) in tiers.iter().enumerate().take(tool_budget::MAX_TIERS) {
            if lifts(tier) {
                record.tier_marks.0[index] = tier.lifted(record.calls, record.tier_marks.0[index]);
            }
        }
    }

    /// Every tool with its record, by name.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &ToolRecord)> {
        self.tools.iter().map(|(k, v)| (k.as_str(), v))
    }

    /// Excluded tools, by name.
    pub fn excluded(&self) -> impl Iterator<Item = (&str, Exclusion)> {
        self.iter().filter_map(|(k, r)| r.excluded.map(|e| (k, e)))
    }

    /// Changes the record of `tool` with `change` and returns what it returns; the name is
    /// allocated only the first time. (Inlined: the lookup of a known tool is a few
    /// instructions, and the insertion of a new one is out of line.)
    #[inline]
    pub(crate) fn update<R>(
        &mut self,
        tool: &Name,
        change: impl FnOnce(&mut ToolRecord) -> R,
    ) -> R {
        let i = match self.find_name(tool) {
            Some(i) => i,
            None => self.insert(tool),
        };
        let (out, excluded) = match self.tools.get_mut(i) {
            Some((_, record)) => (change(record), record.excluded.is_some()),
            // `i` is the position of the record found or inserted.
            None => (change(&mut ToolRecord::default()), false),
        };
        self.any_excluded |= excluded;
        out
    }

    /// Inserts an empty record for `tool`, in name order, and returns its position.
    #[cold]
    #[inline(never)]
    fn insert(&mut self, tool: &Name) -> usize {
        let at = self.tools.partition_point(|(name, _)| name < tool);
        self.tools.insert(at, (tool.clone(), ToolRecord::default()));
        at
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_stay_in_name_order_and_serialize_as_a_map() {
        let mut ledger = Ledger::default();
        for tool in ["write_file", "grep", "read_file", "grep"] {
            ledger.update(&tool.into(), |r| r.calls += 1);
        }
        let names: Vec<&str> = ledger.iter().map(|(n, _)| n).collect();
        assert_eq!(names, ["grep", "read_file", "write_file"]);
        assert_eq!(ledger.calls("grep"), 2);
        assert_eq!(ledger.exclusion("grep"), None);
        ledger.update(&"read_file".into(), |r| {
            r.excluded = Some(Exclusion::Failures { count: 3 })
        });
        assert_eq!(
            ledger.exclusion("read_file"),
            Some(Exclusion::Failures { count: 3 })
        );
        let text = serde_json::to_string(&ledger).unwrap_or_default();
        assert!(text.starts_with(r#"{"grep":{"calls":2,"#), "{text}");
        let read: Ledger = serde_json::from_str(&text).unwrap_or_default();
        assert_eq!(read, ledger);
        assert_eq!(
            read.exclusion("read_file"),
            Some(Exclusion::Failures { count: 3 })
        );
    }

    #[test]
    fn a_budget_reset_lifts_only_a_budget_exclusion_and_restarts_the_count() {
        let mut ledger = Ledger::default();
        for _ in 0..3 {
            ledger.update(&"search".into(), |r| r.calls += 1);
        }
        ledger.update(&"search".into(), |r| {
            r.excluded = Some(Exclusion::Budget(Block::bound(&tool_budget::BLOCK_AT, 3)))
        });
        ledger.update(&"deploy".into(), |r| {
            r.excluded = Some(Exclusion::Failures { count: 3 })
        });
        assert!(ledger.reset_budget("search"));
        assert_eq!(ledger.exclusion("search"), None);
        assert_eq!(ledger.calls("search"), 3);
        assert_eq!(ledger.budget_calls("search"), 0);
        // A failure exclusion is not the budget's to lift; the ledger still knows one is set.
        assert!(!ledger.reset_budget("deploy"));
        assert!(ledger.any_excluded());
        assert!(ledger.exclusion("deploy").is_some());
        // With the last exclusion lifted, the fast path sees none.
        let mut only = Ledger::default();
        only.update(&"search".into(), |r| {
            r.calls = 2;
            r.excluded = Some(Exclusion::Budget(Block::bound(&tool_budget::BLOCK_AT, 2)))
        });
        assert!(only.any_excluded());
        assert!(only.reset_budget("search"));
        assert!(!only.any_excluded());
        let text = serde_json::to_string(&only).unwrap_or_default();
        assert!(text.contains(r#""budget_base":2"#), "{text}");
        let read: Ledger = serde_json::from_str(&text).unwrap_or_default();
        assert_eq!(read.budget_calls("search"), 0);
        // Never reset: the record's JSON is as before.
        let deploy = serde_json::to_string(&ledger.get("deploy")).unwrap_or_default();
        assert!(!deploy.contains("budget_base"), "{deploy}");
    }
}
