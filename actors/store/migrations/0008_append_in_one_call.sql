-- One round trip per transition. An append was an explicit transaction of five to seven statements (BEGIN,
-- the owner's row locked, the events, the summary, the ledger's opened and closed rows, COMMIT), each a round
-- trip the supervisor waited for before acting on the transition. This function makes the same writes, in the
-- same order, as one statement: atomic on its own, recorded before anything acts on it, as before.
--
-- Returns 'appended'; 'committed' when the run is already at the append's last event (an append whose
-- acknowledgement was lost, retried); 'owner:<owner>' or 'seq:<last_seq>' when the run is not this owner's
-- to append to, or not where the append expects it (the caller's LeaseLost); 'missing' for no such run.
--
-- Rows are JSON arrays of objects (p_events: the events' own JSON, stored unchanged in run_events.data).
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
    p_outbox        jsonb
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
    IF v_run.owner IS DISTINCT FROM p_owner THEN
        RETURN 'owner:' || coalesce(v_run.owner, '');
    END IF;
    IF v_run.last_seq = v_last_seq THEN
        RETURN 'committed';
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
        lease_expires_at = CASE WHEN p_finished_at IS NULL THEN now() + make_interval(secs => p_lease_s)
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

    -- A run's end: its audit event and its outbox event commit with the end itself, or not at all.
    IF p_audit IS NOT NULL THEN
        INSERT INTO audit_events (audit_id, run_id, tenant_id, subject, action, data, at)
        SELECT a.audit_id, p_run_id, a.tenant_id, a.subject, a.action, a.data, a.at
        FROM jsonb_to_record(p_audit) AS a(audit_id uuid, tenant_id text, subject text, action text, data jsonb,
                                           at timestamptz);
        INSERT INTO outbox (event_id, run_id, topic, payload, created_at)
        SELECT b.event_id, p_run_id, b.topic, b.payload, b.created_at
        FROM jsonb_to_record(p_outbox) AS b(event_id uuid, topic text, payload jsonb, created_at timestamptz);
    END IF;
    RETURN 'appended';
END
$$;
