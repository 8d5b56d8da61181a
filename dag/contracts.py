"""Tool contracts: what a tool is allowed to be, declared once and read by policy, planner and server.

A contract's input and output shapes come from one of two places: pydantic models written in Python (the
caseops tools, whose server is raydag's own), or the JSON Schemas a foreign server published in its
``tools/list`` (a toolset's tools). Either way ``input_schema``, ``input_problem`` and ``output_problem`` read
the same, so policy, planner and client do not care which.
"""

from __future__ import annotations

import posixpath
from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from functools import cached_property
from typing import Any, assert_never

from pydantic import BaseModel, ValidationError

from dag.refs import format_path
from dag.schemas import JsonSchema


class Risk(StrEnum):
    """What a tool call can do to the world."""

    READ_ONLY = "read_only"
    REVERSIBLE_WRITE = "reversible_write"
    IRREVERSIBLE_WRITE = "irreversible_write"


class Recording(StrEnum):
    """What the run's record keeps of a call's arguments and output."""

    FULL = "full"
    """Arguments and output as they were, for the API, the joiner and recovery."""
    DIGEST = "digest"
    """Read APIs show SHA-256 digests instead of the values (the event log still holds them for recovery)."""


MAX_OUTPUT_BYTES = 4 << 20
"""The default largest output a call may record (its JSON, UTF-8): a larger answer fails the call."""
MAX_CONTENT_BLOCKS = 1_000
"""The default largest number of content blocks in one answer."""

INVESTIGATE = "investigate"
"""The run stage of a document check. A tool declares the stages it may be used in."""


class BindingMatch(StrEnum):
    """How a run-bound argument must relate to the run's resource value."""

    EQUALS = "equals"
    """The argument is the resource value itself (``case_id`` is the run's case)."""
    PATH_WITHIN = "path_within"
    """The argument is an absolute path at or under the resource value (a file under the run's root)."""


@dataclass(frozen=True)
class RunBinding:
    """One run-bound input field: which key of the run's resource it is bound to, and how."""

    field: str
    resource_key: str
    match: BindingMatch = BindingMatch.EQUALS

    def admits(self, value: object, resource_value: object) -> bool:
        """Whether an argument ``value`` stays inside the run's ``resource_value``; anything unclear is no.

        ``PATH_WITHIN`` is decided on the text of the paths, normalized (``..`` folded): a relative path or a
        NUL byte is refused. Symbolic links are the server's to resolve; raydag never sees its file system.
        """
        match self.match:
            case BindingMatch.EQUALS:
                return value == resource_value
            case BindingMatch.PATH_WITHIN:
                if not isinstance(value, str) or not isinstance(resource_value, str):
                    return False
                if not (value.startswith("/") and resource_value.startswith("/")):
                    return False
                if "\x00" in value or "\x00" in resource_value:
                    return False
                path, root = posixpath.normpath(value), posixpath.normpath(resource_value)
                return path == root or path.startswith(root.rstrip("/") + "/")
            case _:
                assert_never(self.match)


class DeclaredBySchema(BaseModel):
    """The ``input_model``/``output_model`` of a contract whose shapes a server declared as JSON Schemas.

    A stand-in, not a model: validating with it or asking it for a schema raises, so code written for
    pydantic-declared tools fails loudly on a declared one instead of waving its arguments through.
    """

    @classmethod
    def model_validate(cls, *args: Any, **kwargs: Any) -> DeclaredBySchema:
        raise TypeError(
            "this tool's shapes are JSON Schemas a server declared: use ToolContract.input_problem"
        )

    @classmethod
    def model_json_schema(cls, *args: Any, **kwargs: Any) -> dict[str, Any]:
        raise TypeError(
            "this tool's shapes are JSON Schemas a server declared: use ToolContract.input_schema"
        )


