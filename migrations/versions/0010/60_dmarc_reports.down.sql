DROP TABLE mailroom.dmarc_records;
DROP TABLE mailroom.dmarc_reports;
