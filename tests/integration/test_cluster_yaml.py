"""cluster.yaml passes the validation ``ray up`` applies, offline, and starts what docs/DEPLOY.md promises."""

from __future__ import annotations

import copy
import re
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


def test_the_serve_config_runs_a_proxy_on_every_node_for_the_local_mcp_url() -> None:
    serve_config = yaml.safe_load((REPO / "serve_config.yaml").read_text())

    assert serve_config["proxy_location"] == "EveryNode"
    assert serve_config["http_options"] == serve_config["http_options"] | {"host": "127.0.0.1", "port": 8000}
