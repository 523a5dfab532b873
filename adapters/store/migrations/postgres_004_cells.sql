-- Terminus journal, PostgreSQL schema version 4: cells, small JSON values shared by every worker
-- on the journal and written by compare-and-set on their version (an orchestrator's circuit
-- breakers, a plan's progress).
CREATE TABLE IF NOT EXISTS terminus_cells (
    key TEXT PRIMARY KEY,
    version BIGINT NOT NULL,
    body TEXT NOT NULL
);
