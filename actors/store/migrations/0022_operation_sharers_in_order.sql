-- The runs sharing an operation are listed in the order they proposed or joined it: the moment each row is
-- written, under the intent's lock, not the start of its transaction (now()). A run whose transaction began
-- first but took the lock second was listed before the run that created the operation.
ALTER TABLE operation_runs ALTER COLUMN joined_at SET DEFAULT clock_timestamp();
