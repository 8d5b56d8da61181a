"""The run metrics as Ray's own (``ray.util.metrics``): what the supervisor records through, exported by each
node's metrics agent. Apart from ``metrics`` so that the run's logic, which reports through the
``RunMetrics`` interface, never imports Ray."""

from __future__ import annotations

from actors.observe.metrics import LATENCY_BOUNDARIES_MS, NO_STOP_REASON, CallOutcome
from dag.events import ErrorKind
from dag.states import NodeStatus, RunStatus, StopReason


class RayRunMetrics:
    """The facts as Ray counters and a histogram, exported by each node's metrics agent.

    Ray prefixes every name with ``ray_`` and Prometheus adds ``_total`` to counters:
    ``raydag_runs_finished`` is scraped as ``ray_raydag_runs_finished_total``. docs/METRICS.md lists them.
    """

    def __init__(self) -> None:
        from ray.util.metrics import Counter, Gauge, Histogram

        self._runs_started = Counter(
            "raydag_runs_started",
            description="Runs created (idempotent replays excluded).",
            tag_keys=("planner",),
        )
        self._runs_finished = Counter(
            "raydag_runs_finished",
            description="Runs that reached a terminal status, by status and stop reason.",
            tag_keys=("status", "stop_reason"),
        )
        self._runs_recovered = Counter(
            "raydag_runs_recovered", description="Runs taken over from a supervisor that stopped."
        )
        self._nodes_finished = Counter(
            "raydag_nodes_finished",
            description="Nodes that reached a terminal status (a for_each parent only if it never expanded).",
            tag_keys=("tool", "status"),
        )
        self._node_latency = Histogram(
            "raydag_node_latency_ms",
            description="Duration of each tool call of a node, one observation per attempt, in milliseconds.",
            boundaries=list(LATENCY_BOUNDARIES_MS),
            tag_keys=("tool", "outcome"),
        )
        self._retries = Counter(
            "raydag_node_retries",
            description="Retries scheduled after a failed tool call, by tool and error kind.",
            tag_keys=("tool", "error_kind"),
        )
        self._denied = Counter(
            "raydag_nodes_denied",
            description="Nodes the policy refused to dispatch, by tool and policy rule.",
            tag_keys=("tool", "rule_id"),
        )
        self._budget_stops = Counter(
            "raydag_budget_stops",
            description="Budget limits that cut a run short: its round ended early or the run stopped.",
            tag_keys=("budget",),
        )

        self._unknown = Gauge(
            "raydag_operations_unknown",
            description="Writes whose outcome nobody could confirm yet (a person may resolve them).",
        )
        self._unknown_age = Gauge(
            "raydag_operation_unknown_oldest_seconds",
            description="How long the oldest write whose outcome is unknown has been so (0: none is).",
        )

    def run_started(self, planner: str) -> None:
        self._runs_started.inc(tags={"planner": planner})

    def run_finished(self, status: RunStatus, stop_reason: StopReason | None) -> None:
        reason = stop_reason.value if stop_reason is not None else NO_STOP_REASON
        self._runs_finished.inc(tags={"status": status.value, "stop_reason": reason})

    def run_recovered(self) -> None:
        self._runs_recovered.inc()

    def node_finished(self, tool: str, status: NodeStatus) -> None:
        self._nodes_finished.inc(tags={"tool": tool, "status": status.value})

    def tool_call_finished(self, tool: str, outcome: CallOutcome, duration_ms: float) -> None:
        self._node_latency.observe(duration_ms, tags={"tool": tool, "outcome": outcome})

    def retry_scheduled(self, tool: str, error_kind: ErrorKind) -> None:
        self._retries.inc(tags={"tool": tool, "error_kind": error_kind.value})

    def node_denied(self, tool: str, rule_id: str) -> None:
        self._denied.inc(tags={"tool": tool, "rule_id": rule_id})

    def budget_stop(self, budget: str) -> None:
        self._budget_stops.inc(tags={"budget": budget})

    def unknown_operations(self, count: int, oldest_age_s: float) -> None:
        self._unknown.set(count)
        self._unknown_age.set(oldest_age_s)
