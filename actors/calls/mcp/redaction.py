"""Secrets a server was sent, taken out of whatever it sends back before raydag records, logs or shows it.

A server may repeat what it received — ``denied: you sent Authorization: Bearer …`` — in an error's text, a
code, an output or a line of its stderr. Each occurrence of a secret is replaced by ``[redacted]`` in the
node's error (before it is cut to length, so no part of one survives the cut), in the output (strings and
keys, before the output is checked against its schema) and in every stderr line, so that none reaches an
event, the store, a report, a span or a log.

The secrets are those of the call and its server: the task token minted for the call, a ``bearer`` secret,
an OAuth client secret and the access token it got, and the values a stdio server's ``env`` copies with
``from_env`` (unless declared ``secret: false``). Values shorter than ``MIN_SECRET`` are not looked for:
replacing every ``1`` or ``/tmp`` in an output would destroy it, and a credential that short protects
nothing anyway.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable
from typing import Any

from actors.toolsets.config import BearerAuth, FromEnv, HttpServer, OAuthClientCredentials, StdioServer
from actors.toolsets.credentials import CredentialUnavailable, read_secret
from dag.events import NodeError

REDACTED = "[redacted]"
MIN_SECRET = 8
MAX_CODE = 100
MAX_MESSAGE = 500


class Redactor:
    """Replaces each of ``secrets`` wherever it occurs."""

    def __init__(self, secrets: Iterable[str | None]) -> None:
        found = {secret for secret in secrets if secret is not None and len(secret) >= MIN_SECRET}
        self._secrets = sorted(found, key=len, reverse=True)  # a secret holding another goes first
        self._encoded = [json.dumps(secret, ensure_ascii=False)[1:-1] for secret in self._secrets]

    def __bool__(self) -> bool:
        return bool(self._secrets)

    def text(self, text: str) -> str:
        for secret in self._secrets:
            if secret in text:
                text = text.replace(secret, REDACTED)
        return text

    def error(self, error: NodeError) -> NodeError:
        """``error`` with secrets replaced, then its code and message cut to length."""
        code, message = self.text(error.code)[:MAX_CODE], self.text(error.message)[:MAX_MESSAGE]
        if (code, message) == (error.code, error.message):
            return error
        return NodeError(kind=error.kind, code=code, message=message)

    def value(self, value: Any, dumped: str | None = None) -> Any:
        """``value`` (JSON, nested no deeper than a run records) with secrets replaced in its strings and keys;
        ``value`` itself when it holds none, which its JSON text (``json.dumps`` with ``ensure_ascii=False``,
        ``dumped`` if the caller has it) tells without walking it in Python."""
        if not self._secrets:
            return value
        if dumped is None:
            dumped = json.dumps(value, ensure_ascii=False)
        if not any(encoded in dumped for encoded in self._encoded):
            return value
        return self._walk(value)

    def _walk(self, value: Any) -> Any:
        match value:
            case str():
                return self.text(value)
            case dict():
                return {self.text(str(key)): self._walk(item) for key, item in value.items()}
            case list():
                return [self._walk(item) for item in value]
            case _:
                return value


def server_secrets(spec: HttpServer | StdioServer) -> list[str]:
    """The secrets raydag sends ``spec``'s server of its own accord (a call's task token is the call's): its
    bearer or OAuth client secret as readable now, and the ``from_env`` values of its environment."""
    if isinstance(spec, StdioServer):
        return [
            value
            for setting in spec.env.values()
            if isinstance(setting, FromEnv)
            and setting.secret
            and (value := os.environ.get(setting.from_env)) is not None
        ]
    if isinstance(spec.auth, BearerAuth | OAuthClientCredentials):
        try:
            return [read_secret(spec.name, spec.auth)]
        except CredentialUnavailable:
            return []
    return []
