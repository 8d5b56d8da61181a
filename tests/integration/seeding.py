"""Cases of a test's own, written in the seed file format (README "Seed files") and loaded the way
``raydag seed`` loads a file, into the session database beside the demo fixture.

A case no other test touches lets a test count the tool server's executions for that case alone.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from typing import Any

import asyncpg

from mcp_server.seed import SeedData, load_seed

TENANT = "tenant-demo"
ACCIDENT_CERTIFICATE_LABEL = "道路交通事故認定書"
"""A label the demo fixture's alias rules resolve (to ``ACCIDENT_CERTIFICATE``)."""


def unique_case_id(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def case_file(case_id: str, labels: Sequence[str]) -> dict[str, Any]:
    """A seed file with one waiting case under the demo policy, one unclassified source document per label."""
    documents = [
        {
            "tenant_id": TENANT,
            "document_id": f"DOC-{case_id}-{number:03d}",
            "case_id": case_id,
            "source_label": label,
            "canonical_code": None,
            "source_ref": f"evidence://{case_id}/DOC-{case_id}-{number:03d}@1",
            "captured_at": "2026-11-02T10:05:00+00:00",
        }
        for number, label in enumerate(labels, start=1)
    ]
    case = {
        "tenant_id": TENANT,
        "case_id": case_id,
        "version": 1,
        "status": "waiting_for_documents",
        "policy_id": "motor-claim-standard",
        "policy_version": "2026.1",
        "submitted_at": "2026-11-02T10:00:00+00:00",
        "received_document_codes": ["LOSS_STATEMENT", "IDENTITY_DOCUMENT"],
    }
    return {"cases": [case], "source_documents": documents}


async def seed(dsn: str, file: dict[str, Any]) -> None:
    """Load ``file`` as ``raydag seed FILE`` does: validated by the seed format, upserted in one transaction."""
    data = SeedData.model_validate(file)
    connection = await asyncpg.connect(dsn)
    try:
        await load_seed(connection, data)
    finally:
        await connection.close()
