"""cluster.yaml passes the validation ``ray up`` applies, offline, and starts what docs/DEPLOY.md promises."""

from __future__ import annotations

import copy
import json
import os
import re
import subprocess
from pathlib import Path
from typing import Any

import yaml
from ray.autoscaler._private.util import prepare_config, validate_config

from actors.launch.settings import Settings
from tests.conftest import REPO


def load() -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load((REPO / "cluster.yaml").read_text())
    return loaded


def test_cluster_yaml_is_a_valid_local_provider_config() -> None:
    config = load()

    prepared = prepare_config(copy.deepcopy(config))
    validate_config(prepared)

    assert prepared["provider"]["type"] == "local"
    assert prepared["available_node_types"]["local.cluster.node"]["min_workers"] == 2


def test_every_node_installs_the_project_and_gets_the_shared_secrets() -> None:
    config = load()
    setup = " ".join(config["setup_commands"])

    assert re.search(r"pip install [^;&]*~/raydag", setup)
    secrets = "~/.raydag/cluster-secrets.env"
    assert config["file_mounts"][secrets] == secrets  # copied from the operator's machine, never the repo
    assert "RAY_AUTH_MODE=token" in setup
    # Each node's own Serve proxy, on the port raydag serves by default.
    mcp = re.search(r"RAYDAG_MCP_URL=http://127\.0\.0\.1:(\d+)/mcp", setup)
    assert mcp is not None
    assert int(mcp.group(1)) == Settings.model_fields["port"].default
    assert "cluster-secrets.env" in setup


def test_every_ray_command_runs_in_that_environment() -> None:
    config = load()
    for command in config["head_start_ray_commands"] + config["worker_start_ray_commands"]:
        assert command.startswith(". ~/.raydag_env && "), command


def test_the_head_starts_the_dashboard_and_then_deploys_the_shipped_serve_config() -> None:
    config = load()
    head = config["head_start_ray_commands"]
    start = next(index for index, command in enumerate(head) if "ray start --head" in command)

    assert "--include-dashboard=true" in head[start]
    assert "--dashboard-host=127.0.0.1" in head[start]  # reached through `ray dashboard cluster.yaml`
    assert "--metrics-export-port=" in head[start]
    deploy = next(index for index, command in enumerate(head) if "serve deploy" in command)
    assert deploy > start
    assert "serve deploy serve_config.yaml --address http://127.0.0.1:8265" in head[deploy]
    assert (REPO / "serve_config.yaml").is_file()


def test_the_serve_config_runs_one_proxy_on_the_heads_loopback() -> None:
    serve_config = yaml.safe_load((REPO / "serve_config.yaml").read_text())

    assert serve_config["proxy_location"] == "HeadOnly"
    assert serve_config["http_options"] == serve_config["http_options"] | {"host": "127.0.0.1", "port": 8000}


def run_setup(home: Path, command: str) -> None:
    completed = subprocess.run(
        ["bash", "-c", command], env={"HOME": str(home), "PATH": os.defpath}, capture_output=True, text=True
    )
    assert completed.returncode == 0, completed.stderr


def test_the_secrets_file_as_documented_reads_in_the_nodes_shell(tmp_path: Path) -> None:
    # Found by `ray up` on 2026-12-05: unquoted, the JSON of RAYDAG_API_KEYS broke the shell that reads it.
    documented = (REPO / "docs" / "DEPLOY.md").read_text(encoding="utf-8")
    [keys] = [line.strip() for line in documented.splitlines() if line.strip().startswith("RAYDAG_API_KEYS=")]
    secrets = tmp_path / ".raydag" / "cluster-secrets.env"
    secrets.parent.mkdir()
    secrets.write_text(f"{keys}\nRAYDAG_TOKEN_KEY=abc\n", encoding="utf-8")
    [environment] = [command for command in load()["setup_commands"] if "> ~/.raydag_env" in command]
    run_setup(tmp_path, environment)

    read = subprocess.run(
        ["bash", "-c", '. ~/.raydag_env && printf %s "$RAYDAG_API_KEYS"'],
        env={"HOME": str(tmp_path), "PATH": os.defpath},
        capture_output=True,
        text=True,
    )
    assert (read.returncode, read.stderr) == (0, ""), read.stderr
    grants = json.loads(read.stdout)
    assert grants["<key>"]["tenant_id"] == "tenant-a"


def test_ray_starts_with_as_many_open_files_as_the_hard_limit_allows_when_it_is_below_65536() -> None:
    # Found by `ray up` on 2026-12-05: `ulimit -n 65536` failed under a container's hard limit of 20,000.
    config = load()
    for command in config["head_start_ray_commands"] + config["worker_start_ray_commands"]:
        if "ulimit" not in command:
            continue
        raise_limit = re.search(r"\{ ulimit[^}]*\}", command)
        assert raise_limit is not None, command
        shell = f"ulimit -Sn 256 && ulimit -Hn 1024 && {raise_limit.group(0)} && ulimit -n"
        completed = subprocess.run(["bash", "-c", shell], capture_output=True, text=True)
        assert (completed.returncode, completed.stdout.strip()) == (0, "1024"), completed.stderr


def test_the_launchers_own_shells_find_the_projects_ray(tmp_path: Path) -> None:
    # Found by `ray up` on 2026-12-05: `ray down` runs a bare `ray stop` in the node's login shell, which did not
    # find the project's `ray`, reported success and left Ray running.
    ray = tmp_path / "raydag" / ".venv" / "bin" / "ray"
    ray.parent.mkdir(parents=True)
    ray.write_text("#!/bin/sh\n", encoding="utf-8")
    ray.chmod(0o755)
    [bashrc] = [command for command in load()["setup_commands"] if "~/.bashrc" in command]
    run_setup(tmp_path, bashrc)
    run_setup(tmp_path, bashrc)  # `ray up` again adds nothing

    assert (tmp_path / ".bashrc").read_text(encoding="utf-8").count("raydag/.venv/bin") == 1
    found = subprocess.run(  # as the launcher's command runner does: source ~/.bashrc, then the command
        ["bash", "-c", "source ~/.bashrc; command -v ray"],
        env={"HOME": str(tmp_path), "PATH": os.defpath},
        capture_output=True,
        text=True,
    )
    assert found.stdout.strip() == str(ray), found.stderr
