"""The record of a raydag serving a home: written whole, read defensively, removed by its own writer only."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from actors.launch.serving import (
    DEFAULT_HOME,
    SERVING_FILE,
    Serving,
    home_in,
    key_for,
    recorded,
    recorded_in,
    serving_here,
    serving_url,
)
from tests.loopback import free_port

KEYS = {"tenant-demo": "dev-key-tenant-demo"}


def test_a_record_is_readable_by_its_owner_alone_and_gone_with_its_block(tmp_path: Path) -> None:
    serving = Serving(
        url=serving_url("127.0.0.1", free_port()), pid=os.getpid(), toolsets=None, development_keys=KEYS
    )

    with recorded(tmp_path, serving):
        assert recorded_in(tmp_path) == serving
        assert stat.S_IMODE((tmp_path / SERVING_FILE).stat().st_mode) == 0o600

    assert recorded_in(tmp_path) is None
    assert list(tmp_path.iterdir()) == []  # no scratch file left behind


def test_a_record_another_raydag_wrote_since_is_left_in_place(tmp_path: Path) -> None:
    mine = Serving(
        url=serving_url("127.0.0.1", free_port()), pid=os.getpid(), toolsets=None, development_keys=KEYS
    )
    successor = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        theirs = Serving(
            url=serving_url("127.0.0.1", free_port()), pid=successor.pid, toolsets=None, development_keys={}
        )
        mine_block, theirs_block = recorded(tmp_path, mine), recorded(tmp_path, theirs)
        mine_block.__enter__()
        theirs_block.__enter__()  # a raydag started since records itself over the record of one stopping

        mine_block.__exit__(None, None, None)
        assert recorded_in(tmp_path) == theirs

        theirs_block.__exit__(None, None, None)
        assert recorded_in(tmp_path) is None
    finally:
        successor.kill()
        successor.wait()


@pytest.mark.parametrize(
    "content",
    [
        "",
        "{",
        "[]",
        '{"url": "http://x"}',
        '{"url": "u", "pid": "x", "toolsets": null, "development_keys": {}}',
        '{"url": "u", "pid": 1, "toolsets": null, "development_keys": []}',
    ],
)
def test_a_record_that_is_not_one_raydag_wrote_is_nothing_to_attach_to(tmp_path: Path, content: str) -> None:
    (tmp_path / SERVING_FILE).write_text(content)

    assert recorded_in(tmp_path) is None
    assert serving_here(tmp_path, None) is None


def test_a_record_whose_process_is_gone_is_nothing_to_attach_to(tmp_path: Path) -> None:
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    serving = Serving(
        url=serving_url("127.0.0.1", free_port()), pid=gone.pid, toolsets=None, development_keys=KEYS
    )

    with recorded(tmp_path, serving):
        assert recorded_in(tmp_path) is None


def test_a_raydag_that_does_not_answer_is_nothing_to_attach_to(tmp_path: Path) -> None:
    import socket

    with socket.socket() as closed:  # a port bound and never listened on: refused at once
        closed.bind(("127.0.0.1", 0))
        url = serving_url("127.0.0.1", closed.getsockname()[1])
        with recorded(tmp_path, Serving(url=url, pid=os.getpid(), toolsets=None, development_keys=KEYS)):
            assert recorded_in(tmp_path) is not None
            assert serving_here(tmp_path, None) is None


def test_a_raydag_listening_on_every_address_is_reached_over_loopback() -> None:
    port = free_port()  # only formatted here, never bound
    assert serving_url("0.0.0.0", port) == f"http://127.0.0.1:{port}"
    assert serving_url("::", port) == f"http://127.0.0.1:{port}"
    assert serving_url("::1", port) == f"http://[::1]:{port}"
    assert serving_url("10.0.0.5", port) == f"http://10.0.0.5:{port}"


def test_the_home_is_read_as_the_settings_read_it(tmp_path: Path) -> None:
    from actors.launch.settings import Settings

    assert home_in({}) == Settings().model_copy(update={"home": DEFAULT_HOME}).home_dir
    assert home_in({"RAYDAG_HOME": str(tmp_path / "h")}) == (tmp_path / "h").resolve()


def test_the_toolsets_a_run_asks_for_are_named_by_the_same_variable_the_toolsets_read() -> None:
    from actors.launch import serving
    from actors.toolsets import TOOLSETS_ENV

    assert serving.TOOLSETS_ENV == TOOLSETS_ENV


def test_a_run_is_made_with_the_key_given_else_the_tenants_development_key() -> None:
    serving = Serving(url="http://127.0.0.1:1", pid=1, toolsets=None, development_keys=KEYS)
    own_keys = Serving(url="http://127.0.0.1:1", pid=1, toolsets=None, development_keys={})

    assert key_for(serving, "tenant-demo", None) == "dev-key-tenant-demo"
    assert key_for(serving, "tenant-demo", "given") == "given"
    assert key_for(serving, "tenant-other", None) is None
    assert key_for(own_keys, "tenant-demo", None) is None


def test_a_record_others_may_write_is_not_read(tmp_path: Path) -> None:
    serving = Serving(
        url=serving_url("127.0.0.1", free_port()), pid=os.getpid(), toolsets=None, development_keys=KEYS
    )
    with recorded(tmp_path, serving):
        (tmp_path / SERVING_FILE).chmod(
            0o620
        )  # a group may write it: its URL and keys are not the owner's word
        assert recorded_in(tmp_path) is None
        (tmp_path / SERVING_FILE).chmod(
            0o644
        )  # readable by others (keys there are public), written by its owner
        assert recorded_in(tmp_path) == serving


def test_a_decision_is_asked_with_the_approver_key_the_record_names_and_a_given_key_wins() -> None:
    serving = Serving(
        url="http://127.0.0.1:1",
        pid=1,
        toolsets=None,
        development_keys=KEYS,
        approver_keys={"tenant-demo": "dev-key-approver"},
    )
    assert key_for(serving, "tenant-demo", None, decides=True) == "dev-key-approver"
    assert key_for(serving, "tenant-demo", None) == "dev-key-tenant-demo"
    assert key_for(serving, "tenant-demo", "mine", decides=True) == "mine"
    assert key_for(serving, "tenant-other", None, decides=True) is None
