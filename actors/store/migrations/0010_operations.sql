-- The operation ledger (docs/EFFECTS.md): one row per write a run wants to make. The id is derived from the
-- run, the tool and the SHA-256 of the canonical resolved arguments, so the same write proposed twice (two
-- nodes, a replan, a recovery) is one row. Every state change is a conditional UPDATE on the expected state,
-- and its history row is written in the same statement: only the caller whose UPDATE moved a row from
-- 'approved' to 'executing' may call the tool. Rows are effect records: retention never removes them.
CREATE TABLE operations (
    operation_id     uuid PRIMARY KEY,
    run_id           uuid NOT NULL REFERENCES runs (run_id),
    node_id          text NOT NULL,
    tenant_id        text NOT NULL,
    subject          text NOT NULL,
    resource         jsonb NOT NULL,
    tool             text NOT NULL,
    description      text NOT NULL,
    risk             text NOT NULL,
    approval         text NOT NULL,
    recording        text NOT NULL,
    args             jsonb NOT NULL,
    args_hash        text NOT NULL,
    state            text NOT NULL,
    attempts         integer NOT NULL DEFAULT 0,
    expires_at       timestamptz,
    executing_since  timestamptz,
    output           jsonb,
    error            jsonb,
    created_at       timestamptz NOT NULL DEFAULT now(),
    updated_at       timestamptz NOT NULL DEFAULT now(),
    UNIQUE (run_id, tool, args_hash)
);
CREATE INDEX operations_by_run ON operations (run_id, created_at);
CREATE INDEX operations_unknown ON operations (updated_at) WHERE state = 'unknown';

CREATE TABLE operation_transitions (
    operation_id  uuid NOT NULL REFERENCES operations (operation_id),
    seq           bigserial,
    from_state    text,
    to_state      text NOT NULL,
    actor         text NOT NULL,
    note          text,
    at            timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (operation_id, seq)
);
