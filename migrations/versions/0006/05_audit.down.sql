DROP FUNCTION mailroom.audit(text, text, text, bigint, jsonb);
DROP TABLE mailroom.audit_log;
DROP FUNCTION mailroom.audit_log_append_only();
