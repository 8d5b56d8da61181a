-- Who a run acts for: reads of a run require the reader to hold at least the run's scopes.
ALTER TABLE runs ADD COLUMN scopes text[] NOT NULL DEFAULT '{}';
