-- A write that runs as an MCP task: the task's handle (its server, id, session and last status), recorded on
-- its operation while it executes, before anyone waits on it. Whoever finds the operation executing or
-- unknown follows the task to learn its outcome instead of guessing it (actors/run/operate.py).
ALTER TABLE operations ADD COLUMN task jsonb;
