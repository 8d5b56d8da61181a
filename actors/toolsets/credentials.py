"""Static secrets of toolset servers, read where the call is made and nowhere written down.

A ``bearer`` server's secret (or an OAuth client's secret) comes from an environment variable or a file of
the calling process; a bearer secret is read on each request (a rotated file takes effect at once), a client
secret when the connection to its server is made. Only its source is ever named in an error; the value
is handed to the HTTP client's auth flow and nothing else.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from actors.toolsets.config import BearerAuth, OAuthClientCredentials
from dag.errors import RaydagError

if (
    TYPE_CHECKING
):  # the MCP SDK's OAuth client is loaded where a flow is built, not by reading a toolsets file
    import httpx2
    from mcp.shared.auth import OAuthClientInformationFull, OAuthToken


class CredentialUnavailable(RaydagError):
    """A server's declared secret cannot be read in this process; the operator must provide it."""


def read_secret(server: str, auth: BearerAuth | OAuthClientCredentials) -> str:
    """The secret ``auth`` names, stripped of surrounding whitespace."""
    if auth.env is not None:
        value = os.environ.get(auth.env, "").strip()
        if not value:
            raise CredentialUnavailable(f"server {server!r}: environment variable {auth.env} is not set")
        return value
    assert auth.file is not None
    try:
        value = auth.file.read_text(encoding="utf-8").strip()
    except OSError as exc:
        reason = exc.strerror or type(exc).__name__
        raise CredentialUnavailable(
            f"server {server!r}: secret file {auth.file} cannot be read ({reason})"
        ) from None
    if not value:
        raise CredentialUnavailable(f"server {server!r}: secret file {auth.file} is empty")
    return value


class MemoryTokens:
    """The SDK's token storage, in memory: an access token lives as long as the connection that got it."""

    def __init__(self) -> None:
        self._tokens: OAuthToken | None = None
        self._client: OAuthClientInformationFull | None = None

    async def get_tokens(self) -> OAuthToken | None:
        return self._tokens

    async def set_tokens(self, tokens: OAuthToken) -> None:
        self._tokens = tokens

    async def get_client_info(self) -> OAuthClientInformationFull | None:
        return self._client

    async def set_client_info(self, client_info: OAuthClientInformationFull) -> None:
        self._client = client_info

    def secrets(self) -> tuple[str, ...]:
        """The tokens held now, for redaction of what the server sends back."""
        tokens = self._tokens
        if tokens is None:
            return ()
        return tuple(token for token in (tokens.access_token, tokens.refresh_token) if token)


def client_credentials_flow(
    server: str, url: str, auth: OAuthClientCredentials, storage: MemoryTokens
) -> httpx2.Auth:
    """The SDK's client-credentials provider for ``url``, its client secret read now, its tokens kept in
    ``storage``."""
    from mcp.client.auth.extensions.client_credentials import ClientCredentialsOAuthProvider

    return ClientCredentialsOAuthProvider(
        server_url=url,
        storage=storage,
        client_id=auth.client_id,
        client_secret=read_secret(server, auth),
        token_endpoint_auth_method=auth.token_endpoint_auth,
        scope=auth.scope,
        issuer=auth.issuer,
    )
