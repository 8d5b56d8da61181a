-- caseops' tasks may ask for input (the 2026-07-28 Tasks extension): a task whose work needs a person's word
-- turns input_required, its outstanding requests in input_requests (key -> a server-to-client request, as
-- tasks/get shows them); tasks/update writes the client's answer under its key in input_responses and turns
-- the task working again, in one update, and the work reads its answer from there. Keys are never reused
-- within a task.
ALTER TABLE caseops_tasks
    ADD COLUMN input_requests  jsonb,
    ADD COLUMN input_responses jsonb NOT NULL DEFAULT '{}'::jsonb;
