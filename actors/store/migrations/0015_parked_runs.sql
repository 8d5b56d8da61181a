-- A run that waits for people and for nothing else is parked (docs/PEOPLE.md, "Waiting"): no supervisor drives
-- it, it holds no lease, no turn, no caller and no connection, and its clock stands still. `parked_until` is
-- when it must be woken anyway (the first deadline among its waits; 'infinity' for none); NULL: not parked.
-- A supervisor claims a parked run when a person decides one of its waits (the trigger below sets
-- `parked_until` to now, and notifies), or when `parked_until` comes (the orphan scan claims it).
ALTER TABLE runs ADD COLUMN parked_until timestamptz;
CREATE INDEX runs_parked ON runs (parked_until) WHERE parked_until IS NOT NULL;

-- The append of 0008, with `p_parked_until`: an append that parks the run (RunParked) gives its lease up in
-- the same statement, so that no owner is left holding a run it no longer drives; any other append clears it.
-- `p_outbox` is now an array: a run's end, or a wait it starts, each puts an event in the outbox with it.
DROP FUNCTION raydag_append(uuid, text, integer, text[], text[], jsonb, text, text, text, jsonb, jsonb,
                            timestamptz, timestamptz, double precision, text, jsonb, jsonb, text,
                            timestamptz, jsonb, jsonb);

CREATE FUNCTION raydag_append(
    p_run_id        uuid,
    p_owner         text,
    p_first_seq     integer,
    p_kinds         text[],
    p_node_ids      text[],
    p_events        jsonb,
    p_status        text,
    p_stop_reason   text,
    p_detail        text,
    p_result        jsonb,
    p_plan          jsonb,
    p_updated_at    timestamptz,
    p_finished_at   timestamptz,
    p_lease_s       double precision,
    p_running       text,
    p_opened        jsonb,
    p_closed        jsonb,
    p_cancelled     text,
    p_cancelled_at  timestamptz,
    p_audit         jsonb,
    p_outbox        jsonb,
    p_parked_until  timestamptz
) RETURNS text
LANGUAGE plpgsql AS $$
DECLARE
    v_last_seq integer := p_first_seq + cardinality(p_kinds) - 1;
    v_run record;
BEGIN
    SELECT last_seq, owner INTO v_run FROM runs WHERE run_id = p_run_id FOR UPDATE;
    IF NOT FOUND THEN
        RETURN 'missing';
    END IF;
    IF v_run.last_seq = v_last_seq AND (v_run.owner IS NOT DISTINCT FROM p_owner OR p_parked_until IS NOT NULL)
    THEN
        RETURN 'committed';  -- an append whose acknowledgement was lost (a parking one let the run go)
    END IF;
    IF v_run.owner IS DISTINCT FROM p_owner THEN
        RETURN 'owner:' || coalesce(v_run.owner, '');
    END IF;
    IF v_run.last_seq <> p_first_seq - 1 THEN
        RETURN 'seq:' || v_run.last_seq;
    END IF;

    INSERT INTO run_events (run_id, seq, kind, node_id, data)
    SELECT p_run_id, p_first_seq + i - 1, p_kinds[i], p_node_ids[i], p_events -> (i - 1)
    FROM generate_subscripts(p_kinds, 1) AS i;

    UPDATE runs
    SET status = p_status, stop_reason = p_stop_reason, detail = p_detail, result = p_result,
        plan = coalesce(p_plan, plan), last_seq = v_last_seq, updated_at = p_updated_at,
        finished_at = p_finished_at,
        parked_until = p_parked_until,
        owner = CASE WHEN p_parked_until IS NULL THEN owner END,
        lease_expires_at = CASE WHEN p_parked_until IS NOT NULL THEN NULL
                                WHEN p_finished_at IS NULL THEN now() + make_interval(secs => p_lease_s)
                                ELSE lease_expires_at END
    WHERE run_id = p_run_id;

    -- In event order: a row is opened before an outcome in the same append closes it.
    INSERT INTO tool_ledger (run_id, node_id, attempt, tool, fingerprint, args_hash, decision, status,
                             dispatched_at)
    SELECT p_run_id, o.node_id, o.attempt, o.tool, o.fingerprint, o.args_hash, o.decision, o.status,
           o.dispatched_at
    FROM jsonb_to_recordset(p_opened) AS o(node_id text, attempt integer, tool text, fingerprint text,
                                           args_hash text, decision jsonb, status text, dispatched_at timestamptz);

    UPDATE tool_ledger AS l
    SET status = c.status, error = c.error, started_at = c.started_at, finished_at = c.finished_at
    FROM jsonb_to_recordset(p_closed) AS c(node_id text, attempt integer, status text, error jsonb,
                                           started_at timestamptz, finished_at timestamptz)
    WHERE l.run_id = p_run_id AND l.node_id = c.node_id AND l.attempt = c.attempt AND l.status = p_running;

    IF p_cancelled_at IS NOT NULL THEN
        UPDATE tool_ledger SET status = p_cancelled, finished_at = p_cancelled_at
        WHERE run_id = p_run_id AND status = p_running;
    END IF;

    -- A run's end: its audit event commits with the end itself, or not at all.
    IF p_audit IS NOT NULL THEN
        INSERT INTO audit_events (audit_id, run_id, tenant_id, subject, action, data, at)
        SELECT a.audit_id, p_run_id, a.tenant_id, a.subject, a.action, a.data, a.at
        FROM jsonb_to_record(p_audit) AS a(audit_id uuid, tenant_id text, subject text, action text, data jsonb,
                                           at timestamptz);
    END IF;
    -- What the append tells the world (a run's end, a wait it starts) commits with it, or not at all.
    INSERT INTO outbox (event_id, run_id, topic, payload, created_at)
    SELECT b.event_id, p_run_id, b.topic, b.payload, b.created_at
    FROM jsonb_to_recordset(coalesce(p_outbox, '[]'::jsonb))
         AS b(event_id uuid, topic text, payload jsonb, created_at timestamptz)
    ON CONFLICT (event_id) DO NOTHING;
    RETURN 'appended';
END
$$;

-- A decision wakes its parked run: whoever writes it (the API, the CLI, a script), the run's row says the run
-- is due now, so that the next orphan scan of any supervisor claims it even if the notification was missed.
CREATE OR REPLACE FUNCTION raydag_notify_decided() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    UPDATE runs SET parked_until = now()
    WHERE run_id = NEW.run_id AND parked_until IS NOT NULL AND parked_until > now();
    PERFORM pg_notify('raydag_decided', NEW.run_id::text);
    RETURN NULL;
END;
$$;
