-- Continuing a stopped run (docs/PEOPLE.md): the continuation is a run of its own that names the run it
-- continues. At most one continuation per run: two requests to continue one run at once insert one row (the
-- other's insert conflicts on this index and reads the winner), and the earlier run's own record is never
-- touched — it is linked forward by this column, queried.
ALTER TABLE runs ADD COLUMN continues uuid REFERENCES runs (run_id);
CREATE UNIQUE INDEX runs_continues ON runs (continues) WHERE continues IS NOT NULL;
