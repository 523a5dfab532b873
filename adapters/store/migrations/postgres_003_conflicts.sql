-- Terminus journal, PostgreSQL schema version 3: how many times a worker was refused an
-- execution or lost its claim on it (each an exit code 4 for some process).
ALTER TABLE terminus_executions ADD COLUMN IF NOT EXISTS conflicts BIGINT NOT NULL DEFAULT 0;
