-- Undo 10_enqueue.sql: the insert trigger runs for every row again, as in revision 0001.
DROP TRIGGER email_queue_before_insert ON mailroom.email_queue;
CREATE TRIGGER email_queue_before_insert BEFORE INSERT ON mailroom.email_queue
    FOR EACH ROW EXECUTE FUNCTION mailroom.email_queue_before_insert();
