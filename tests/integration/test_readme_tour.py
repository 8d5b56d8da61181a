"""The README's five-minute tour, as written: its toolsets file, its plan and its commands, over a folder of
the test's own (the tour's ``/srv/reports``), with the pinned reference filesystem server in place of what
``npx -y`` would fetch."""

from __future__ import annotations

import json
import re
import signal
import subprocess
from pathlib import Path

import httpx

from actors.cli.client import DEFAULT_URL
from tests.conftest import REPO
from tests.integration.conftest import DEMO_KEY, auth
from tests.integration.test_cli import RAYDAG, environment
from tests.integration.toolset_servers import FILESYSTEM, NODE
from tests.loopback import free_port, wait_until_ok
from tests.processes import nothing_listens, started

TOUR = "## A five-minute tour over a server of your own"
LAUNCHER = 'command: npx\n    args: ["-y", "@modelcontextprotocol/server-filesystem", "/srv/reports"]'


def tour() -> str:
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    start = readme.index(TOUR)
    return readme[start : readme.index("\n## ", start + len(TOUR))]


def blocks(language: str) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", tour(), flags=re.DOTALL)


def written(folder: Path) -> tuple[Path, Path, Path]:
    """The tour's files, over ``folder``'s reports: ``my.yaml``, ``plan.json``, and the reports folder."""
    reports = folder / "reports"
    reports.mkdir()
    (reports / "q3.txt").write_text("revenue up\n")
    (reports / "q4.txt").write_text("revenue flat\n")
    (reports / "notes.md").write_text("not a report\n")
    [toolsets] = blocks("yaml")
    [plan] = blocks("json")
    assert LAUNCHER in toolsets, "the tour's server is no longer started as the test expects"
    pinned = f'command: {NODE}\n    args: ["{FILESYSTEM}", "/srv/reports"]'
    (folder / "my.yaml").write_text(toolsets.replace(LAUNCHER, pinned).replace("/srv/reports", str(reports)))
    (folder / "plan.json").write_text(plan.replace("/srv/reports", str(reports)))
    return folder / "my.yaml", folder / "plan.json", reports


def test_step_3_runs_the_plan_reading_every_report_and_a_path_outside_the_root_is_denied(
    dsn: str, tmp_path: Path
) -> None:
    toolsets, plan, reports = written(tmp_path)
    run_command = blocks("sh")[0]
    assert (
        run_command.strip() == "raydag run --toolsets my.yaml --plan plan.json --resource root=/srv/reports"
    )
    env = environment(tmp_path / "home", RAYDAG_DATABASE_URL=dsn)
    args = ["run", "--toolsets", str(toolsets), "--plan", str(plan), "--resource", f"root={reports}"]

    done = subprocess.run([RAYDAG, *args, "--json"], capture_output=True, text=True, env=env, timeout=300)
    escape = json.loads(plan.read_text())
    escape["nodes"] = [{"id": "x", "tool": "read_text_file", "args": {"path": f"{reports}/../../etc/passwd"}}]
    (tmp_path / "escape.json").write_text(json.dumps(escape))
    denied = subprocess.run(
        [
            RAYDAG,
            *args[:3],
            "--plan",
            str(tmp_path / "escape.json"),
            "--resource",
            f"root={reports}",
            "--json",
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )

    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(done.stdout)
    outputs = report["run"]["result"]["outputs"]
    texts = sorted(json.dumps(outputs[node]) for node in outputs if node.startswith("read["))
    assert len(texts) == 2
    assert "revenue up" in texts[1] or "revenue up" in texts[0]
    assert all("not a report" not in text for text in texts)
    assert denied.returncode == 3, denied.stderr[-3000:]
    [node] = json.loads(denied.stdout)["nodes"]
    assert (node["status"], node["decision"]["rule_id"]) == ("denied", "resource.root_bound")


def test_step_4_serves_the_same_over_http_with_the_viewer(dsn: str, tmp_path: Path) -> None:
    toolsets, plan, reports = written(tmp_path)
    serve_command, curl = blocks("sh")[1].splitlines()[:2]
    assert serve_command.startswith("RAYDAG_TOOLSETS=my.yaml raydag serve")
    assert f"POST '{DEFAULT_URL}/runs?wait=30'" in curl  # the tour's curl speaks to serve's default address
    port = free_port()
    env = environment(
        tmp_path / "home",
        RAYDAG_DATABASE_URL=dsn,
        RAYDAG_TOOLSETS=str(toolsets),
        RAYDAG_PORT=str(port),
        RAYDAG_DASHBOARD="false",
    )
    base = f"http://127.0.0.1:{port}"
    body = {"resource": {"root": str(reports)}, "plan": json.loads(plan.read_text())}

    with started([RAYDAG, "serve"], env=env, cwd=tmp_path, log=tmp_path / "serve.log") as serve:
        wait_until_ok(base + "/readyz", within_s=150, process=serve.process, log=serve.log, poll_s=0.5)
        created = httpx.post(base + "/runs?wait=30", json=body, headers=auth(DEMO_KEY), timeout=90)
        run_id = created.json()["run_id"]
        page = httpx.get(f"{base}/runs/{run_id}/view", timeout=30)
        assert serve.stop(signal.SIGTERM) == 0, serve.output()[-3000:]
        assert serve.leftovers == [], f"processes of raydag serve outlived it: {serve.leftovers}"

    assert created.status_code == 201, created.text
    assert created.json()["status"] == "completed", created.json()
    assert sorted(node for node in created.json()["result"]["outputs"]) == ["found", "read[0]", "read[1]"]
    assert page.status_code == 200
    assert nothing_listens(port)
