"""A run's logic, free of Ray: the supervisor actor hosts it, tests drive it with fakes.

- ``submission``: ``RunRequest`` and the typed answers of submitting, cancelling and draining;
- ``service``: ``RunService``: the parts below composed: records the runs admitted (once per idempotency key),
  waits on, cancels and hands over the runs it owns;
- ``intake``: ``Intake``: whether a run may start, and as what (the operator's ``Rules``, the tools and planners
  offered, the toolsets' resource checks);
- ``continuation``: ``Continuations``: a stopped run continued as a new run carrying over what succeeded;
- ``turns``: ``Turns``: the runs this process owns, each driven by its own task once one of ``max_active_runs``
  turns is free;
- ``ownership``: ``Ownership``: runs taken over (orphans, parked runs woken by a decision) and given up (a lease
  lost);
- ``chores``: ``Chores``: the background jobs (adoption, leases, the outbox, the writes no run drives, people's
  decisions heard);
- ``driver``: ``RunDriver``: plan, execute, join, replan: each run from its recorded state to a terminal one;
- ``planning``: ``planning_context``: what a run's planner is shown of it (the tools it could use now, its
  observations as data), also built for an agent node's child before it exists, to weigh its first model call;
- ``round``: ``RoundExecution``: the loop of one plan round, each ready node dispatched the moment it is ready;
- ``children``: ``ChildRuns``: agent nodes' child runs, created once under the id their parent recorded, waited
  on, and cancelled when their parent stops;
- ``deps``: ``RunDeps``: what every run shares (executor, tools, planners, judges of failure), built once by
  the supervisor and handed to the service, the driver and each round as it is;
- ``context``: why a round ended early (``Interruption``), ``HandedOver``, ``Parked``;
- ``recorder``: ``RunRecorder``: every transition recorded before it is acted on;
- ``operate``: a write node driven through its operation's row (approval, one execution, reconciliation);
- ``pending_writes``: ``PendingWrites``: a round's writes that have not ended (which wait, on what), which the
  run's status, parking and expiry follow;
- ``reviewing``: ``ReviewGate``: a reviewed round dispatches nothing until a person approved its plan;
- ``asking``: ``QuestionGate``: a planner's question, the run waiting for a person's answer;
- ``waiting``: how a run watches a row a person decides (a review, a question) until it is decided;
- ``approvals``: a person's decision of any kind (a write, a plan, a planner's question) as the API and
  ``import raydag`` make it: ``Decisions`` admits the decider the same way for each kind, one refusal type;
- ``resource_check``: the toolsets' checks of who may run over which resource, asked at submission.

The decisions themselves (admission, dispatch, policy, budgets, gates) are ``dag``'s; these modules ask them,
record the answers and act on them.
"""
