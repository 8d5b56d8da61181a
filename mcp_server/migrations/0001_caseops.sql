-- The caseops system of record that the MCP tools read. Every row belongs to a tenant.
--
-- caseops' own schema, recorded in caseops_schema_migrations apart from the runtime's. Until this split it was
-- the runtime's migration 0001 ("domain"): IF NOT EXISTS lets a database created then take this migration as
-- already applied, unchanged.

CREATE TABLE IF NOT EXISTS tenants (
    tenant_id   text PRIMARY KEY,
    name        text NOT NULL
);

CREATE TABLE IF NOT EXISTS policies (
    tenant_id       text NOT NULL REFERENCES tenants,
    policy_id       text NOT NULL,
    version         text NOT NULL,
    effective_from  date NOT NULL,
    PRIMARY KEY (tenant_id, policy_id, version)
);

CREATE TABLE IF NOT EXISTS policy_required_documents (
    tenant_id   text NOT NULL,
    policy_id   text NOT NULL,
    version     text NOT NULL,
    position    integer NOT NULL,
    code        text NOT NULL,
    label       text NOT NULL,
    PRIMARY KEY (tenant_id, policy_id, version, code),
    FOREIGN KEY (tenant_id, policy_id, version) REFERENCES policies ON DELETE CASCADE
);

-- A timestamptz keeps the instant; *_offset_minutes keeps the offset the source wrote it with, so
-- 2026-07-18T09:30:00+08:00 reads back exactly as it was given.
CREATE TABLE IF NOT EXISTS cases (
    tenant_id                   text NOT NULL REFERENCES tenants,
    case_id                     text NOT NULL,
    version                     integer NOT NULL CHECK (version > 0),
    status                      text NOT NULL,
    policy_id                   text NOT NULL,
    policy_version              text NOT NULL,
    submitted_at                timestamptz NOT NULL,
    submitted_at_offset_minutes smallint NOT NULL,
    received_document_codes     text[] NOT NULL DEFAULT '{}',
    PRIMARY KEY (tenant_id, case_id, version),
    FOREIGN KEY (tenant_id, policy_id, policy_version) REFERENCES policies
);

CREATE TABLE IF NOT EXISTS source_documents (
    tenant_id                   text NOT NULL REFERENCES tenants,
    document_id                 text NOT NULL,
    case_id                     text NOT NULL,
    source_label                text NOT NULL,
    canonical_code              text,
    source_ref                  text NOT NULL,
    captured_at                 timestamptz NOT NULL,
    captured_at_offset_minutes  smallint NOT NULL,
    PRIMARY KEY (tenant_id, document_id)
);
CREATE INDEX IF NOT EXISTS source_documents_by_case ON source_documents (tenant_id, case_id);

-- normalized_label is the NFKC-normalized, trimmed label; rule versions compare numerically by segment.
CREATE TABLE IF NOT EXISTS document_aliases (
    tenant_id           text NOT NULL REFERENCES tenants,
    normalized_label    text NOT NULL,
    canonical_code      text NOT NULL,
    rule_version        text NOT NULL CHECK (rule_version ~ '^[0-9]+(\.[0-9]+)*$'),
    confidence          numeric(4, 3) NOT NULL CHECK (confidence BETWEEN 0 AND 1),
    active              boolean NOT NULL,
    PRIMARY KEY (tenant_id, normalized_label, rule_version)
);
