"""``raydag up`` / ``raydag down``, and the commands that attach to the raydag serving their home.

``up`` starts ``raydag serve`` in the background; ``raydag run`` and ``raydag batch`` on the same home, with no
``--url``, make their runs through it, from an environment where they could start nothing themselves (their
database setting points where nothing answers); ``--no-attach`` runs on its own; ``down`` stops it and leaves
no process of it behind. A raydag that takes keys of its own, or a record whose process is gone, is never
attached to with a key it does not take."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Mapping
from pathlib import Path

import httpx
import psutil
import pytest

from actors.launch.serving import Serving, recorded, serving_url
from tests.conftest import REPO
from tests.integration.test_cli import RAYDAG, environment, home_fixture
from tests.integration.test_cli_inbox import until_line
from tests.integration.test_operations import act_on_a_copy, sent
from tests.loopback import free_port

home = home_fixture("cli-background")


def command(
    home: Path, *args: str, extra: Mapping[str, str] | None = None, timeout_s: float = 240
) -> subprocess.CompletedProcess[str]:
    """``raydag ARGS`` on ``home``, configured by ``extra`` alone."""
    return subprocess.run(
        [RAYDAG, *args],
        env=environment(home, **(extra or {})),
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=timeout_s,
        check=False,
    )


def nowhere() -> dict[str, str]:
    """Settings under which a command could start nothing itself: its database is a port nothing answers."""
    return {"RAYDAG_DATABASE_URL": f"postgresql://postgres@127.0.0.1:{free_port()}/none"}


def test_up_serves_the_home_its_runs_attach_to_it_and_down_stops_everything_it_started(
    dsn: str, home: Path
) -> None:
    port = free_port()
    serving = {"RAYDAG_DATABASE_URL": dsn, "RAYDAG_PORT": str(port), "RAYDAG_DASHBOARD": "false"}
    started = command(home, "up", extra=serving)
    assert started.returncode == 0, started.stdout + started.stderr + (home / "serve.log").read_text()
    record = json.loads((home / "serving.json").read_text())
    server = psutil.Process(record["pid"])
    try:
        assert record["url"] == f"http://127.0.0.1:{port}"
        assert command(home, "up", extra=serving).stdout.startswith("a raydag serves")  # one is enough

        # A run of its own could not start here: the run is the serving raydag's.
        ran = command(home, "run", "C-102", "--json", extra=nowhere())
        assert ran.returncode == 0, ran.stdout + ran.stderr
        report = json.loads(ran.stdout)
        assert report["run"]["result"]["outcome"] == "DOCUMENTS_COMPLETE_AFTER_NORMALIZATION"
        assert f"made by the raydag at {record['url']}" in ran.stderr
        served = httpx.get(
            f"{record['url']}/runs/{report['run']['run_id']}",
            headers={"Authorization": "Bearer dev-key-tenant-demo"},
        )
        assert served.json()["result"] == report["run"]["result"]

        cases = home / "cases.txt"
        cases.write_text("C-102\nC-999\n")
        batch = command(home, "batch", str(cases), extra=nowhere())
        assert batch.returncode != 0 or "C-999" in batch.stdout, batch.stdout + batch.stderr
        rows = {row["case_id"]: row for row in json.loads((home / "batch-report.json").read_text())["cases"]}
        assert rows["C-102"]["status"] == "completed"
        assert rows["C-999"]["status"] == "not_found"

        # Asked not to, it runs on its own: here that meets the database that does not answer.
        own = command(home, "run", "C-102", "--no-attach", extra=nowhere())
        assert own.returncode == 2, own.stdout + own.stderr
        assert "RAYDAG_DATABASE_URL" in own.stderr
        assert "made by the raydag" not in own.stderr

        family = [server, *server.children(recursive=True)]
    except BaseException:
        server.kill()
        raise

    stopped = command(home, "down")

    assert stopped.returncode == 0, stopped.stdout + stopped.stderr
    assert "stopped the raydag" in stopped.stdout
    assert not (home / "serving.json").exists()
    _, alive = psutil.wait_procs(family, timeout=30)
    assert alive == [], [process.pid for process in alive]
    assert command(home, "down").stdout.startswith("no raydag serves")
    with pytest.raises(httpx.ConnectError):
        httpx.get(f"{record['url']}/healthz")


def test_the_commands_that_speak_to_a_raydag_find_the_one_serving_the_home_and_decide_as_its_approver(
    dsn: str, home: Path
) -> None:
    """``raydag runs``, ``inbox``, ``approvals``, ``watch`` with no ``--url`` and no key: the raydag ``up``
    serves the home, they read with its development key and decide with its development approver's, which its
    record names (development keys only: a raydag with keys of its own records none). ``--url`` still wins.
    The send is counted in caseops' outbox."""
    serving = {"RAYDAG_DATABASE_URL": dsn, "RAYDAG_PORT": str(free_port()), "RAYDAG_DASHBOARD": "false"}
    started = command(home, "up", extra=serving)
    assert started.returncode == 0, started.stdout + started.stderr + (home / "serve.log").read_text()
    record = json.loads((home / "serving.json").read_text())
    assert (home / "serving.json").stat().st_mode & 0o777 == 0o600
    assert record["approver_keys"] == {"tenant-demo": "dev-key-approver"}
    server = psutil.Process(record["pid"])
    case = act_on_a_copy(dsn)["case_id"]
    following = subprocess.Popen(
        [RAYDAG, "run", case, "--stage", "act", "--json"],
        env=environment(home, **nowhere()),
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        until_line(following, "waits for operation", stream=following.stderr)

        waiting = command(home, "inbox", extra=nowhere(), timeout_s=60)
        assert waiting.returncode == 0, waiting.stdout + waiting.stderr
        assert f"asking the raydag at {record['url']}" in waiting.stderr
        decision = next(
            line.split("$ ", 1)[1]
            for line in waiting.stdout.splitlines()
            if "$ raydag approvals approve" in line
        )  # decidable: the inbox asked as the approver
        words = decision.split()
        run_id, send = words[3], {"operation_id": words[4]}
        assert sent(dsn, send) == 0

        elsewhere = command(home, *words[1:], "--url", f"http://127.0.0.1:{free_port()}", extra=nowhere())
        # --url wins, and the record's key is not sent there: a key must be given for it.
        assert elsewhere.returncode == 2, elsewhere.stdout + elsewhere.stderr
        assert "an API key is needed" in elsewhere.stderr
        assert sent(dsn, send) == 0
        approved = command(home, *words[1:], extra=nowhere(), timeout_s=60)
        assert approved.returncode == 0, approved.stdout + approved.stderr
        assert "dev-approver" in approved.stdout

        out, err = following.communicate(timeout=120)
        assert following.returncode == 0, out + err
        assert sent(dsn, send) == 1
        watched = command(home, "watch", run_id, extra=nowhere(), timeout_s=60)
        assert watched.returncode == 0, watched.stdout + watched.stderr
        assert "run completed" in watched.stdout
        listed = command(home, "runs", "--json", extra=nowhere(), timeout_s=60)
        assert run_id in {run["run_id"] for run in json.loads(listed.stdout)["items"]}
        listed_ops = command(home, "approvals", "list", run_id, "--json", extra=nowhere(), timeout_s=60)
        assert send["operation_id"] in {op["operation_id"] for op in json.loads(listed_ops.stdout)}
    finally:
        following.kill()
        following.communicate()
        stopped = command(home, "down")
        if stopped.returncode != 0:
            server.kill()
    assert stopped.returncode == 0, stopped.stdout + stopped.stderr


def test_a_record_another_user_could_write_is_not_attached_to(home: Path) -> None:
    process, url = healthz_only(home)
    try:
        with recorded(
            home, Serving(url=url, pid=process.pid, toolsets=None, development_keys={"tenant-demo": "k"})
        ):
            (home / "serving.json").chmod(0o622)
            own = command(home, "run", "C-102", extra=nowhere(), timeout_s=60)
            runs = command(home, "runs", "--api-key", "k", extra=nowhere(), timeout_s=60)
    finally:
        process.kill()
        process.wait()

    assert own.returncode == 2, own.stdout + own.stderr  # it ran on its own: the database does not answer
    assert "made by the raydag" not in own.stderr
    assert runs.returncode != 0, runs.stdout + runs.stderr  # asked at the default URL, with a key none takes
    assert "asking the raydag" not in runs.stderr


def test_a_decision_on_a_raydag_that_records_no_approver_key_says_how_to_get_one(home: Path) -> None:
    # A record as a raydag serve from before approver keys wrote it: development keys, no approver's.
    refused = beside_a_stand_in(home, {"tenant-demo": "k"}, "approvals", "approve", "R", "OP", "--hash", "h")

    assert refused.returncode == 2, refused.stdout + refused.stderr
    assert "records no approver's key" in refused.stderr
    assert "raydag down, then raydag up" in refused.stderr


def beside_a_stand_in(home: Path, keys: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    """``raydag ARGS`` while ``home`` records a raydag that takes the development ``keys`` and is ``/healthz``
    alone (``healthz_only``)."""
    process, url = healthz_only(home)
    try:
        with recorded(home, Serving(url=url, pid=process.pid, toolsets=None, development_keys=keys)):
            return command(home, *args, extra=nowhere(), timeout_s=60)
    finally:
        process.kill()
        process.wait()


def healthz_only(home: Path) -> tuple[subprocess.Popen[bytes], str]:
    """A process that answers ``/healthz`` on a free port, as a raydag's API does: what a command checks before
    it attaches (the attaching itself is the test above's)."""
    port = free_port()
    script = (
        "import http.server, sys\n"
        "class H(http.server.BaseHTTPRequestHandler):\n"
        "    def do_GET(self):\n"
        "        self.send_response(200); self.send_header('Content-Length', '2'); self.end_headers()\n"
        "        self.wfile.write(b'{}')\n"
        "    def log_message(self, *a): pass\n"
        f"http.server.HTTPServer(('127.0.0.1', {port}), H).serve_forever()\n"
    )
    process = subprocess.Popen(["python3", "-c", script])
    url = serving_url("127.0.0.1", port)
    for _ in range(200):
        try:
            httpx.get(f"{url}/healthz", timeout=0.5)
            break
        except httpx.HTTPError:
            if process.poll() is not None:
                raise AssertionError("the /healthz stand-in did not start") from None
    return process, url


def test_a_raydag_that_takes_keys_of_its_own_is_not_attached_to_without_one(home: Path) -> None:
    refused = beside_a_stand_in(home, {}, "run", "C-102")

    assert refused.returncode == 2, refused.stdout + refused.stderr
    assert "with API keys of its own" in refused.stderr
    assert "--api-key" in refused.stderr


def test_a_record_whose_process_is_gone_or_whose_toolsets_differ_is_not_attached_to(home: Path) -> None:
    process, url = healthz_only(home)
    gone = subprocess.Popen(["python3", "-c", "pass"])
    gone.wait()
    other = home / "other.yaml"
    try:
        for serving in (
            Serving(url=url, pid=gone.pid, toolsets=None, development_keys={"tenant-demo": "k"}),
            Serving(url=url, pid=process.pid, toolsets=str(other), development_keys={"tenant-demo": "k"}),
        ):
            with recorded(home, serving):
                own = command(home, "run", "C-102", extra=nowhere(), timeout_s=60)
            # It ran on its own: the database it was given does not answer.
            assert own.returncode == 2, own.stdout + own.stderr
            assert "RAYDAG_DATABASE_URL" in own.stderr
            assert "made by the raydag" not in own.stderr
    finally:
        process.kill()
        process.wait()
    assert not (home / "serving.json").exists()  # each record removed with its block


def test_up_says_why_a_raydag_stopped_as_it_started_and_leaves_no_record(dsn: str, home: Path) -> None:
    import socket

    with socket.socket() as taken:  # raydag serve refuses a port it cannot own, before starting anything
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        extra = {"RAYDAG_DATABASE_URL": dsn, "RAYDAG_PORT": str(taken.getsockname()[1])}
        started = command(home, "up", extra=extra, timeout_s=120)

    assert started.returncode == 1, started.stdout + started.stderr
    assert "stopped as it started" in started.stderr
    assert "cannot serve" in started.stderr  # raydag serve's own words, from its log
    assert not (home / "serving.json").exists()
