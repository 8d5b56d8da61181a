-- A child run's end wakes its parked parent as a decision wakes a parked run (0015): a parent whose every branch
-- waits on child runs parked on people (or on people) is parked itself (docs/AGENTS.md, "Parallel, durable").
-- Whoever records the child's end (any supervisor), the parent's row says it is due now, so that the next
-- orphan scan of any supervisor claims it even if the notification was missed; the notification wakes it at once.

-- What waking a parked run is, in one place: a decision's trigger and a child's end both call it.
CREATE FUNCTION raydag_wake_parked(p_run_id uuid) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    UPDATE runs SET parked_until = now()
    WHERE run_id = p_run_id AND parked_until IS NOT NULL AND parked_until > now();
    PERFORM pg_notify('raydag_decided', p_run_id::text);
END;
$$;

CREATE OR REPLACE FUNCTION raydag_notify_decided() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM raydag_wake_parked(NEW.run_id);
    RETURN NULL;
END;
$$;

CREATE FUNCTION raydag_wake_parent() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM raydag_wake_parked(NEW.parent_run_id);
    RETURN NULL;
END;
$$;

CREATE TRIGGER runs_child_ended
AFTER UPDATE OF finished_at ON runs
FOR EACH ROW
WHEN (OLD.finished_at IS NULL AND NEW.finished_at IS NOT NULL AND NEW.parent_run_id IS NOT NULL)
EXECUTE FUNCTION raydag_wake_parent();
