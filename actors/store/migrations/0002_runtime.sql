-- Runs: a summary row per run, the append-only event log, and the tool ledger (one row per attempt).

CREATE TABLE runs (
    run_id              uuid PRIMARY KEY,
    tenant_id           text NOT NULL,
    subject             text NOT NULL,
    case_id             text NOT NULL,
    goal                text NOT NULL,
    planner             text NOT NULL,
    status              text NOT NULL,
    stop_reason         text,
    detail              text,
    result              jsonb,
    plan                jsonb,
    idempotency_key     text,
    request_hash        text NOT NULL,
    last_seq            integer NOT NULL,
    created_at          timestamptz NOT NULL,
    updated_at          timestamptz NOT NULL,
    finished_at         timestamptz,
    UNIQUE (tenant_id, idempotency_key)
);
CREATE INDEX runs_unfinished ON runs (status) WHERE finished_at IS NULL;

CREATE TABLE run_events (
    run_id      uuid NOT NULL REFERENCES runs ON DELETE CASCADE,
    seq         integer NOT NULL,
    kind        text NOT NULL,
    node_id     text,
    data        jsonb NOT NULL,
    recorded_at timestamptz NOT NULL DEFAULT clock_timestamp(),
    PRIMARY KEY (run_id, seq)
);

CREATE TABLE tool_ledger (
    run_id          uuid NOT NULL REFERENCES runs ON DELETE CASCADE,
    node_id         text NOT NULL,
    attempt         integer NOT NULL,
    tool            text NOT NULL,
    fingerprint     text NOT NULL,
    args_hash       text NOT NULL,
    decision        jsonb NOT NULL,
    status          text NOT NULL,
    error           jsonb,
    dispatched_at   timestamptz NOT NULL,
    started_at      timestamptz,
    finished_at     timestamptz,
    PRIMARY KEY (run_id, node_id, attempt)
);
