"""Admission: the planner a request gets, whether it may become a run, and whether a plan may become a round."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
from dag_run_builders import AT, CASE_ID, CASE_OUTPUT, CASE_TOOL, DOCUMENTS_TOOL, READ_FILE, ran, run_created

from dag.admission import (
    PLAN_GIVEN_PLANNER,
    ModelNotAllowed,
    NoPlanner,
    Offer,
    OverBudget,
    OverLimits,
    PlannerLacksTools,
    PlannerUnavailable,
    PlanRefused,
    ResourceUnfit,
    RoundAdmitted,
    RunAdmitted,
    ToolUnlisted,
    UnknownPlanner,
    admit_round,
    admit_run,
    choose_planner,
    refuse_before_listing,
    round_validator,
)
from dag.budget import NODES_CAP, BudgetRequest, Budgets
from dag.contracts import catalogue_of
from dag.errors import PlanErrorCode, PlanInvalid
from dag.events import JoinStarted, PlanAccepted, PlanningStarted
from dag.plan import PlanNode
from dag.run_state import RunState, fold
from dag.states import StopReason
from mcp_server.contracts import CASEOPS_CHECKS

CASE_ARGS = {"case_id": CASE_ID}
CASEOPS_PLANNER_TOOLS = frozenset(CASEOPS_CHECKS)
"""What caseops' ``conformance`` planner needs: the four caseops tools."""
PLANNERS = {"outputs": frozenset(), "conformance": CASEOPS_PLANNER_TOOLS}
BOTH = {**CASEOPS_CHECKS, **catalogue_of(READ_FILE)}
ECHO_PLAN = {"nodes": [{"id": "read", "tool": "read_file", "args": {"path": "/srv/a.txt"}}]}
CASE_PLAN = {"nodes": [{"id": "case", "tool": CASE_TOOL, "args": CASE_ARGS}]}
ECHO = dataclasses.replace(READ_FILE, name="echo", run_bound=frozenset(), resource_keys=())
"""A tool that binds nothing to the run's resource."""
ECHO_UNBOUND_PLAN = {"nodes": [{"id": "hi", "tool": "echo", "args": {"path": "anything"}}]}


def offer(**changes: Any) -> Offer:
    fields: dict[str, Any] = {
        "catalogue": CASEOPS_CHECKS,
        "limits": Budgets(),
        "planners": PLANNERS,
        "toolset_planner": "conformance",
    }
    return Offer(**{**fields, **changes})


def admit(
    *,
    planner: str | None = None,
    plan: dict[str, Any] | None = None,
    resource: dict[str, str] | None = None,
    budgets: BudgetRequest | None = None,
    model: str | None = None,
    **offered: Any,
) -> Any:
    return admit_run(
        planner=planner,
        plan=plan,
        resource=resource if resource is not None else {"case_id": CASE_ID},
        budgets=budgets,
        offer=offer(**offered),
        model=model,
    )


# ---------------------------------------------------------------- choosing the planner


@pytest.mark.parametrize(
    ("named", "planned", "toolset_planner", "chosen"),
    [
        ("openai", True, "conformance", "openai"),  # named: always that one
        ("openai", False, None, "openai"),
        (None, True, "conformance", PLAN_GIVEN_PLANNER),  # a plan given: outputs judges it
        (None, True, None, PLAN_GIVEN_PLANNER),
        (None, False, "conformance", "conformance"),  # neither: the toolsets' own
        (None, False, None, None),  # nothing applies
    ],
    ids=["named-with-plan", "named-alone", "plan-caseops", "plan-third-party", "toolsets-own", "none"],
)
def test_the_planner_is_the_one_named_else_outputs_for_a_plan_else_the_toolsets_own(
    named: str | None, planned: bool, toolset_planner: str | None, chosen: str | None
) -> None:
    assert choose_planner(named, planned=planned, toolset_planner=toolset_planner) == chosen


def test_the_plan_given_planner_is_the_outputs_planner() -> None:
    from planner.outputs import OutputsPlanner

    assert OutputsPlanner.name == PLAN_GIVEN_PLANNER == "outputs"


