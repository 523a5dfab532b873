-- Terminus journal, SQLite schema version 4: cells, small JSON values shared by every process on
-- the journal and written by compare-and-set on their version (an orchestrator's circuit
-- breakers, a plan's progress).
CREATE TABLE cells (
    key TEXT PRIMARY KEY,
    version INTEGER NOT NULL,
    body TEXT NOT NULL
);
