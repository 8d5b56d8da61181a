"""The core's package names what it exports and finds each where it lives, importing a module only when one of
its names is first used: ``import dag.states`` alone does not import the rest of the core."""

from __future__ import annotations

import importlib
import json
import subprocess
import sys

import pytest

import dag


def test_every_exported_name_has_a_home_that_defines_it() -> None:
    assert sorted(dag._HOMES) == sorted(dag.__all__)
    for name, home in dag._HOMES.items():
        assert getattr(dag, name) is getattr(importlib.import_module(home), name)


def test_an_unknown_name_is_an_attribute_error() -> None:
    with pytest.raises(AttributeError, match="NoSuchThing"):
        dag.NoSuchThing  # type: ignore[attr-defined]  # noqa: B018


def test_one_module_of_the_core_imports_no_other_it_does_not_need() -> None:
    code = (
        "import json, sys; import dag.states; "
        "print(json.dumps(sorted(m for m in sys.modules if m.startswith('dag'))))"
    )
    loaded = json.loads(
        subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    )
    assert loaded == ["dag", "dag.errors", "dag.states"]
