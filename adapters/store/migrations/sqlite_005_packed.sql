-- Terminus journal, SQLite schema version 5: the entries of executions created from this version
-- on are stored in `packed_entries`, keyed by one integer that packs the execution's number
-- (`executions.num`), the checkpoint and the index, so that a step's entries are appended at the
-- end of a table b-tree: its commit writes one page, and two when the page is full. In `entries`
-- (a WITHOUT ROWID table, which SQLite balances as an index b-tree) a full page is rebalanced
-- with its two neighbours, so a commit wrote about four pages. `entries` keeps the executions
-- created before this version and the rare keys that do not fit the packing (see `sqlite.rs`).
ALTER TABLE executions ADD COLUMN num INTEGER;
CREATE UNIQUE INDEX executions_num ON executions (num);
CREATE TABLE packed_entries (
    key  INTEGER PRIMARY KEY,  -- num << 40 | checkpoint << 14 | idx
    kind TEXT NOT NULL,
    body TEXT NOT NULL
);
-- Every entry of every execution, for people reading the journal with `sqlite3`.
CREATE VIEW journal AS
    SELECT x.id AS execution, (p.key >> 14) & 67108863 AS checkpoint, p.key & 16383 AS idx,
           p.kind AS kind, p.body AS body
    FROM packed_entries p JOIN executions x ON x.num = p.key >> 40
    UNION ALL
    SELECT execution, checkpoint, idx, kind, body FROM entries;
