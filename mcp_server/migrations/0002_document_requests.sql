-- caseops' writes: a request to the claimant for the documents a case is missing. A draft is reversible (it
-- is only a proposal inside caseops); sending puts the request in the outbox, from which caseops' mailer
-- delivers it: that cannot be undone. Both are unique on the idempotency key the caller gives, so a repeated
-- call with one key answers the first call's outcome instead of acting twice.
CREATE TABLE document_request_drafts (
    tenant_id               text NOT NULL REFERENCES tenants,
    draft_id                text NOT NULL,
    case_id                 text NOT NULL,
    missing_document_codes  text[] NOT NULL,
    message                 text NOT NULL,
    idempotency_key         text NOT NULL,
    created_at              timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant_id, draft_id),
    UNIQUE (tenant_id, idempotency_key)
);

CREATE TABLE document_request_outbox (
    tenant_id               text NOT NULL REFERENCES tenants,
    request_id              text NOT NULL,
    case_id                 text NOT NULL,
    draft_id                text NOT NULL,
    missing_document_codes  text[] NOT NULL,
    idempotency_key         text NOT NULL,
    sent_at                 timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant_id, request_id),
    UNIQUE (tenant_id, idempotency_key),
    FOREIGN KEY (tenant_id, draft_id) REFERENCES document_request_drafts
);
