"""The shipped ``serve_config.yaml`` and the API's scaling settings, checked offline (no Ray running)."""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import pytest
import yaml

from actors.launch.settings import Settings

REPO = Path(__file__).resolve().parents[2]
POSTGRES_DEFAULT_MAX_CONNECTIONS = 100


@pytest.fixture(scope="module")
def config() -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load((REPO / "serve_config.yaml").read_text())
    return loaded


def _schemas() -> Any:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # Serve's schemas emit pydantic deprecation warnings on import
        from ray.serve import schema
    return schema


def test_the_config_is_a_valid_serve_deploy_config(config: dict[str, Any]) -> None:
    schema = _schemas()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        parsed = schema.ServeDeploySchema.model_validate(config)
    assert [application.import_path for application in parsed.applications] == ["serve_app:app"]


def test_the_config_has_no_key_serve_would_silently_ignore(config: dict[str, Any]) -> None:
    """Serve's schemas accept unknown keys: a misspelt option would deploy with the default instead."""
    schema = _schemas()

    def unknown(section: dict[str, Any], model: Any) -> set[str]:
        return set(section) - set(model.model_fields)

    assert unknown(config, schema.ServeDeploySchema) == set()
    assert unknown(config["http_options"], schema.HTTPOptionsSchema) == set()
    for application in config["applications"]:
        assert unknown(application, schema.ServeApplicationSchema) == set()
        for deployment in application["deployments"]:
            assert unknown(deployment, schema.DeploymentSchema) == set()
            assert unknown(deployment["ray_actor_options"], schema.RayActorOptionsSchema) == set()


def test_the_config_names_the_deployment_the_app_defines(config: dict[str, Any]) -> None:
    from actors.api import app as serve_app

    (application,) = config["applications"]
    assert application["import_path"] == "serve_app:app"
    assert {deployment["name"] for deployment in application["deployments"]} == {serve_app.APPLICATION_NAME}


def test_the_config_binds_loopback_and_outlasts_the_longest_wait(config: dict[str, Any]) -> None:
    from actors.api.app import MAX_WAIT_SECONDS

    assert config["http_options"]["host"] == "127.0.0.1"
    assert config["http_options"]["request_timeout_s"] > MAX_WAIT_SECONDS
    (deployment,) = config["applications"][0]["deployments"]
    assert deployment["graceful_shutdown_timeout_s"] > MAX_WAIT_SECONDS
    assert deployment["ray_actor_options"]["num_cpus"] == 0


def test_the_config_places_the_proxy_and_the_replicas_on_the_head_as_raydag_serve_does(
    config: dict[str, Any],
) -> None:
    from actors.api.app import REPLICA_OPTIONS
    from actors.launch.servers import PROXY_LOCATION

    assert config["proxy_location"] == PROXY_LOCATION == "HeadOnly"
    (deployment,) = config["applications"][0]["deployments"]
    # The config's ray_actor_options replace the code's whole: the placement must be spelt out in both.
    assert deployment["ray_actor_options"] == REPLICA_OPTIONS["ray_actor_options"]
    assert deployment["ray_actor_options"]["resources"] == {"node:__internal_head__": 0.001}


def test_the_configured_replicas_fit_postgres_default_connections(config: dict[str, Any]) -> None:
    """Each replica holds two pools (the API's and the MCP server's); the supervisor holds one, and a
    connection listening for people's decisions."""
    pool = Settings.model_fields["db_pool_size"].default
    (deployment,) = config["applications"][0]["deployments"]
    replicas = deployment["autoscaling_config"]["max_replicas"]
    assert replicas * 2 * pool + pool + 1 <= 0.8 * POSTGRES_DEFAULT_MAX_CONNECTIONS


def test_scaling_is_a_fixed_count_unless_a_larger_maximum_is_set() -> None:
    from actors.api.app import Scaling

    assert Scaling().deployment_options() == {"num_replicas": 1}
    assert Scaling(replicas=3, max_replicas=3).deployment_options() == {"num_replicas": 3}
    assert Scaling(replicas=1, max_replicas=4).deployment_options() == {
        "autoscaling_config": {"min_replicas": 1, "max_replicas": 4, "target_ongoing_requests": 32}
    }


def test_scaling_comes_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    from actors.api.app import Scaling

    monkeypatch.setenv("RAYDAG_REPLICAS", "2")
    monkeypatch.setenv("RAYDAG_MAX_REPLICAS", "5")
    assert Scaling.from_settings(Settings()) == Scaling(replicas=2, max_replicas=5)


def test_a_maximum_below_the_minimum_is_refused_with_both_values(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RAYDAG_REPLICAS", "3")
    monkeypatch.setenv("RAYDAG_MAX_REPLICAS", "2")
    with pytest.raises(ValueError, match="RAYDAG_MAX_REPLICAS=2 is below RAYDAG_REPLICAS=3"):
        Settings()