# ---------------------------------------------------------------- a request


def test_a_caseops_request_naming_nothing_gets_the_toolsets_planner_and_its_budgets() -> None:
    admitted = admit(budgets=BudgetRequest(max_nodes=10))

    assert isinstance(admitted, RunAdmitted)
    assert admitted.planner == "conformance"
    assert admitted.budgets == Budgets(max_nodes=10)
    assert admitted.plan is None
    assert admitted.tools == frozenset(CASEOPS_CHECKS)
    assert admitted.checked_by == tuple(CASEOPS_CHECKS)  # the tools a planner would be shown


def test_a_plan_over_a_third_party_tool_naming_no_planner_is_judged_by_outputs() -> None:
    admitted = admit(plan=ECHO_PLAN, resource={"root": "/srv"}, catalogue=BOTH, toolset_planner=None)

    assert isinstance(admitted, RunAdmitted)
    assert admitted.planner == "outputs"
    assert admitted.plan is not None
    assert [node.id for node in admitted.plan.nodes] == ["read"]
    assert admitted.checked_by == ("read_file",)  # the plan's tools: their checks decide


def test_no_planner_named_no_plan_and_none_of_the_toolsets_is_refused_listing_those_known() -> None:
    assert admit(toolset_planner=None) == NoPlanner(known=("conformance", "outputs"))


def test_a_planner_this_server_lacks_is_unknown() -> None:
    assert admit(planner="gpt") == UnknownPlanner("gpt", known=("conformance", "outputs"))


def test_a_planner_known_but_not_offered_here_is_unavailable_with_the_reason() -> None:
    refused = admit(planner="openai", unavailable_planners={"openai": "no OPENAI_API_KEY"})

    assert refused == PlannerUnavailable("openai", "no OPENAI_API_KEY")


MODEL_PLANNERS = {**PLANNERS, "openai": frozenset()}


def test_a_run_may_name_its_model_planners_default_or_a_model_its_tenant_lists() -> None:
    for model in ("gpt-test", "gpt-small"):
        admitted = admit(
            planner="openai",
            model=model,
            planners=MODEL_PLANNERS,
            planner_models={"openai": "gpt-test"},
            models=frozenset({"gpt-small"}),
        )
        assert isinstance(admitted, RunAdmitted), model


def test_a_model_the_tenant_does_not_list_is_refused_naming_those_it_may_use() -> None:
    refused = admit(
        planner="openai", model="gpt-big", planners=MODEL_PLANNERS, planner_models={"openai": "gpt-test"}
    )

    assert refused == ModelNotAllowed("gpt-big", "openai", ("gpt-test",))


def test_a_model_named_for_a_planner_without_one_is_refused() -> None:
    refused = admit(planner="conformance", model="gpt-test", planner_models={"openai": "gpt-test"})

    assert refused == ModelNotAllowed("gpt-test", "conformance", ())


def test_budgets_above_the_servers_limits_are_refused_naming_them() -> None:
    refused = admit(budgets=BudgetRequest(max_nodes=65), limits=Budgets(max_nodes=64))

    assert isinstance(refused, OverLimits)
    assert refused.error.above == {"max_nodes": (65, 64)}


def test_an_invalid_plan_is_refused_with_its_plan_error() -> None:
    plan = {"nodes": [{"id": "a", "tool": CASE_TOOL, "args": {"case_id": {"$ref": "b"}}}]}

    refused = admit(plan=plan)

    assert isinstance(refused, PlanRefused)
    assert refused.error.code is PlanErrorCode.UNKNOWN_REFERENCE


def test_a_plan_larger_than_the_requested_max_nodes_is_too_many_nodes() -> None:
    plan = {"nodes": [{"id": f"n{i}", "tool": CASE_TOOL, "args": CASE_ARGS} for i in range(3)]}

    refused = admit(plan=plan, budgets=BudgetRequest(max_nodes=2))

    assert isinstance(refused, PlanRefused)
    assert refused.error.code is PlanErrorCode.TOO_MANY_NODES


