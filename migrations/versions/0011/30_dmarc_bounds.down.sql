DROP TABLE mailroom.dmarc_refusals;
DROP TRIGGER dmarc_reports_count_truncates ON mailroom.dmarc_reports;
DROP TRIGGER dmarc_reports_count_deletes ON mailroom.dmarc_reports;
DROP TRIGGER dmarc_reports_count_inserts ON mailroom.dmarc_reports;
DROP FUNCTION mailroom.dmarc_reports_count();
DROP TABLE mailroom.dmarc_size;
DROP INDEX mailroom.dmarc_reports_org_received_idx;
ALTER TABLE mailroom.dmarc_reports
    DROP CONSTRAINT dmarc_reports_disputed_when_disputes,
    DROP COLUMN disputed_at,
    DROP COLUMN disputes,
    DROP COLUMN digest,
    DROP COLUMN records;
