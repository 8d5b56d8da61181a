-- Runs name a resource, a JSON object of string keys to string values ({"case_id": "C-102"},
-- {"root": "/srv/reports"}), instead of a case. Every run stored so far is a caseops run: its case was
-- its resource, so the migration carries case_id over as {"case_id": case_id}.
ALTER TABLE runs ADD COLUMN resource jsonb;
UPDATE runs SET resource = jsonb_build_object('case_id', case_id);
ALTER TABLE runs ALTER COLUMN resource SET NOT NULL;
ALTER TABLE runs ADD CONSTRAINT runs_resource_is_an_object CHECK (jsonb_typeof(resource) = 'object');

-- case_id stays, nullable, rather than being dropped: a run over another kind of resource has no case, but
-- the run views still answer case_id for the clients written before resources, and whoever reads the runs
-- table directly (reports, audit queries) keeps working for caseops runs. It is written from the resource
-- and must agree with it, so the two can never tell different stories; dropping it is a later migration's
-- call, once nothing reads it.
ALTER TABLE runs ALTER COLUMN case_id DROP NOT NULL;
ALTER TABLE runs ADD CONSTRAINT runs_case_id_is_the_resources
    CHECK (case_id IS NOT DISTINCT FROM resource->>'case_id');
