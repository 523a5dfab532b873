-- Terminus journal, SQLite schema version 3: how many times a worker was refused an execution
-- or lost its claim on it (each an exit code 4 for some process).
ALTER TABLE executions ADD COLUMN conflicts INTEGER NOT NULL DEFAULT 0;
