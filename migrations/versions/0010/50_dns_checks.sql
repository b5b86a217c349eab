-- What `mailroom senders check` and the worker's maintenance found in DNS for each sender account: SPF,
-- DKIM, DMARC, MX of the return-path domain and TLS at the relay. Only the latest check of a sender is
-- kept (a check replaces its rows in one transaction): an operator asks "does its DNS let mail land now",
-- and the history of a record is DNS's own business. The rows hold no secret: text from DNS is cut to
-- 500 characters and stripped of control characters before it is stored.

CREATE TABLE mailroom.sender_dns_findings (
    id bigint GENERATED ALWAYS AS IDENTITY CONSTRAINT sender_dns_findings_pkey PRIMARY KEY,
    sender_account_id bigint NOT NULL
        CONSTRAINT sender_dns_findings_sender_exists REFERENCES mailroom.sender_accounts (id) ON DELETE CASCADE,
    checked_at timestamptz NOT NULL DEFAULT now(),
    domain text NOT NULL,
    severity text NOT NULL,
    code text NOT NULL,
    detail text NOT NULL,
    CONSTRAINT sender_dns_findings_severity_known CHECK (severity IN ('ok', 'info', 'warning', 'problem')),
    CONSTRAINT sender_dns_findings_code_format CHECK (code ~ '^[a-z][a-z0-9_]{0,62}$'),
    CONSTRAINT sender_dns_findings_domain_length CHECK (length(domain) <= 253),
    CONSTRAINT sender_dns_findings_detail_printable CHECK (length(detail) <= 500 AND detail !~ '[\x00-\x1f\x7f]')
);

CREATE INDEX sender_dns_findings_sender ON mailroom.sender_dns_findings (sender_account_id);

COMMENT ON TABLE mailroom.sender_dns_findings IS 'The latest DNS check of each sender account (mailroom senders check, and the worker''s maintenance): one row per finding, including what passed; replaced whole by the next check of that sender.';
COMMENT ON COLUMN mailroom.sender_dns_findings.checked_at IS 'When the check that found it ran (every row of one check has the same time).';
COMMENT ON COLUMN mailroom.sender_dns_findings.domain IS 'The name the finding is about: the From domain, the return-path (bounce) domain, the DKIM selector''s name, or the relay host.';
COMMENT ON COLUMN mailroom.sender_dns_findings.severity IS 'ok (passed), info (worth knowing), warning (mail may land in spam or be refused: mailroom health warns), problem (DKIM does not verify: mailroom health fails).';
COMMENT ON COLUMN mailroom.sender_dns_findings.code IS 'What was found, as a stable word (spf_missing, dkim_mismatch, dmarc_policy_none, mx_missing, relay_no_tls, dns_unreachable, ...); the documentation lists each with what to publish.';
COMMENT ON COLUMN mailroom.sender_dns_findings.detail IS 'The finding said for people, with the record found where it helps.';
