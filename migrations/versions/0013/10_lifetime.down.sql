DO $$
BEGIN
    IF EXISTS (SELECT FROM mailroom.email_queue WHERE expires_at IS NOT NULL AND status IN ('pending', 'unrendered')) THEN
        RAISE EXCEPTION 'unsent emails have a lifetime of their own (expires_at), which revision 0012 would forget and send them late: wait for them or cancel them first'
            USING ERRCODE = 'object_in_use';
    END IF;
END $$;
DROP FUNCTION mailroom.cancel_my_email(bigint, text);
DROP INDEX mailroom.email_queue_expires_idx;
ALTER TABLE mailroom.email_queue DROP COLUMN expires_at;
