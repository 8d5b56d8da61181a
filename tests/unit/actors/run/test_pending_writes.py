"""Whether a round waits for people alone (``waits_for_people_alone``): writes waiting for a person, and agent
nodes whose child runs are parked, may park their round; anything else in flight keeps it going."""

from __future__ import annotations

from actors.run.pending_writes import waits_for_people_alone


def test_an_agent_node_whose_child_is_parked_waits_for_people_as_a_write_does() -> None:
    assert waits_for_people_alone({"research"}, on_people=set(), parked_children={"research"})
    assert waits_for_people_alone({"research", "send"}, on_people={"send"}, parked_children={"research"})


def test_an_agent_node_whose_child_runs_keeps_its_round_going() -> None:
    assert not waits_for_people_alone({"research"}, on_people=set(), parked_children=set())
    assert not waits_for_people_alone({"research", "send"}, on_people={"send"}, parked_children=set())


def test_a_read_in_flight_beside_parked_children_keeps_its_round_going() -> None:
    assert not waits_for_people_alone({"research", "case"}, on_people=set(), parked_children={"research"})


def test_writes_waiting_for_people_alone_still_park_their_round() -> None:
    assert waits_for_people_alone({"send"}, on_people={"send"}, parked_children=set())
    assert not waits_for_people_alone({"send", "case"}, on_people={"send"}, parked_children=set())
