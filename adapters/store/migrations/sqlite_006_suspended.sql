-- Terminus journal, SQLite schema version 6: suspended executions (docs/approvals.md). `held`
-- counts the held calls that wait for a decision (no worker claims the execution while it is
-- above 0); `suspended_ms` is when the last suspension began (kept until a worker takes the
-- execution up again once every call is decided); `paused_ms` sums the suspensions' lengths, which
-- a resumed run's deadline does not count.
ALTER TABLE executions ADD COLUMN held INTEGER NOT NULL DEFAULT 0;
ALTER TABLE executions ADD COLUMN suspended_ms INTEGER;
ALTER TABLE executions ADD COLUMN paused_ms INTEGER NOT NULL DEFAULT 0;
