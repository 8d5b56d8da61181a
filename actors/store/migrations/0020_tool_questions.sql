-- A tool's question to a person (docs/PEOPLE.md): a tool server that asks for input mid-call (an MCP form
-- elicitation) asks a person through the run's inbox. One row per question, recorded before anyone waits on
-- it, decided by one conditional UPDATE on the row still awaiting; a decision wakes the run (the trigger of
-- migration 0014).
CREATE TABLE tool_questions (
    question_id  uuid PRIMARY KEY,
    run_id       uuid NOT NULL REFERENCES runs (run_id),
    node_id      text NOT NULL,
    attempt      integer NOT NULL,
    task_id      text NOT NULL,
    request_key  text NOT NULL,
    tenant_id    text NOT NULL,
    subject      text NOT NULL,
    server       text NOT NULL,
    tool         text NOT NULL,
    message      text NOT NULL,
    schema       jsonb NOT NULL,
    state        text NOT NULL,
    expires_at   timestamptz NOT NULL,
    content      jsonb,
    decided_by   text,
    decided_at   timestamptz,
    created_at   timestamptz NOT NULL DEFAULT now(),
    UNIQUE (run_id, node_id, attempt, task_id, request_key)
);

CREATE INDEX tool_questions_awaiting ON tool_questions (tenant_id, expires_at) WHERE state = 'awaiting';

CREATE TRIGGER tool_questions_decided AFTER UPDATE ON tool_questions FOR EACH ROW
    WHEN (OLD.state = 'awaiting' AND NEW.state <> 'awaiting')
    EXECUTE FUNCTION raydag_notify_decided();
