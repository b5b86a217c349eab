DROP TRIGGER audit_log_notify ON mailroom.audit_log;
