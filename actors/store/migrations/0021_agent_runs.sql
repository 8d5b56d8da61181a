-- Agent nodes' child runs (docs/AGENTS.md): a child run names its parent run and node, and how deep it is among
-- agent runs (0: a run of its own). A parent's children are found by the index, for GET /runs/{id} and the run
-- list, which show the link both ways.
ALTER TABLE runs ADD COLUMN parent_run_id uuid REFERENCES runs (run_id);
ALTER TABLE runs ADD COLUMN parent_node_id text;
ALTER TABLE runs ADD COLUMN depth integer NOT NULL DEFAULT 0;
CREATE INDEX runs_by_parent ON runs (parent_run_id) WHERE parent_run_id IS NOT NULL;
