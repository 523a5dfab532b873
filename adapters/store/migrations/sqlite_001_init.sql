-- Terminus journal, SQLite schema version 1.
CREATE TABLE IF NOT EXISTS executions (
    id             TEXT PRIMARY KEY,
    status         TEXT NOT NULL DEFAULT 'running',  -- running | done
    worker         TEXT,
    lease_until_ms INTEGER NOT NULL DEFAULT 0,         -- unix ms; the claim is free once past
    created_ms     INTEGER NOT NULL,
    spec           TEXT,                               -- what the run needs to resume (a scenario)
    report         TEXT                                -- the stop report once done
);
CREATE TABLE IF NOT EXISTS entries (
    execution  TEXT    NOT NULL,
    checkpoint INTEGER NOT NULL,
    idx        INTEGER NOT NULL,
    kind       TEXT    NOT NULL,
    body       TEXT    NOT NULL,
    PRIMARY KEY (execution, checkpoint, idx)
) WITHOUT ROWID;
