"""Task tokens: HS256 pinned, exact issuer and audience, bounded clock skew, every claim required."""

from __future__ import annotations

import base64
import json
import time
from typing import Any

import jwt
import pytest

from dag.tokens import (
    LEEWAY_SECONDS,
    LIFETIME_SECONDS,
    RESOURCE_READER,
    TaskTokens,
    TokenInvalid,
)

KEY = b"k" * 32
AUDIENCE = "http://mcp.test/mcp"
TOKENS = TaskTokens(key=KEY, audience=AUDIENCE)
CLAIM_NAMES = [
    "iss",
    "aud",
    "sub",
    "tenant_id",
    "task_id",
    "resource",
    "tool",
    "scope",
    "iat",
    "nbf",
    "exp",
    "jti",
]


def mint(tokens: TaskTokens = TOKENS, *, now: int | None = None) -> str:
    return tokens.mint(
        subject="alice",
        tenant_id="tenant-demo",
        task_id="run-1/docs/1",
        resource={"case_id": "C-102"},
        tool="caseops_list_unclassified_documents",
        scopes={"documents:read", "cases:read"},
        now=now,
    )


def valid_claims() -> dict[str, Any]:
    issued = int(time.time())
    return {
        "iss": "raydag",
        "aud": AUDIENCE,
        "sub": "alice",
        "tenant_id": "tenant-demo",
        "task_id": "run-1/docs/1",
        "resource": {"case_id": "C-102"},
        "tool": "caseops_get_case_snapshot",
        "scope": "cases:read",
        "iat": issued,
        "nbf": issued,
        "exp": issued + 60,
        "jti": "0123456789abcdef0123456789abcdef",
    }


def b64(data: dict[str, Any]) -> str:
    return base64.urlsafe_b64encode(json.dumps(data).encode()).rstrip(b"=").decode()


def test_a_minted_token_verifies_with_every_claim() -> None:
    before = int(time.time())
    claims = TOKENS.verify(mint())
    after = int(time.time())
    assert claims.iss == "raydag"
    assert claims.aud == AUDIENCE
    assert claims.sub == "alice"
    assert claims.tenant_id == "tenant-demo"
    assert claims.task_id == "run-1/docs/1"
    assert claims.resource == {"case_id": "C-102"}
    assert claims.tool == "caseops_list_unclassified_documents"
    assert claims.scope == "cases:read documents:read"  # sorted, space-separated
    assert claims.scopes == frozenset({"cases:read", "documents:read"})
    assert before <= claims.iat <= after
    assert claims.nbf == claims.iat
    assert claims.exp == claims.iat + LIFETIME_SECONDS
    assert len(claims.jti) == 32
    int(claims.jti, 16)


def test_every_token_has_its_own_jti() -> None:
    assert TOKENS.verify(mint()).jti != TOKENS.verify(mint()).jti


def test_a_token_minted_with_another_key_is_refused() -> None:
    other = TaskTokens(key=b"x" * 32, audience=AUDIENCE)
    with pytest.raises(TokenInvalid, match="Signature verification failed"):
        TOKENS.verify(mint(other))


def test_a_token_for_another_audience_is_refused() -> None:
    other = TaskTokens(key=KEY, audience="http://other.test/mcp")
    with pytest.raises(TokenInvalid, match=r"(?i)audience"):
        TOKENS.verify(mint(other))


def test_an_audience_list_containing_ours_is_refused() -> None:
    token = jwt.encode({**valid_claims(), "aud": [AUDIENCE, "http://other.test/mcp"]}, KEY, algorithm="HS256")
    with pytest.raises(TokenInvalid):
        TOKENS.verify(token)


def test_a_token_from_another_issuer_is_refused() -> None:
    other = TaskTokens(key=KEY, audience=AUDIENCE, issuer="someone-else")
    with pytest.raises(TokenInvalid, match="issuer"):
        TOKENS.verify(mint(other))


def test_a_token_expired_beyond_the_leeway_is_refused() -> None:
    issued = int(time.time()) - LIFETIME_SECONDS - LEEWAY_SECONDS - 3
    with pytest.raises(TokenInvalid, match="expired"):
        TOKENS.verify(mint(now=issued))


def test_a_token_expired_within_the_leeway_is_accepted() -> None:
    issued = int(time.time()) - LIFETIME_SECONDS - (LEEWAY_SECONDS - 3)
    claims = TOKENS.verify(mint(now=issued))
    assert claims.exp < time.time()


