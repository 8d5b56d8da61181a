-- Task-token replay protection: a token's jti is accepted for one tool call only.
-- Every MCP tool-server replica inserts here before it runs a tool; the first insert of a jti wins
-- (INSERT ... ON CONFLICT DO NOTHING). A row matters only while its token could still verify, so
-- expires_at is the token's exp plus the verifier's clock skew, and the servers delete expired rows.
CREATE TABLE task_token_uses (
    jti         text PRIMARY KEY CHECK (length(jti) BETWEEN 1 AND 128),
    tenant_id   text NOT NULL,
    expires_at  timestamptz NOT NULL,
    used_at     timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX task_token_uses_by_expiry ON task_token_uses (expires_at);
