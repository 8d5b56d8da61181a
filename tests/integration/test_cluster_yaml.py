"""cluster.yaml passes the validation ``ray up`` applies, offline."""

from __future__ import annotations

import copy

import yaml
from ray.autoscaler._private.util import prepare_config, validate_config

from tests.conftest import REPO


def load() -> dict[str, object]:
    return yaml.safe_load((REPO / "cluster.yaml").read_text())


def test_cluster_yaml_is_a_valid_local_provider_config() -> None:
    config = load()

    prepared = prepare_config(copy.deepcopy(config))
    validate_config(prepared)

    assert prepared["provider"]["type"] == "local"
    assert prepared["available_node_types"]["local.cluster.node"]["min_workers"] == 2


def test_cluster_yaml_installs_the_project_and_points_at_a_shared_database() -> None:
    config = load()
    setup = " ".join(config["setup_commands"])  # type: ignore[arg-type]

    assert "pip install" in setup
    assert "RAYDAG_DATABASE_URL" in setup
    assert any("--head" in command for command in config["head_start_ray_commands"])  # type: ignore[union-attr]
