-- Large values are compressed with lz4 instead of PostgreSQL's default pglz, where the server was built with lz4
-- (PostgreSQL 14 and later, as most distributions build it): a tool's output in its event, a run's result, and
-- the outbox's copy of that result. A 10 MiB output is compressed (or found incompressible) inside the append
-- that records it, which its dependents wait for; pglz took ~150 ms of that append, lz4 a few milliseconds
-- (docs/BENCHMARKS.md, "Large outputs"). Values already stored keep their compression: nothing is rewritten.
-- A server built without lz4 (the embedded PostgreSQL wheel) keeps pglz.
DO $$
BEGIN
    IF 'lz4' = ANY ((SELECT enumvals FROM pg_settings WHERE name = 'default_toast_compression')::text[]) THEN
        ALTER TABLE run_events ALTER COLUMN data SET COMPRESSION lz4;
        ALTER TABLE runs ALTER COLUMN result SET COMPRESSION lz4;
        ALTER TABLE outbox ALTER COLUMN payload SET COMPRESSION lz4;
    END IF;
END
$$;
