-- Plan review (docs/PEOPLE.md): a person's yes to one round's plan, quoting its hash, before any of it runs.
-- One row per plan put to review: a round has one, unless its supervisor died after asking and before
-- recording the plan, and the planner then proposed another (the stale row is expired when the new one is
-- asked for). A decision is one conditional UPDATE on the row still awaiting, unexpired and holding the
-- quoted hash: two people deciding at once, one wins, the other reads the row as it now is.
CREATE TABLE plan_reviews (
    run_id      uuid NOT NULL REFERENCES runs (run_id),
    round       integer NOT NULL,
    tenant_id   text NOT NULL,
    subject     text NOT NULL,
    plan        jsonb NOT NULL,
    plan_hash   text NOT NULL,
    nodes       text[] NOT NULL,
    state       text NOT NULL,
    expires_at  timestamptz NOT NULL,
    decided_by  text,
    decided_at  timestamptz,
    note        text,
    created_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (run_id, round, plan_hash)
);
