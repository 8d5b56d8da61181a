"""Everything raydag keeps in PostgreSQL, and how it reaches it (asyncpg).

- ``database``: where the database is (``RAYDAG_DATABASE_URL``, or an embedded server), pools and databases;
- ``migrate``, ``setup`` and ``migrations/``: the runtime's tables, versioned, then a hosted toolset's;
- ``runs``: ``RunStore``: runs created once per idempotency key, their events appended under the run's lease,
  and the reads the API serves;
- ``listing``: ``Listing``: a tenant's runs, newest first, and the decisions waiting for people across them,
  soonest deadline first, a page at a time after a keyset cursor;
- ``ownership``: ``Leases``: one owner per live run, renewed, taken over when it lapses;
- ``operations``: the operation ledger: one row per business intent, shared by the runs that propose it (a
  write's one execution right, docs/EFFECTS.md); its rows as values, and the statement that moves one, in
  ``_operation_rows``;
- ``reviews``: plan reviews' rows (a person's yes to a plan's hash, docs/PEOPLE.md);
- ``questions``: a planner's questions and a person's answers (docs/PEOPLE.md);
- ``decisions``: ``DecisionWakeups``: a supervisor's one listening connection, which wakes a run waiting on a
  person when a decision about it is written (migration 0014's trigger notifies);
- ``outbox``: terminal events delivered at least once; ``retention``: old events removed;
- ``resilience``: idempotent statements retried across a dropped connection or a database restart.
"""