def test_a_resource_key_no_tool_uses_is_a_mismatch() -> None:
    refused = admit(resource={"case_id": CASE_ID, "repo": "x"})

    assert isinstance(refused, ResourceUnfit)
    assert refused.mismatch.unused == ("repo",)


def test_a_plan_whose_tool_needs_a_key_the_resource_lacks_is_a_mismatch_naming_it() -> None:
    refused = admit(plan=CASE_PLAN, resource={"root": "/srv"}, catalogue=BOTH)

    assert isinstance(refused, ResourceUnfit)
    assert dict(refused.mismatch.missing) == {"case_id": (CASE_TOOL,)}


def test_a_planner_that_needs_tools_the_run_cannot_use_is_refused_naming_them() -> None:
    refused = admit(planner="conformance", resource={"root": "/srv"}, catalogue=BOTH)

    assert refused == PlannerLacksTools("conformance", tuple(sorted(CASEOPS_PLANNER_TOOLS)), ("case_id",))


def test_a_run_naming_no_resource_is_refused_naming_the_keys_its_planners_tools_bind() -> None:
    refused = admit(resource={})

    assert refused == PlannerLacksTools("conformance", tuple(sorted(CASEOPS_PLANNER_TOOLS)), ("case_id",))


def test_a_plan_whose_tools_bind_nothing_is_admitted_without_a_resource() -> None:
    admitted = admit(plan=ECHO_UNBOUND_PLAN, resource={}, catalogue=catalogue_of(ECHO))

    assert isinstance(admitted, RunAdmitted)
    assert admitted.planner == PLAN_GIVEN_PLANNER


def test_a_tenant_without_a_tool_the_planner_needs_is_refused_naming_only_that_tool() -> None:
    granted = frozenset(CASEOPS_CHECKS) - {DOCUMENTS_TOOL}

    assert admit(granted=granted) == PlannerLacksTools("conformance", (DOCUMENTS_TOOL,))


def test_a_planner_needing_tools_of_an_unlisted_server_is_admitted_to_stop_with_the_withdrawal() -> None:
    """The caseops server is down: the run is created (and stops TOOL_SERVER_UNREACHABLE), not refused."""
    unlisted = {name: frozenset({"case_id"}) for name in CASEOPS_CHECKS}

    admitted = admit(catalogue={}, unlisted=unlisted, withdrawn=frozenset(CASEOPS_CHECKS))

    assert isinstance(admitted, RunAdmitted)
    assert admitted.tools == frozenset()
    assert admitted.checked_by == tuple(CASEOPS_CHECKS)  # its resource check still decides


def test_a_plan_naming_a_tool_of_an_unlisted_server_is_created_without_validation() -> None:
    plan = {"nodes": [{"id": "echo", "tool": "echo", "args": {"text": "hi"}, "extra": "not checked"}]}

    admitted = admit(plan=plan, resource={}, unlisted={"echo": frozenset()}, withdrawn=frozenset({"echo"}))

    assert isinstance(admitted, RunAdmitted)
    assert (admitted.planner, admitted.plan) == ("outputs", None)


def test_a_resource_key_only_an_unlisted_tool_binds_is_not_a_mismatch() -> None:
    admitted = admit(
        resource={"case_id": CASE_ID, "root": "/srv"},
        unlisted={"read_file": frozenset({"root"})},
        withdrawn=frozenset({"read_file"}),
    )

    assert isinstance(admitted, RunAdmitted)
    assert admitted.checked_by == (*CASEOPS_CHECKS, "read_file")


# ---------------------------------------------------------------- a plan before any server is listed


