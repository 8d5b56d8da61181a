-- One intent, one effect, across runs (docs/EFFECTS.md): an operation is the business intent, keyed by the
-- tenant, the tool and the hash of the arguments that name it (`intent_hash`: all of them unless the tool's
-- overlay narrows it), not by the run. A run proposing an intent whose latest operation is still joinable
-- (not settled, or succeeded within the intent's window) joins it; otherwise it proposes the next
-- `generation`. The unique index is PostgreSQL's word that two proposals at once converge on one row; the
-- proposer also takes a transaction-scoped advisory lock on the intent, so the second one finds the first's
-- row and joins it instead of failing on the index.
ALTER TABLE operations ADD COLUMN intent_hash text, ADD COLUMN generation integer;

-- Rows written before intents: each was its run's own, keyed by its arguments. Several runs may hold the
-- same intent: they become its generations, oldest first.
UPDATE operations AS o SET intent_hash = o.args_hash, generation = numbered.generation
FROM (SELECT operation_id,
             row_number() OVER (PARTITION BY tenant_id, tool, args_hash ORDER BY created_at, operation_id)
                 AS generation
      FROM operations) AS numbered
WHERE o.operation_id = numbered.operation_id;

ALTER TABLE operations ALTER COLUMN intent_hash SET NOT NULL, ALTER COLUMN generation SET NOT NULL;
CREATE UNIQUE INDEX operations_intent ON operations (tenant_id, tool, intent_hash, generation);

-- Which runs share an operation: the run that proposed it first, and every run that joined it (a row each,
-- once per run: a run's later nodes and recoveries proposing it again find their row). `subject` is the
-- run's principal: none of them may decide the operation unless their tenant's policy says so. `left_at`:
-- when the run, stopping, let go of the operation before it executed; the last run to let go expires it.
CREATE TABLE operation_runs (
    operation_id  uuid NOT NULL REFERENCES operations (operation_id),
    run_id        uuid NOT NULL REFERENCES runs (run_id),
    node_id       text NOT NULL,
    subject       text NOT NULL,
    joined_at     timestamptz NOT NULL DEFAULT now(),
    left_at       timestamptz,
    PRIMARY KEY (operation_id, run_id)
);
CREATE INDEX operation_runs_by_run ON operation_runs (run_id);

INSERT INTO operation_runs (operation_id, run_id, node_id, subject, joined_at)
SELECT operation_id, run_id, node_id, subject, created_at FROM operations;

-- A decision on an operation wakes every run that shares it, parked or not: each one's row says it is due,
-- and each one's id is notified (plan reviews and questions keep the function of 0015: they have one run).
CREATE FUNCTION raydag_notify_operation_decided() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    v_run uuid;
BEGIN
    FOR v_run IN SELECT run_id FROM operation_runs WHERE operation_id = NEW.operation_id
                 UNION SELECT NEW.run_id
    LOOP
        UPDATE runs SET parked_until = now()
        WHERE run_id = v_run AND parked_until IS NOT NULL AND parked_until > now();
        PERFORM pg_notify('raydag_decided', v_run::text);
    END LOOP;
    RETURN NULL;
END;
$$;

DROP TRIGGER operations_decided ON operations;
CREATE TRIGGER operations_decided AFTER UPDATE ON operations FOR EACH ROW
    WHEN (OLD.state IN ('awaiting_approval', 'unknown') AND NEW.state <> OLD.state)
    EXECUTE FUNCTION raydag_notify_operation_decided();
