-- A planner's questions to a person (docs/PEOPLE.md): one row per question of a run, answered by one
-- conditional UPDATE on the row still awaiting and unexpired.
CREATE TABLE questions (
    run_id       uuid NOT NULL REFERENCES runs (run_id),
    number       integer NOT NULL,
    round        integer NOT NULL,
    tenant_id    text NOT NULL,
    subject      text NOT NULL,
    text         text NOT NULL,
    state        text NOT NULL,
    expires_at   timestamptz NOT NULL,
    answer       text,
    answered_by  text,
    answered_at  timestamptz,
    created_at   timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (run_id, number)
);