def test_a_token_not_yet_valid_beyond_the_leeway_is_refused() -> None:
    issued = int(time.time()) + LEEWAY_SECONDS + 5
    with pytest.raises(TokenInvalid, match="not yet valid"):
        TOKENS.verify(mint(now=issued))


def test_a_token_not_yet_valid_within_the_leeway_is_accepted() -> None:
    issued = int(time.time()) + LEEWAY_SECONDS - 3
    claims = TOKENS.verify(mint(now=issued))
    assert claims.nbf > time.time()


def test_an_unsigned_alg_none_token_is_refused() -> None:
    token = f"{b64({'alg': 'none', 'typ': 'JWT'})}.{b64(valid_claims())}."
    with pytest.raises(TokenInvalid):
        TOKENS.verify(token)


@pytest.mark.filterwarnings("ignore::jwt.warnings.InsecureKeyLengthWarning")  # chosen: the key is HS256-sized
def test_an_hs512_token_signed_with_the_same_key_is_refused() -> None:
    token = jwt.encode(valid_claims(), KEY, algorithm="HS512")
    assert jwt.decode(token, KEY, algorithms=["HS512"], audience=AUDIENCE)["resource"] == {"case_id": "C-102"}
    with pytest.raises(TokenInvalid, match="alg value is not allowed"):
        TOKENS.verify(token)


def test_a_hand_crafted_hs256_token_with_every_claim_is_accepted() -> None:
    # The control for the missing-claim cases below: only the removed claim can make them fail.
    claims = TOKENS.verify(jwt.encode(valid_claims(), KEY, algorithm="HS256"))
    assert claims.task_id == "run-1/docs/1"


@pytest.mark.parametrize("claim", CLAIM_NAMES)
def test_a_token_missing_a_required_claim_is_refused(claim: str) -> None:
    claims = valid_claims()
    del claims[claim]
    with pytest.raises(TokenInvalid):
        TOKENS.verify(jwt.encode(claims, KEY, algorithm="HS256"))


@pytest.mark.parametrize(
    ("claim", "value"),
    [
        ("tenant_id", 7),
        ("scope", ["cases:read"]),
        ("resource", None),
        ("resource", "C-102"),
        ("resource", {"case_id": 7}),
        ("tool", ["a", "b"]),
    ],
)
def test_a_signed_token_whose_claims_have_the_wrong_type_is_refused_as_invalid(
    claim: str, value: Any
) -> None:
    # A malformed token must be a TokenInvalid (a 401 at the server), not an unexpected exception.
    token = jwt.encode({**valid_claims(), claim: value}, KEY, algorithm="HS256")
    with pytest.raises(TokenInvalid):
        TOKENS.verify(token)


@pytest.mark.parametrize("garbage", ["", "not-a-token", "a.b.c", f"{b64({'alg': 'HS256'})}.e30.AAAA"])
def test_garbage_is_refused_as_invalid(garbage: str) -> None:
    with pytest.raises(TokenInvalid):
        TOKENS.verify(garbage)


def test_a_key_shorter_than_32_bytes_is_refused() -> None:
    with pytest.raises(ValueError, match="32 bytes"):
        TaskTokens(key=b"k" * 31, audience=AUDIENCE)
    assert TaskTokens(key=b"k" * 32, audience=AUDIENCE).key == b"k" * 32


def test_a_token_living_longer_than_the_lifetime_is_refused() -> None:
    token = jwt.encode(
        {**valid_claims(), "exp": valid_claims()["iat"] + LIFETIME_SECONDS + 1}, KEY, algorithm="HS256"
    )
    with pytest.raises(TokenInvalid, match="lives longer than 60 s"):
        TOKENS.verify(token)


def test_an_oversized_jti_is_refused() -> None:
    token = jwt.encode({**valid_claims(), "jti": "j" * 129}, KEY, algorithm="HS256")
    with pytest.raises(TokenInvalid, match="malformed claim"):
        TOKENS.verify(token)


def test_a_reader_token_names_resources_read_as_its_tool() -> None:
    token = TOKENS.mint(
        subject="auditor",
        tenant_id="tenant-demo",
        task_id="audit",
        resource={"case_id": "C-102"},
        tool=RESOURCE_READER,
        scopes={"cases:read", "policies:read"},
    )
    claims = TOKENS.verify(token)
    assert (claims.tool, claims.scopes) == ("resources/read", frozenset({"cases:read", "policies:read"}))
