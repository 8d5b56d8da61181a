"""The model planner's final answer over anyone's tools, when the deployment names no answer model of its own."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class Finding(BaseModel):
    """One fact the answer rests on: what it is, and its value as a tool of the run returned it."""

    model_config = ConfigDict(extra="forbid")

    name: str
    value: str


class Answer(BaseModel):
    """What the run found, in a sentence or two, and the findings that support it."""

    model_config = ConfigDict(extra="forbid")

    summary: str
    findings: list[Finding]
