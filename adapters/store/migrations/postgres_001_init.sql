-- Terminus journal, PostgreSQL schema version 1.
CREATE TABLE IF NOT EXISTS terminus_executions (
    id          TEXT PRIMARY KEY,
    status      TEXT NOT NULL DEFAULT 'running',  -- pending | running | done
    worker      TEXT,
    lease_until TIMESTAMPTZ NOT NULL DEFAULT 'epoch',
    created     TIMESTAMPTZ NOT NULL DEFAULT now(),
    spec        TEXT,
    report      TEXT
);
CREATE INDEX IF NOT EXISTS terminus_executions_runnable ON terminus_executions (status, lease_until);
CREATE TABLE IF NOT EXISTS terminus_entries (
    execution  TEXT    NOT NULL REFERENCES terminus_executions (id) ON DELETE CASCADE,
    checkpoint BIGINT  NOT NULL,
    idx        INTEGER NOT NULL,
    kind       TEXT    NOT NULL,
    body       TEXT    NOT NULL,
    PRIMARY KEY (execution, checkpoint, idx)
);
