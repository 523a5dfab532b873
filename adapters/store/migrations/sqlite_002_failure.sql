-- Terminus journal, SQLite schema version 2: an execution a worker could not run is `failed`,
-- with why (a JSON object: exit_code, reason, worker); workers never claim it again.
ALTER TABLE executions ADD COLUMN failure TEXT;
