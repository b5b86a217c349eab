-- DMARC aggregate reports (RFC 7489 section 7.2, "rua"): what mailbox providers say about mail that
-- used our domains in From, one row per report and one per record (a source address and its
-- results). Taken in by `mailroom dmarc ingest`, the bounce receiver (dmarc@ on a bounce domain) and
-- the bounce mailbox poll (worker.producers.dmarc); a report is stored once per reporting
-- organisation and report id, and only for a domain that is a From domain of a sender account.
CREATE TABLE mailroom.dmarc_reports (
    id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    org_name text NOT NULL CONSTRAINT dmarc_reports_org_name_length CHECK (length(org_name) BETWEEN 1 AND 255),
    report_id text NOT NULL CONSTRAINT dmarc_reports_report_id_length CHECK (length(report_id) BETWEEN 1 AND 255),
    org_email text CONSTRAINT dmarc_reports_org_email_length CHECK (length(org_email) <= 320),
    domain text NOT NULL CONSTRAINT dmarc_reports_domain_length CHECK (length(domain) BETWEEN 1 AND 253),
    begins_at timestamptz NOT NULL,
    ends_at timestamptz NOT NULL,
    policy text NOT NULL CONSTRAINT dmarc_reports_policy_known CHECK (policy IN ('none', 'quarantine', 'reject')),
    subdomain_policy text
        CONSTRAINT dmarc_reports_subdomain_policy_known CHECK (subdomain_policy IN ('none', 'quarantine', 'reject')),
    percent smallint CONSTRAINT dmarc_reports_percent_range CHECK (percent BETWEEN 0 AND 100),
    adkim text CONSTRAINT dmarc_reports_adkim_known CHECK (adkim IN ('r', 's')),
    aspf text CONSTRAINT dmarc_reports_aspf_known CHECK (aspf IN ('r', 's')),
    messages bigint NOT NULL CONSTRAINT dmarc_reports_messages_not_negative CHECK (messages >= 0),
    arrived_by text NOT NULL CONSTRAINT dmarc_reports_arrived_by_known CHECK (arrived_by IN ('cli', 'receiver', 'mailbox')),
    received_at timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT dmarc_reports_range_ordered CHECK (ends_at >= begins_at),
    CONSTRAINT dmarc_reports_one_per_org_and_id UNIQUE (org_name, report_id)
);
COMMENT ON TABLE mailroom.dmarc_reports IS
    'DMARC aggregate reports (RFC 7489 rua) about our sender domains: one row per reporting organisation and report id';
COMMENT ON COLUMN mailroom.dmarc_reports.org_name IS 'The reporting organisation (google.com, Outlook.com, Yahoo), as the report names it';
COMMENT ON COLUMN mailroom.dmarc_reports.report_id IS 'The report''s id, unique per organisation: a report sent again is stored once';
COMMENT ON COLUMN mailroom.dmarc_reports.org_email IS 'The reporting organisation''s contact address';
COMMENT ON COLUMN mailroom.dmarc_reports.domain IS 'The domain whose published policy the report applies (policy_published/domain)';
COMMENT ON COLUMN mailroom.dmarc_reports.begins_at IS 'Start of the period the report covers';
COMMENT ON COLUMN mailroom.dmarc_reports.ends_at IS 'End of the period the report covers';
COMMENT ON COLUMN mailroom.dmarc_reports.policy IS 'The DMARC policy (p=) the reporter found published: none, quarantine or reject';
COMMENT ON COLUMN mailroom.dmarc_reports.subdomain_policy IS 'The subdomain policy (sp=) the reporter found, NULL when the report gives none';
COMMENT ON COLUMN mailroom.dmarc_reports.percent IS 'The pct= the reporter found: the share of failing mail the policy applies to';
COMMENT ON COLUMN mailroom.dmarc_reports.adkim IS 'DKIM alignment mode published: r (relaxed) or s (strict)';
COMMENT ON COLUMN mailroom.dmarc_reports.aspf IS 'SPF alignment mode published: r (relaxed) or s (strict)';
COMMENT ON COLUMN mailroom.dmarc_reports.messages IS 'Messages the report covers: the sum of its records'' counts';
COMMENT ON COLUMN mailroom.dmarc_reports.arrived_by IS 'How the report came in: cli (mailroom dmarc ingest), receiver (SMTP) or mailbox (poll)';
COMMENT ON COLUMN mailroom.dmarc_reports.received_at IS 'When Mailroom stored the report; retention deletes by it';
-- Retention deletes by age; the report and the console read a domain's recent reports.
CREATE INDEX dmarc_reports_received_idx ON mailroom.dmarc_reports (received_at);
CREATE INDEX dmarc_reports_domain_idx ON mailroom.dmarc_reports (domain, ends_at);

CREATE TABLE mailroom.dmarc_records (
    report bigint NOT NULL CONSTRAINT dmarc_records_report_exists REFERENCES mailroom.dmarc_reports (id) ON DELETE CASCADE,
    position integer NOT NULL CONSTRAINT dmarc_records_position_not_negative CHECK (position >= 0),
    source_ip inet NOT NULL,
    messages bigint NOT NULL CONSTRAINT dmarc_records_messages_not_negative CHECK (messages >= 0),
    disposition text NOT NULL CONSTRAINT dmarc_records_disposition_length CHECK (length(disposition) BETWEEN 1 AND 32),
    dkim_aligned boolean NOT NULL,
    spf_aligned boolean NOT NULL,
    header_from text CONSTRAINT dmarc_records_header_from_length CHECK (length(header_from) <= 253),
    envelope_from text CONSTRAINT dmarc_records_envelope_from_length CHECK (length(envelope_from) <= 253),
    auth_results jsonb NOT NULL DEFAULT '{}'::jsonb
        CONSTRAINT dmarc_records_auth_results_object CHECK (jsonb_typeof(auth_results) = 'object'),
    PRIMARY KEY (report, position)
);
COMMENT ON TABLE mailroom.dmarc_records IS
    'The records of a DMARC aggregate report: messages from one source address with the same results';
COMMENT ON COLUMN mailroom.dmarc_records.report IS 'The report (dmarc_reports.id) this record belongs to';
COMMENT ON COLUMN mailroom.dmarc_records.position IS 'The record''s place in its report, from 0';
COMMENT ON COLUMN mailroom.dmarc_records.source_ip IS 'The address the messages came from, as the receiving provider saw it';
COMMENT ON COLUMN mailroom.dmarc_records.messages IS 'How many messages the record counts';
COMMENT ON COLUMN mailroom.dmarc_records.disposition IS 'What the provider did under the policy: none, quarantine or reject';
COMMENT ON COLUMN mailroom.dmarc_records.dkim_aligned IS 'DKIM passed for a domain aligned with the From domain (policy_evaluated/dkim = pass)';
COMMENT ON COLUMN mailroom.dmarc_records.spf_aligned IS 'SPF passed for a domain aligned with the From domain (policy_evaluated/spf = pass)';
COMMENT ON COLUMN mailroom.dmarc_records.header_from IS 'The From domain of the messages';
COMMENT ON COLUMN mailroom.dmarc_records.envelope_from IS 'The envelope (MAIL FROM) domain of the messages, when the report gives it';
COMMENT ON COLUMN mailroom.dmarc_records.auth_results IS
    'The raw DKIM and SPF results: {"dkim": [{domain, selector, result}], "spf": [{domain, scope, result}]}, a few of each';
