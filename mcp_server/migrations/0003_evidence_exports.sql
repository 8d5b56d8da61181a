-- caseops' long read: an evidence bundle of a case, exported in stages as an MCP task.
-- caseops_tasks is the server's task store, keyed by the task's id and the tenant, case and tool of the token
-- that started it: the server is stateless HTTP (no sessions), so any replica answers tasks/get, tasks/result
-- and tasks/cancel from this table, and a task outlives the request that started it. evidence_exports holds
-- the bundles: one row is written in the same transaction that completes the task, so a cancelled export
-- leaves none.
CREATE TABLE caseops_tasks (
    tenant_id         text NOT NULL REFERENCES tenants,
    task_id           text NOT NULL,
    case_id           text NOT NULL,
    tool              text NOT NULL,
    status            text NOT NULL DEFAULT 'working'
                      CHECK (status IN ('working', 'input_required', 'completed', 'failed', 'cancelled')),
    status_message    text,
    stages_done       integer NOT NULL DEFAULT 0,
    result            jsonb,
    is_error          boolean NOT NULL DEFAULT false,
    ttl_ms            integer NOT NULL,
    poll_interval_ms  integer NOT NULL,
    created_at        timestamptz NOT NULL DEFAULT now(),
    updated_at        timestamptz NOT NULL DEFAULT now(),
    stopped_at        timestamptz,
    PRIMARY KEY (tenant_id, task_id)
);

CREATE TABLE evidence_exports (
    tenant_id      text NOT NULL REFERENCES tenants,
    export_id      text NOT NULL,
    case_id        text NOT NULL,
    case_version   integer NOT NULL,
    bundle         jsonb NOT NULL,
    exported_at    timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant_id, export_id)
);