@dataclass(frozen=True)
class ToolContract:
    """A tool's declared contract, not just its signature.

    - ``run_bound`` input fields are fixed by the run (a ``root`` the run's resource names): a planner
      writes them, the policy checks them against the run before every dispatch. None by default.
    - ``observed_bound`` input fields must carry a value this run has already seen in a tool output
      (an id a listing of this run returned), never one a planner made up.
    - Every other input field is proposable by a planner.

    Shapes: ``input_model``/``output_model`` (pydantic, raydag's own servers) or
    ``declared_input``/``declared_output`` (JSON Schemas a server listed; the models are then
    ``DeclaredBySchema``); exactly one input shape, at most one output shape (a tool that declares no
    output schema has its output recorded unchecked).
    """

    name: str
    version: str
    description: str
    scope: str
    risk: Risk
    input_model: type[BaseModel] = DeclaredBySchema
    output_model: type[BaseModel] = DeclaredBySchema
    run_bound: frozenset[str] = frozenset()
    observed_bound: frozenset[str] = frozenset()
    stages: frozenset[str] = frozenset({INVESTIGATE})
    timeout_s: float = 10.0
    max_attempts: int = 3
    recording: Recording = Recording.FULL
    declared_input: JsonSchema | None = None
    declared_output: JsonSchema | None = None
    resource_keys: tuple[RunBinding, ...] = ()
    """How run-bound fields bind to the run's resource; a run-bound field not named here binds to the key of
    its own name by equality (``repo`` → the resource's ``repo``)."""
    server: str | None = None
    """The toolset server that serves the tool; ``None`` for the runtime's default MCP endpoint."""
    split_lines: frozenset[str] = frozenset()
    """String output fields that hold one item per line (a listing as text): the recorded output also
    carries ``<field>_lines``, the non-empty lines as a list, which a ``for_each`` can iterate."""
    max_output_bytes: int = MAX_OUTPUT_BYTES
    """The largest output recorded (its compact JSON, UTF-8); a larger answer fails (``OUTPUT_TOO_LARGE``)."""
    max_content_blocks: int = MAX_CONTENT_BLOCKS
    """The most content blocks one answer may hold; more fail the call (``OUTPUT_TOO_LARGE``)."""

    def __post_init__(self) -> None:
        if (self.input_model is DeclaredBySchema) == (self.declared_input is None):
            raise ValueError(f"{self.name}: give exactly one of input_model and declared_input")
        if self.output_model is not DeclaredBySchema and self.declared_output is not None:
            raise ValueError(f"{self.name}: give at most one of output_model and declared_output")
        inputs = self.input_fields
        for bound in (self.run_bound, self.observed_bound):
            if not bound <= inputs:
                raise ValueError(f"{self.name}: bound fields {sorted(bound - inputs)} are not inputs")
        unbound = {binding.field for binding in self.resource_keys} - self.run_bound
        if unbound:
            raise ValueError(f"{self.name}: resource keys for {sorted(unbound)}, which are not run-bound")
        if self.max_attempts < 1 or self.timeout_s <= 0:
            raise ValueError(f"{self.name}: max_attempts must be >= 1 and timeout_s > 0")
        if self.max_output_bytes < 1 or self.max_content_blocks < 1:
            raise ValueError(f"{self.name}: max_output_bytes and max_content_blocks must be >= 1")

    @property
    def input_fields(self) -> frozenset[str]:
        """The named arguments the tool takes."""
        if self.input_model is not DeclaredBySchema:
            return frozenset(self.input_model.model_fields)
        assert self.declared_input is not None
        return self.declared_input.properties

    @property
    def run_bindings(self) -> tuple[RunBinding, ...]:
        """Every run-bound field with the resource key it is bound to, in field order."""
        explicit = {binding.field: binding for binding in self.resource_keys}
        return tuple(explicit.get(name, RunBinding(name, name)) for name in sorted(self.run_bound))

    @property
    def resource_keys_needed(self) -> frozenset[str]:
        """The keys a run's resource must name for this tool to be usable in it."""
        return frozenset(binding.resource_key for binding in self.run_bindings)

    @property
    def idempotent(self) -> bool:
        """Read-only calls may be repeated: that is what makes a retry safe."""
        return self.risk is Risk.READ_ONLY

    @property
    def proposable(self) -> frozenset[str]:
        """Input fields a planner chooses freely."""
        return self.input_fields - self.run_bound - self.observed_bound

    @cached_property
    def input_schema(self) -> dict[str, Any]:
        """The input JSON Schema a planner is shown and plans are checked against."""
        if self.input_model is not DeclaredBySchema:
            return self.input_model.model_json_schema()
        assert self.declared_input is not None
        document: dict[str, Any] = self.declared_input.document
        return document

    @cached_property
    def output_schema(self) -> dict[str, Any] | None:
        """The output JSON Schema, or ``None`` for a tool that declares none."""
        if self.output_model is not DeclaredBySchema:
            return self.output_model.model_json_schema()
        if self.declared_output is not None:
            document: dict[str, Any] = self.declared_output.document
            return document
        return None

    def input_problem(self, args: Mapping[str, Any]) -> str | None:
        """``None`` if resolved ``args`` fit the input shape, else the first problem (``/field: message``).

        A model, where there is one, is the final word: it is what raydag's own server applies, and Python's
        ``re`` lets a schema ``$`` match before a trailing newline where the model does not.
        """
        if self.input_model is not DeclaredBySchema:
            return _model_problem(self.input_model, dict(args))
        assert self.declared_input is not None
        return self.declared_input.first_problem(dict(args))

    def with_lines(self, output: Any) -> Any:
        """``output`` (already checked against the output shape) with each ``split_lines`` field also as
        ``<field>_lines``."""
        if not self.split_lines or not isinstance(output, Mapping):
            return output
        derived = dict(output)
        for name in sorted(self.split_lines):
            text = output.get(name)
            if isinstance(text, str):
                derived[f"{name}_lines"] = [line for line in text.splitlines() if line.strip()]
        return derived

    def output_problem(self, output: Any) -> str | None:
        """``None`` if a tool's structured output fits its declared output shape (or it declares none)."""
        if self.output_model is not DeclaredBySchema:
            return _model_problem(self.output_model, output)
        if self.declared_output is not None:
            return self.declared_output.first_problem(output)
        return None


def _model_problem(model: type[BaseModel], value: Any) -> str | None:
    try:
        model.model_validate(value)
    except ValidationError as exc:
        first = exc.errors()[0]
        return f"{format_path(tuple(first['loc']))}: {first['msg'][:300]}"
    return None


ToolCatalogue = Mapping[str, ToolContract]
"""Tools by name."""


def catalogue_of(*contracts: ToolContract) -> dict[str, ToolContract]:
    """A catalogue keyed by tool name; a duplicate name is a programming error."""
    by_name: dict[str, ToolContract] = {}
    for contract in contracts:
        if contract.name in by_name:
            raise ValueError(f"duplicate tool contract {contract.name!r}")
        by_name[contract.name] = contract
    return by_name
