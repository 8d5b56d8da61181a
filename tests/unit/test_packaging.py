"""The distribution ships every package of the tree, and the Python API under the name ``raydag``."""

from __future__ import annotations

import tomllib

from setuptools import find_packages

from tests.conftest import REPO


def test_the_package_list_names_every_package_of_the_tree_and_maps_raydag_to_the_python_api() -> None:
    config = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]
    in_tree = find_packages(str(REPO), include=["dag*", "actors*", "planner*", "mcp_server*"])

    assert sorted(config["packages"]) == sorted([*in_tree, "raydag"])
    assert config["package-dir"] == {"raydag": "actors/python_api"}


def test_every_data_file_of_a_package_is_shipped_by_its_package_data() -> None:
    """A migration, toolset declaration or page the code reads at run time must be in the wheel too."""
    config = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]
    shipped = config["package-data"]
    unshipped = []
    for package in find_packages(str(REPO), include=["dag*", "actors*", "planner*", "mcp_server*"]):
        folder = REPO / package.replace(".", "/")
        for path in folder.rglob("*"):
            if path.suffix not in {".sql", ".yaml", ".json", ".html"} or "__pycache__" in path.parts:
                continue
            relative = path.relative_to(folder)
            if len(relative.parts) > 1 and (folder / relative.parts[0] / "__init__.py").exists():
                continue  # a subpackage's file: that package's entry answers for it
            if not any(relative.match(pattern) for pattern in shipped.get(package, [])):
                unshipped.append(f"{package}: {relative}")
    assert unshipped == []
