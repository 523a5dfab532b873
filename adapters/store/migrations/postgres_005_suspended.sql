-- Terminus journal, PostgreSQL schema version 5: suspended executions (docs/approvals.md).
-- `held` counts the held calls that wait for a decision (no worker claims the execution while it
-- is above 0); `suspended_ms` is when the last suspension began, Unix milliseconds (kept until a
-- worker takes the execution up again once every call is decided); `paused_ms` sums the
-- suspensions' lengths, which a resumed run's deadline does not count.
ALTER TABLE terminus_executions ADD COLUMN IF NOT EXISTS held INTEGER NOT NULL DEFAULT 0;
ALTER TABLE terminus_executions ADD COLUMN IF NOT EXISTS suspended_ms BIGINT;
ALTER TABLE terminus_executions ADD COLUMN IF NOT EXISTS paused_ms BIGINT NOT NULL DEFAULT 0;
