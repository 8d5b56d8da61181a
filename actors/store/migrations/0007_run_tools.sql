-- The tools a run was offered when it was created. A supervisor adopts an orphaned run only if it serves
-- every one of them: supervisors with different toolsets may share one database, and a run resumed by one
-- that lacks its tools would fail nodes that another supervisor could have run. NULL for runs stored before
-- this column: those were all caseops runs, which every supervisor of that time served.
ALTER TABLE runs ADD COLUMN tools text[];
