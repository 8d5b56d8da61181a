-- Ownership: one supervisor drives a run at a time, under a lease it renews while the run is live.
ALTER TABLE runs ADD COLUMN owner text;
ALTER TABLE runs ADD COLUMN lease_expires_at timestamptz;
ALTER TABLE runs ADD COLUMN pruned_at timestamptz;
CREATE INDEX runs_live_leases ON runs (lease_expires_at) WHERE finished_at IS NULL;
DROP INDEX runs_unfinished;

-- Written in the same transaction as a run's terminal transition.
CREATE TABLE audit_events (
    audit_id    uuid PRIMARY KEY,
    run_id      uuid NOT NULL REFERENCES runs ON DELETE CASCADE,
    tenant_id   text NOT NULL,
    subject     text NOT NULL,
    action      text NOT NULL,
    data        jsonb NOT NULL,
    at          timestamptz NOT NULL
);
CREATE INDEX audit_events_by_run ON audit_events (run_id);

-- Delivered at least once by the outbox relay; event_id is stable so receivers can de-duplicate.
CREATE TABLE outbox (
    event_id        uuid PRIMARY KEY,
    run_id          uuid NOT NULL REFERENCES runs ON DELETE CASCADE,
    topic           text NOT NULL,
    payload         jsonb NOT NULL,
    created_at      timestamptz NOT NULL,
    attempts        integer NOT NULL DEFAULT 0,
    last_error      text,
    delivered_at    timestamptz
);
CREATE INDEX outbox_undelivered ON outbox (created_at) WHERE delivered_at IS NULL;
