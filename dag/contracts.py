"""Tool contracts: what a tool is allowed to be, declared once and read by policy, planner and server.

A contract's input and output shapes come from one of two places: pydantic models written in Python (the
caseops tools, whose server is raydag's own), or the JSON Schemas a foreign server published in its
``tools/list`` (a toolset's tools). Either way ``input_schema``, ``input_problem`` and ``output_problem`` read
the same, so policy, planner and client do not care which.
"""

from __future__ import annotations

import posixpath
import unicodedata
import urllib.parse
from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from functools import cached_property
from typing import Any, assert_never

from pydantic import BaseModel, ValidationError

from dag.refs import format_path
from dag.schemas import JsonSchema
from dag.writes import OperationSpec


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
    """The argument is an absolute path in normal form at or under the resource value (a file under the run's
    root), and stays there however a server reads it: see ``path_refusal``."""


@dataclass(frozen=True)
class RunBinding:
    """One run-bound input field: which key of the run's resource it is bound to, and how."""

    field: str
    resource_key: str
    match: BindingMatch = BindingMatch.EQUALS

    def admits(self, value: object, resource_value: object) -> bool:
        """Whether an argument ``value`` stays inside the run's ``resource_value``; anything unclear is no."""
        return self.refusal(value, resource_value) is None

    def refusal(self, value: object, resource_value: object) -> str | None:
        """Why an argument ``value`` does not stay inside the run's ``resource_value``, or ``None`` if it does.

        The reason is a phrase to follow the field's name (``is not within the run's root``).
        """
        match self.match:
            case BindingMatch.EQUALS:
                return None if value == resource_value else f"is not within the run's {self.resource_key}"
            case BindingMatch.PATH_WITHIN:
                if not isinstance(resource_value, str):
                    return f"cannot be checked: the run's {self.resource_key} is not a path"
                if not isinstance(value, str):
                    return "is not a path"
                return path_refusal(value, resource_value, self.resource_key)
            case _:
                assert_never(self.match)


MAX_PERCENT_DECODINGS = 8
"""Rounds of percent-decoding a path may take to settle (``%252e`` takes three); one that takes more is refused."""


def path_refusal(path: str, root: str, root_key: str = "root") -> str | None:
    """Why ``path`` may not be sent as a path under ``root``, or ``None`` if it may (``PATH_WITHIN``).

    The server is sent ``path`` as written, and raydag cannot know how the server reads it. So a path is
    admitted only if deciding on its text is deciding on what the server acts on: the text is already in
    normal form (absolute, no NUL, no ``.``, ``..`` or empty segment, no trailing ``/``, unchanged by Unicode
    NFKC), and every other reading a server may take (percent-decoded until it settles, NFKC-normalized
    after that, ``\\`` read as ``/``, and their combinations) stays under ``root`` as well. A path that is
    not in normal form is refused, not rewritten: the node's arguments stay what the planner wrote and what
    the run records, and a path worth reading does not need rewriting. The root must be in normal form too,
    or no comparison with it is clear. Symbolic links are the server's to resolve; raydag never sees its
    file system.
    """
    if _not_normal(root) is not None:
        return f"cannot be checked: the run's {root_key} is not an absolute path in normal form"
    problem = _not_normal(path)
    if problem is not None:
        return problem
    if not _within(path, root):
        return f"is not within the run's {root_key}"
    decoded = _percent_decoded(path)
    if decoded is None:
        return f"does not percent-decode to UTF-8 text within {MAX_PERCENT_DECODINGS} rounds"
    for reading, text in _readings(path, decoded).items():
        if "\x00" in text or not _within(posixpath.normpath(text), root):
            return f"leaves the run's {root_key} when read {reading}"
    return None


def _not_normal(path: str) -> str | None:
    """Why ``path`` is not an absolute POSIX path in normal form, or ``None`` if it is."""
    if not path.startswith("/"):
        return "is not an absolute path"
    if "\x00" in path:
        return "holds a NUL character"
    if path.startswith("//") or posixpath.normpath(path) != path:  # normpath keeps a leading ``//``
        return "is not in normal form: it has a '.', '..' or empty segment, or a trailing '/'"
    if unicodedata.normalize("NFKC", path) != path:
        return "is not in normal form: Unicode NFKC normalization changes it"
    return None


def _within(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip("/") + "/")


def _percent_decoded(path: str) -> str | None:
    """``path`` percent-decoded until it settles; ``None`` if it takes too many rounds or decodes bytes that
    are not UTF-8 (an overlong ``%C0%AE`` is a ``.`` to some decoders)."""
    for _ in range(MAX_PERCENT_DECODINGS):
        try:
            decoded = urllib.parse.unquote(path, errors="strict")
        except UnicodeDecodeError:
            return None
        if decoded == path:
            return path
        path = decoded
    return None


def _readings(path: str, decoded: str) -> dict[str, str]:
    """What a server may make of ``path`` other than its text, by how it reads it."""
    normalized = unicodedata.normalize("NFKC", decoded)
    return {
        "with '\\' as '/'": path.replace("\\", "/"),
        "percent-decoded": decoded,
        "percent-decoded with '\\' as '/'": decoded.replace("\\", "/"),
        "percent-decoded and NFKC-normalized": normalized,
        "percent-decoded and NFKC-normalized with '\\' as '/'": normalized.replace("\\", "/"),
    }


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
    operation: OperationSpec | None = None
    """For a write tool, how it acts through the operation ledger (``dag.operations``); a write tool without
    one is never offered."""
    task: bool = False
    """Called as an MCP task (its server runs it as one): started, recorded, then followed until it ends,
    each exchange bounded by ``timeout_s`` and the whole by the run's deadline."""

    def __post_init__(self) -> None:
        if (self.input_model is DeclaredBySchema) == (self.declared_input is None):
            raise ValueError(f"{self.name}: give exactly one of input_model and declared_input")
        if self.output_model is not DeclaredBySchema and self.declared_output is not None:
            raise ValueError(f"{self.name}: give at most one of output_model and declared_output")
        inputs = self.input_fields
        for bound in (self.run_bound, self.observed_bound):
            if not bound <= inputs:
                raise ValueError(f"{self.name}: bound fields {sorted(bound - inputs)} are not inputs")
        named = self.operation.intent.arguments if self.operation is not None else None
        if named is not None and not set(named) <= inputs:
            raise ValueError(f"{self.name}: intent arguments {sorted(set(named) - inputs)} are not inputs")
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