@pytest.mark.parametrize(
    "plan",
    [
        pytest.param({"nodes": [{"id": "a", "tool": "nope", "args": {}}]}, id="a-tool-no-toolset-declares"),
        pytest.param(
            {"nodes": [{"id": "a", "tool": CASE_TOOL, "args": {"case_id": {"$ref": "b"}}}]}, id="ref"
        ),
        pytest.param({"nodes": [CASE_PLAN["nodes"][0], CASE_PLAN["nodes"][0]]}, id="an-id-twice"),
        pytest.param({"nodes": [{"id": "a", "tool": CASE_TOOL}], "extra": 1}, id="not-the-plan-format"),
        pytest.param({"nodes": [{**CASE_PLAN["nodes"][0], "id": f"n{i}"} for i in range(65)]}, id="too-many"),
        pytest.param({"nodes": [{"id": "a", "tool": CASE_TOOL, "args": {"tenant_id": "t"}}]}, id="identity"),
    ],
)
def test_a_plan_certainly_wrong_is_refused_before_listing_as_admission_refuses_it(
    plan: dict[str, Any],
) -> None:
    """Only the names of the declared tools are known before their servers are listed: enough for these."""
    early = refuse_before_listing(plan, frozenset(CASEOPS_CHECKS), max_nodes=Budgets().max_nodes)
    admitted = admit(plan=plan)

    assert isinstance(early, PlanRefused)
    assert isinstance(admitted, PlanRefused)
    assert early.error.as_dict() == admitted.error.as_dict()


def test_arguments_only_a_listed_schema_can_judge_are_left_to_admission() -> None:
    plan = {"nodes": [{"id": "case", "tool": CASE_TOOL, "args": {"case_id": 102}}]}

    assert refuse_before_listing(plan, frozenset(CASEOPS_CHECKS), max_nodes=64) is None
    refused = admit(plan=plan)
    assert isinstance(refused, PlanRefused)
    assert refused.error.code is PlanErrorCode.INVALID_ARGUMENTS


# ---------------------------------------------------------------- a plan for a round


def first_round(max_nodes: int = 64) -> RunState:
    """A run planning its first round."""
    return fold([run_created(budgets=Budgets(max_nodes=max_nodes)), PlanningStarted(at=AT, round=1)])


def second_round(max_nodes: int = 64) -> RunState:
    """A run planning its second round, after a first that ran one snapshot node."""
    return fold(
        [
            run_created(budgets=Budgets(max_nodes=max_nodes)),
            PlanningStarted(at=AT, round=1),
            PlanAccepted(at=AT, round=1, plan=CASE_PLAN),
            *ran("case", CASE_TOOL, CASE_ARGS, CASE_OUTPUT),
            JoinStarted(at=AT, round=1),
            PlanningStarted(at=AT, round=2),
        ]
    )


def nodes(count: int, prefix: str = "n") -> dict[str, Any]:
    return {"nodes": [{"id": f"{prefix}{i}", "tool": CASE_TOOL, "args": CASE_ARGS} for i in range(count)]}


def test_a_first_round_plan_is_admitted_as_validated() -> None:
    admitted = admit_round(nodes(2), first_round(64), CASEOPS_CHECKS, frozenset())

    assert isinstance(admitted, RoundAdmitted)
    assert [node.id for node in admitted.plan.nodes] == ["n0", "n1"]


def test_a_first_round_plan_over_max_nodes_is_refused_as_too_many_nodes() -> None:
    refused = admit_round(nodes(3), first_round(2), CASEOPS_CHECKS, frozenset())

    assert isinstance(refused, PlanRefused)
    assert refused.error.code is PlanErrorCode.TOO_MANY_NODES


def test_a_replan_over_max_nodes_stops_the_run_on_the_node_budget_not_as_an_invalid_plan() -> None:
    state = second_round(max_nodes=3)  # one node so far: room for two more

    over = admit_round(nodes(3, "r"), state, CASEOPS_CHECKS, frozenset())

    assert isinstance(over, OverBudget)
    assert over.stop_reason is StopReason.NODE_BUDGET_EXHAUSTED
    assert over.detail == "replan 2: budget max_nodes exhausted: 4 > 3"
    assert isinstance(admit_round(nodes(2, "r"), state, CASEOPS_CHECKS, frozenset()), RoundAdmitted)


def test_a_replan_is_bounded_by_the_nodes_cap_before_the_budget_weighs_it() -> None:
    refused = admit_round(nodes(NODES_CAP + 1, "r"), second_round(), CASEOPS_CHECKS, frozenset())

    assert isinstance(refused, PlanRefused)
    assert refused.error.code is PlanErrorCode.TOO_MANY_NODES
    assert str(NODES_CAP) in refused.error.message


