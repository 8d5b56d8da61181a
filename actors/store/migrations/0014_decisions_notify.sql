-- A person's decision wakes the run waiting on it (docs/PEOPLE.md): a plan review or a question leaving
-- `awaiting`, an operation leaving `awaiting_approval` or `unknown`, notifies channel `raydag_decided` with the
-- run's id, on commit. Each supervisor listens on one connection of its own (actors/store/decisions.py); a
-- waiting run reads its row when woken, and otherwise only now and then. A trigger, so that every writer (the
-- API, the CLI, a script on the same database) wakes the run alike.
CREATE FUNCTION raydag_notify_decided() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('raydag_decided', NEW.run_id::text);
    RETURN NULL;
END;
$$;

CREATE TRIGGER plan_reviews_decided AFTER UPDATE ON plan_reviews FOR EACH ROW
    WHEN (OLD.state = 'awaiting' AND NEW.state <> 'awaiting')
    EXECUTE FUNCTION raydag_notify_decided();

CREATE TRIGGER questions_decided AFTER UPDATE ON questions FOR EACH ROW
    WHEN (OLD.state = 'awaiting' AND NEW.state <> 'awaiting')
    EXECUTE FUNCTION raydag_notify_decided();

CREATE TRIGGER operations_decided AFTER UPDATE ON operations FOR EACH ROW
    WHEN (OLD.state IN ('awaiting_approval', 'unknown') AND NEW.state <> OLD.state)
    EXECUTE FUNCTION raydag_notify_decided();
