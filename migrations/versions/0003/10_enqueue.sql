-- Bulk enqueue (COPY) leaves scheduled_for out when an email has none, so the column default (now(),
-- the database's clock) fills it. The insert trigger then has nothing to do for a pending email with
-- a time, and a WHEN clause skips it without entering PL/pgSQL (~2.5 µs of server time per row).
-- An explicit NULL scheduled_for is still filled, and a status other than pending still refused.
DROP TRIGGER email_queue_before_insert ON mailroom.email_queue;
CREATE TRIGGER email_queue_before_insert BEFORE INSERT ON mailroom.email_queue
    FOR EACH ROW WHEN (NEW.scheduled_for IS NULL OR NEW.status <> 'pending')
    EXECUTE FUNCTION mailroom.email_queue_before_insert();
