-- What a tenant's runs and the decisions waiting across them are, a page at a time (GET /runs, GET /decisions,
-- actors/store/listing.py). Runs are listed newest first after a keyset cursor (created_at, run_id): the index
-- walks a tenant's runs in that order from the cursor on, whatever the filters. The pending rows of each kind
-- are few among many decided ones: a partial index by tenant finds them without reading the others.
CREATE INDEX runs_by_tenant_newest ON runs (tenant_id, created_at DESC, run_id DESC);
CREATE INDEX operations_pending ON operations (tenant_id, expires_at)
    WHERE state IN ('awaiting_approval', 'unknown');
CREATE INDEX plan_reviews_awaiting ON plan_reviews (tenant_id, expires_at) WHERE state = 'awaiting';
CREATE INDEX questions_awaiting ON questions (tenant_id, expires_at) WHERE state = 'awaiting';
