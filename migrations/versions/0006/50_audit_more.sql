-- The console's audit screen is kept live like every other: a new audit row notifies
-- `mailroom_changes` (statement-level, with only the table's name, as every table does).
CREATE TRIGGER audit_log_notify AFTER INSERT ON mailroom.audit_log
    FOR EACH STATEMENT EXECUTE FUNCTION mailroom.notify_change();
