"""The live catalogue: a server's tools are offered once it answers, withdrawn while it cannot be listed, and
withdrawn for good when it lists a definition other than the pinned one. Driven by a scripted lister."""

from __future__ import annotations

import asyncio
import dataclasses

import pytest

from actors.calls.live_catalogue import DEFINITION_CHANGED_RULE, SERVER_UNREACHABLE_RULE, LiveCatalogue
from actors.calls.mcp.discovery import ServerUnreachable
from actors.toolsets.config import HttpServer, StdioServer
from actors.toolsets.listing import ServerListing
from dag.states import StopReason
from tests.unit.actors.toolsets.test_catalogue import READ, toolsets


class ScriptedLister:
    """Answers each listing with the next scripted listing or error; raises when the script is used up."""

    def __init__(self, *answers: ServerListing | ServerUnreachable) -> None:
        self._answers = list(answers)

    async def __call__(self, spec: HttpServer | StdioServer) -> ServerListing:
        if not self._answers:
            raise AssertionError(f"an unexpected listing of {spec.name}")
        answer = self._answers.pop(0)
        if isinstance(answer, ServerUnreachable):
            raise answer
        return answer

    @property
    def used_up(self) -> bool:
        return not self._answers


LISTED = ServerListing("files", "2025-11-25", (READ,))
CHANGED = ServerListing("files", "2025-11-25", (dataclasses.replace(READ, description="Read, and keep"),))
DOWN = ServerUnreachable("files", "no answer within 10s")


async def test_an_unreachable_server_withdraws_its_tools_until_it_answers() -> None:
    lister = ScriptedLister(DOWN, LISTED)
    live = LiveCatalogue(toolsets(), lister=lister)

    await live.refresh()
    down = (dict(live.contracts), dict(live.withdrawn), live.status())
    await live.refresh()

    assert down[0] == {}
    assert down[1]["read_text_file"].rule_id == SERVER_UNREACHABLE_RULE
    assert down[1]["read_text_file"].stop_reason is StopReason.TOOL_SERVER_UNREACHABLE
    assert down[2] == {
        "ready": False,
        "servers": {"files": {"ok": False, "error": "unreachable: no answer within 10s"}},
    }
    assert list(live.contracts) == ["read_text_file"]
    assert live.withdrawn == {}
    assert live.status() == {"ready": True, "servers": {"files": {"ok": True, "protocol": "2025-11-25"}}}
    assert lister.used_up


async def test_a_changed_definition_withdraws_the_tool_for_good_and_keeps_the_pinned_contract() -> None:
    lister = ScriptedLister(LISTED, CHANGED, LISTED)
    live = LiveCatalogue(toolsets(), lister=lister)
    await live.refresh()
    pinned = live.contracts["read_text_file"]

    await live.refresh()
    await live.refresh()  # listed as it was again: still not trusted

    assert live.contracts["read_text_file"] is pinned
    assert live.withdrawn["read_text_file"].rule_id == DEFINITION_CHANGED_RULE
    assert live.withdrawn["read_text_file"].stop_reason is StopReason.TOOL_DEFINITION_CHANGED
    assert live.status()["ready"] is True  # the other tools serve on
    assert lister.used_up


async def test_a_server_that_goes_away_after_it_was_listed_keeps_its_tools_offered() -> None:
    lister = ScriptedLister(LISTED, DOWN)
    live = LiveCatalogue(toolsets(), lister=lister)

    await live.refresh()
    await live.refresh()

    assert list(live.contracts) == ["read_text_file"]
    assert live.withdrawn == {}  # a call to it fails and is retried like any call to a server that went away
    assert lister.used_up


@pytest.mark.parametrize("first", [LISTED, DOWN])
async def test_the_first_attempt_is_set_once_every_server_was_tried(first: ServerListing) -> None:
    live = LiveCatalogue(toolsets(), lister=ScriptedLister(first))
    assert not live.first_attempt.is_set()

    await live.refresh()

    assert live.first_attempt.is_set()


class GatedLister(ScriptedLister):
    """A scripted lister whose listings wait for ``gate``, counting how many were asked for."""

    def __init__(self, *answers: ServerListing | ServerUnreachable) -> None:
        super().__init__(*answers)
        self.gate = asyncio.Event()
        self.asked = 0

    async def __call__(self, spec: HttpServer | StdioServer) -> ServerListing:
        self.asked += 1
        await self.gate.wait()
        return await super().__call__(spec)


async def test_a_server_not_listed_yet_is_tried_again_on_demand_once_for_all_who_ask() -> None:
    lister = GatedLister(DOWN, LISTED)
    live = LiveCatalogue(toolsets(), lister=lister)
    lister.gate.set()
    await live.refresh()
    lister.gate.clear()

    waiting = [asyncio.ensure_future(live.retry_unlisted()) for _ in range(3)]
    await asyncio.sleep(0)
    lister.gate.set()
    await asyncio.gather(*waiting)

    assert lister.asked == 2  # the first attempt, then one retry shared by the three who asked
    assert list(live.contracts) == ["read_text_file"]
    assert live.withdrawn == {}
    assert lister.used_up


async def test_a_caller_that_stops_waiting_leaves_the_retry_running() -> None:
    lister = GatedLister(DOWN, LISTED)
    live = LiveCatalogue(toolsets(), lister=lister)
    lister.gate.set()
    await live.refresh()
    lister.gate.clear()

    with pytest.raises(TimeoutError):
        await asyncio.wait_for(live.retry_unlisted(), 0.01)
    lister.gate.set()
    await live.retry_unlisted()  # joins the attempt still in flight

    assert lister.asked == 2
    assert list(live.contracts) == ["read_text_file"]


async def test_a_caller_waits_for_a_retry_only_while_it_is_young() -> None:
    now = [0.0]
    lister = GatedLister(DOWN, LISTED)
    live = LiveCatalogue(toolsets(), lister=lister, clock=lambda: now[0])
    lister.gate.set()
    await live.refresh()
    lister.gate.clear()

    first = asyncio.ensure_future(live.retry_unlisted(within_s=1.0))
    await asyncio.sleep(0)
    assert not first.done()  # the attempt is young: its caller waits for it
    now[0] = 5.0  # it has hung for five seconds (a server whose node is gone)
    # A later caller does not wait (the guard only turns a hang into a failure), nor start a second attempt.
    await asyncio.wait_for(live.retry_unlisted(within_s=1.0), 10)

    lister.gate.set()
    await first

    assert lister.asked == 2  # the first listing, then the one retry
    assert list(live.contracts) == ["read_text_file"]  # the attempt itself ran on, and listed the server