def test_the_nodes_cap_is_the_ceiling_of_max_nodes() -> None:
    assert Budgets.model_fields["max_nodes"].metadata[-1].le == NODES_CAP
    Budgets(max_nodes=NODES_CAP)
    with pytest.raises(ValueError, match="less than or equal"):
        Budgets(max_nodes=NODES_CAP + 1)


def test_a_plan_naming_an_unlisted_tool_stops_the_run_with_its_withdrawal() -> None:
    plan = {"nodes": [*nodes(1)["nodes"], {"id": "echo", "tool": "echo", "args": {"text": "hi"}}]}

    assert admit_round(plan, first_round(64), CASEOPS_CHECKS, frozenset({"echo"})) == ToolUnlisted("echo")


def test_a_malformed_plan_is_refused_before_its_tools_are_looked_at() -> None:
    refused = admit_round({"nodes": "echo"}, first_round(64), CASEOPS_CHECKS, frozenset({"echo"}))

    assert isinstance(refused, PlanRefused)
    assert refused.error.code is PlanErrorCode.MALFORMED_PLAN


def test_a_streamed_plan_is_validated_node_by_node_within_the_nodes_the_run_may_still_gain() -> None:
    validator = round_validator(second_round(max_nodes=3), CASEOPS_CHECKS)  # one node so far
    node = PlanNode.model_validate

    validator.add(node({"id": "a", "tool": CASE_TOOL, "args": CASE_ARGS}))
    validator.add(
        node({"id": "b", "tool": CASE_TOOL, "args": {"case_id": {"$ref": "r1.case", "pointer": "/case_id"}}})
    )
    with pytest.raises(PlanInvalid) as third:
        validator.add(node({"id": "c", "tool": CASE_TOOL, "args": CASE_ARGS}))

    assert third.value.code is PlanErrorCode.TOO_MANY_NODES
    assert third.value.location == "/nodes/2"


def loop_agent(node_id: str, model: str | None = None) -> dict[str, Any]:
    body: dict[str, Any] = {"goal": "read the case", "loop": {"max_steps": 2}, "tools": [CASE_TOOL]}
    if model is not None:
        body["model"] = model
    return {"id": node_id, "agent": body}


def admit_agents(plan: dict[str, Any], **offered: Any) -> Any:
    fields: dict[str, Any] = {
        "planners": MODEL_PLANNERS,
        "planner_models": {"openai": "gpt-test"},
        "models": frozenset({"gpt-small"}),
        "loop_planner": "openai",
        "agent_levels": 3,
    }
    return admit(plan=plan, **{**fields, **offered})


def test_an_agent_node_may_name_its_loops_default_model_or_one_its_tenant_lists() -> None:
    plan = {"nodes": [loop_agent("a", "gpt-test"), loop_agent("b", "gpt-small"), loop_agent("c")]}

    assert isinstance(admit_agents(plan), RunAdmitted)


def test_an_agent_node_naming_a_model_outside_its_tenants_policy_is_refused_with_the_run_where_it_is() -> (
    None
):
    inner = {"nodes": [loop_agent("deep", "gpt-big")]}
    plan = {
        "nodes": [
            loop_agent("fine", "gpt-small"),
            {"id": "outer", "agent": {"goal": "delegate", "plan": inner, "tools": [CASE_TOOL]}},
        ]
    }

    refused = admit_agents(plan)

    assert refused == ModelNotAllowed(
        "gpt-big", "openai", ("gpt-small", "gpt-test"), at="/nodes/1/agent/plan/nodes/0/agent/model"
    )


def test_an_agent_models_planner_not_offered_here_is_left_to_its_childs_admission() -> None:
    plan = {"nodes": [loop_agent("a", "gpt-big")]}

    assert isinstance(admit_agents(plan, loop_planner=None), RunAdmitted)
    named = {"nodes": [{"id": "a", "agent": {"goal": "g", "planner": "elsewhere", "model": "gpt-big"}}]}
    assert isinstance(admit_agents(named), RunAdmitted)
