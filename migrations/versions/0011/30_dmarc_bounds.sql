-- DMARC aggregate reports are claims anyone can mail: our From domain is public, so a stranger could
-- store reports "from google.com" about it without end, and take the id a genuine report would come
-- with. The reports are now bounded in all (MAILROOM_DMARC_MAX_RECORDS, by the records they hold) and
-- per reporting organisation and UTC day (MAILROOM_DMARC_ORG_DAILY_MAX); past a bound a report is
-- refused (quarantined when mailed) and counted for health. A report arriving with the organisation
-- and id of a stored one but other content is refused and the stored one marked disputed, never
-- taken silently for the same (worker.producers.dmarc.store).
ALTER TABLE mailroom.dmarc_reports
    ADD COLUMN records integer NOT NULL DEFAULT 0
        CONSTRAINT dmarc_reports_records_not_negative CHECK (records >= 0),
    ADD COLUMN digest bytea CONSTRAINT dmarc_reports_digest_length CHECK (octet_length(digest) = 32),
    ADD COLUMN disputes integer NOT NULL DEFAULT 0
        CONSTRAINT dmarc_reports_disputes_not_negative CHECK (disputes >= 0),
    ADD COLUMN disputed_at timestamptz,
    ADD CONSTRAINT dmarc_reports_disputed_when_disputes CHECK ((disputes = 0) = (disputed_at IS NULL));
UPDATE mailroom.dmarc_reports r
SET records = (SELECT count(*) FROM mailroom.dmarc_records c WHERE c.report = r.id);
COMMENT ON COLUMN mailroom.dmarc_reports.records IS
    'How many records (dmarc_records rows) the report holds; what the bound in all counts';
COMMENT ON COLUMN mailroom.dmarc_reports.digest IS
    'SHA-256 of what the report says (header and records, as stored): the same report again is seen before, one with other content disputes it; NULL for reports stored before it was kept (the next arrival sets it)';
COMMENT ON COLUMN mailroom.dmarc_reports.disputes IS
    'Reports that came later with this organisation and id but other content (refused): one of them is not what it claims';
COMMENT ON COLUMN mailroom.dmarc_reports.disputed_at IS 'When the last disputing report came, NULL when none did';
-- The bound per organisation counts its reports received today.
CREATE INDEX dmarc_reports_org_received_idx ON mailroom.dmarc_reports (org_name, received_at);

-- What the reports hold, kept exact by statement triggers (whoever inserts, deletes or truncates:
-- intake, retention, an operator), so the bound in all is checked for each report, and health reads it, in
-- one row instead of a count over every record.
CREATE TABLE mailroom.dmarc_size (
    one boolean PRIMARY KEY DEFAULT true CONSTRAINT dmarc_size_one_row CHECK (one),
    reports bigint NOT NULL CONSTRAINT dmarc_size_reports_not_negative CHECK (reports >= 0),
    records bigint NOT NULL CONSTRAINT dmarc_size_records_not_negative CHECK (records >= 0)
);
COMMENT ON TABLE mailroom.dmarc_size IS
    'One row: how many DMARC reports are stored and how many records they hold, kept by triggers';
COMMENT ON COLUMN mailroom.dmarc_size.one IS 'Always true: the table holds one row';
COMMENT ON COLUMN mailroom.dmarc_size.reports IS 'Rows of dmarc_reports';
COMMENT ON COLUMN mailroom.dmarc_size.records IS 'The sum of dmarc_reports.records: what MAILROOM_DMARC_MAX_RECORDS bounds';
INSERT INTO mailroom.dmarc_size (reports, records)
SELECT count(*), coalesce(sum(records), 0) FROM mailroom.dmarc_reports;

CREATE FUNCTION mailroom.dmarc_reports_count() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'TRUNCATE' THEN
        UPDATE mailroom.dmarc_size SET reports = 0, records = 0;
    ELSIF TG_OP = 'INSERT' THEN
        UPDATE mailroom.dmarc_size SET reports = reports + c.n, records = records + c.r
        FROM (SELECT count(*) AS n, coalesce(sum(records), 0) AS r FROM new_rows) c;
    ELSE
        UPDATE mailroom.dmarc_size SET reports = reports - c.n, records = records - c.r
        FROM (SELECT count(*) AS n, coalesce(sum(records), 0) AS r FROM old_rows) c;
    END IF;
    RETURN NULL;
END;
$$;
COMMENT ON FUNCTION mailroom.dmarc_reports_count() IS
    'Keeps mailroom.dmarc_size equal to what dmarc_reports holds, for inserts, deletes and truncation';
CREATE TRIGGER dmarc_reports_count_inserts AFTER INSERT ON mailroom.dmarc_reports
    REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION mailroom.dmarc_reports_count();
CREATE TRIGGER dmarc_reports_count_deletes AFTER DELETE ON mailroom.dmarc_reports
    REFERENCING OLD TABLE AS old_rows FOR EACH STATEMENT EXECUTE FUNCTION mailroom.dmarc_reports_count();
CREATE TRIGGER dmarc_reports_count_truncates AFTER TRUNCATE ON mailroom.dmarc_reports
    FOR EACH STATEMENT EXECUTE FUNCTION mailroom.dmarc_reports_count();
COMMENT ON TRIGGER dmarc_reports_count_inserts ON mailroom.dmarc_reports IS
    'Adds the inserted reports and their records to mailroom.dmarc_size (one statement, one update).';
COMMENT ON TRIGGER dmarc_reports_count_deletes ON mailroom.dmarc_reports IS
    'Takes the deleted reports and their records off mailroom.dmarc_size (retention, privacy).';
COMMENT ON TRIGGER dmarc_reports_count_truncates ON mailroom.dmarc_reports IS
    'Sets mailroom.dmarc_size to nothing when the reports are truncated.';

-- Reports refused by a bound or as a dispute, per UTC day and reason: what health warns of. At most
-- three rows a day, whoever sends; maintenance deletes them with the reports' retention.
CREATE TABLE mailroom.dmarc_refusals (
    day date NOT NULL,
    reason text NOT NULL
        CONSTRAINT dmarc_refusals_reason_known CHECK (reason IN ('organisation_rate', 'full', 'disputed')),
    reports integer NOT NULL CONSTRAINT dmarc_refusals_reports_not_negative CHECK (reports >= 0),
    PRIMARY KEY (day, reason)
);
COMMENT ON TABLE mailroom.dmarc_refusals IS
    'DMARC reports refused per UTC day: over their organisation''s daily bound, with the reports full, or disputing a stored one';
COMMENT ON COLUMN mailroom.dmarc_refusals.day IS 'The UTC day the reports were refused';
COMMENT ON COLUMN mailroom.dmarc_refusals.reason IS
    'organisation_rate (past MAILROOM_DMARC_ORG_DAILY_MAX), full (past MAILROOM_DMARC_MAX_RECORDS) or disputed (a stored report''s organisation and id, other content)';
COMMENT ON COLUMN mailroom.dmarc_refusals.reports IS 'How many reports were refused that day for that reason';

-- Roles granted read-only access before this revision see the new columns and tables too.
DO $$
DECLARE
    r record;
BEGIN
    FOR r IN
        SELECT DISTINCT grantee FROM information_schema.column_privileges
        WHERE table_schema = 'mailroom' AND table_name = 'dmarc_reports' AND column_name = 'org_name'
          AND privilege_type = 'SELECT' AND grantee <> current_user
          AND grantee IN (SELECT rolname FROM pg_roles)
    LOOP
        PERFORM mailroom.grant_read_only_role(r.grantee::name);
    END LOOP;
END $$;
