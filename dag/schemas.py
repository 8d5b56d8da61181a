"""JSON Schema documents as contracts carry them: frozen, hashable, and checked with the maintained validator.

A schema a server publishes is held as its canonical JSON text, so a contract holding one stays a hashable
value (plan validation caches validators per contract) and two identical schemas compare equal whatever their
key order. Instances are checked by ``jsonschema`` in the dialect the schema names with ``$schema``, and in
Draft 2020-12 (MCP's default dialect) when it names none.

``pattern`` is matched as JSON Schema says, as an ECMA-262 regular expression (with the ``u`` flag), by the
``regress`` library, not by Python's ``re``: there ``$`` also matches before a final newline, so
``"C-102\n"`` would pass ``^[A-Z0-9-]+$`` here and be refused by the (JavaScript, Rust, Go) server.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cached_property, lru_cache
from typing import Any

import regress
from jsonschema import Draft202012Validator, FormatChecker
from jsonschema.exceptions import ValidationError
from jsonschema.protocols import Validator
from jsonschema.validators import extend, validator_for

from dag.fingerprint import canonical_json


class SchemaInvalid(ValueError):
    """A document that is not a JSON Schema its dialect accepts."""


@dataclass(frozen=True)
class JsonSchema:
    """One JSON Schema document, held as canonical JSON text."""

    text: str

    @classmethod
    def of(cls, document: Any) -> JsonSchema:
        """The schema ``document`` (a JSON object or a boolean); raises ``SchemaInvalid`` if it is not one."""
        if not isinstance(document, dict | bool):
            raise SchemaInvalid(f"a JSON Schema is an object or a boolean, not {type(document).__name__}")
        schema = cls(canonical_json(document))
        dialect = _validator_class(schema)
        meta = validator_for(dialect.META_SCHEMA, default=dialect)
        checker = meta(dialect.META_SCHEMA, format_checker=_SCHEMA_FORMATS)
        for error in checker.iter_errors(schema.document):
            raise SchemaInvalid(f"not a valid JSON Schema: {error.message[:300]}")
        return schema

    @cached_property
    def document(self) -> Any:
        """The schema as JSON values (do not mutate it: it is shared)."""
        return json.loads(self.text)

    @property
    def properties(self) -> frozenset[str]:
        """The names under a top-level ``properties``: the arguments an object schema names."""
        document = self.document
        properties = document.get("properties") if isinstance(document, dict) else None
        return frozenset(properties) if isinstance(properties, dict) else frozenset()

    def first_problem(self, instance: Any) -> str | None:
        """``None`` if ``instance`` fits, else the first problem as ``/json/pointer: message``."""
        for error in validator(self).iter_errors(instance):
            where = "".join(f"/{part}" for part in error.absolute_path)
            return f"{where or '/'}: {error.message[:300]}"
        return None


def _validator_class(schema: JsonSchema) -> type[Validator]:
    document = schema.document
    if isinstance(document, dict) and "$schema" in document:
        return validator_for(document, default=Draft202012Validator)
    return Draft202012Validator


@lru_cache(maxsize=1024)
def _ecma(pattern: str) -> regress.Regex | None:
    try:
        return regress.Regex(pattern, flags="u")
    except regress.RegressError:
        return None


def _ecma_pattern(
    validator: Validator, pattern: Any, instance: Any, schema: Any
) -> Iterator[ValidationError]:
    if not validator.is_type(instance, "string") or not isinstance(pattern, str):
        return
    compiled = _ecma(pattern)
    if compiled is None:
        yield ValidationError(f"{pattern!r} is not an ECMA-262 regular expression")
    elif compiled.find(instance) is None:
        yield ValidationError(f"{instance[:80]!r} does not match {pattern!r}")


@lru_cache(maxsize=16)
def _with_ecma_patterns(dialect: type[Validator]) -> type[Validator]:
    extended: type[Validator] = extend(dialect, {"pattern": _ecma_pattern})  # type: ignore[no-untyped-call]
    return extended


def _is_ecma(pattern: object) -> bool:
    return not isinstance(pattern, str) or _ecma(pattern) is not None


_SCHEMA_FORMATS = FormatChecker()
_SCHEMA_FORMATS.checks("regex")(_is_ecma)
"""Checks a schema's own ``pattern`` values as ECMA-262 when the schema is taken."""


@lru_cache(maxsize=1024)
def validator(schema: JsonSchema) -> Validator:
    """The compiled validator of ``schema`` (compiling costs far more than validating: built once)."""
    return _with_ecma_patterns(_validator_class(schema))(schema.document)
