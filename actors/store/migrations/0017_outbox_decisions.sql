-- The outbox tells the world of a run's waits and of people's decisions, beside its end (docs/API.md, "The
-- outbox"): `run.waiting` is written with the append that makes a run wait (actors/store/runs.py), and
-- `decision.decided` by the triggers below, in the transaction of the decision itself, whoever writes it.
-- `seq` orders a run's events: the relay delivers each run's in this order, one after the other.
ALTER TABLE outbox ADD COLUMN seq bigserial;
CREATE INDEX outbox_undelivered_by_run ON outbox (run_id, seq) WHERE delivered_at IS NULL;

CREATE FUNCTION raydag_outbox_decided(
    p_run_id uuid, p_tenant_id text, p_decision jsonb, p_state text, p_by text, p_at timestamptz
) RETURNS void
LANGUAGE sql AS $$
    INSERT INTO outbox (event_id, run_id, topic, payload, created_at)
    SELECT id, p_run_id, 'decision.decided',
           jsonb_build_object('event_id', id::text, 'type', 'decision.decided', 'run_id', p_run_id::text,
                              'tenant_id', p_tenant_id, 'decision', p_decision, 'state', p_state,
                              'decided_by', p_by, 'decided_at', p_at),
           p_at
    FROM (SELECT gen_random_uuid() AS id) AS fresh;
$$;

-- An operation leaves `awaiting_approval` (approved, rejected, expired) or `unknown` (resolved, reconciled).
CREATE FUNCTION raydag_operation_decided() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    v_op record;
BEGIN
    SELECT run_id, tenant_id, tool, args_hash INTO v_op FROM operations WHERE operation_id = NEW.operation_id;
    PERFORM raydag_outbox_decided(
        v_op.run_id, v_op.tenant_id,
        jsonb_build_object('kind', 'operation', 'operation_id', NEW.operation_id::text, 'tool', v_op.tool,
                           'args_hash', v_op.args_hash, 'from', NEW.from_state),
        NEW.to_state, NEW.actor, NEW.at);
    RETURN NULL;
END;
$$;

CREATE TRIGGER operation_transitions_decided AFTER INSERT ON operation_transitions FOR EACH ROW
    WHEN (NEW.from_state IN ('awaiting_approval', 'unknown') AND NEW.to_state <> NEW.from_state)
    EXECUTE FUNCTION raydag_operation_decided();

CREATE FUNCTION raydag_review_decided() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM raydag_outbox_decided(
        NEW.run_id, NEW.tenant_id,
        jsonb_build_object('kind', 'review', 'round', NEW.round, 'plan_hash', NEW.plan_hash),
        NEW.state, NEW.decided_by, coalesce(NEW.decided_at, now()));
    RETURN NULL;
END;
$$;

CREATE TRIGGER plan_reviews_outbox AFTER UPDATE ON plan_reviews FOR EACH ROW
    WHEN (OLD.state = 'awaiting' AND NEW.state <> 'awaiting')
    EXECUTE FUNCTION raydag_review_decided();

CREATE FUNCTION raydag_question_decided() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM raydag_outbox_decided(
        NEW.run_id, NEW.tenant_id,
        jsonb_build_object('kind', 'question', 'number', NEW.number),
        NEW.state, NEW.answered_by, coalesce(NEW.answered_at, now()));
    RETURN NULL;
END;
$$;

CREATE TRIGGER questions_outbox AFTER UPDATE ON questions FOR EACH ROW
    WHEN (OLD.state = 'awaiting' AND NEW.state <> 'awaiting')
    EXECUTE FUNCTION raydag_question_decided();
