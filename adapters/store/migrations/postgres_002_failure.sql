-- Terminus journal, PostgreSQL schema version 2: an execution a worker could not run is `failed`,
-- with why (a JSON object: exit_code, reason, worker); workers never claim it again.
ALTER TABLE terminus_executions ADD COLUMN IF NOT EXISTS failure TEXT;
