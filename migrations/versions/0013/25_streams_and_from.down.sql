DO $$
BEGIN
    IF EXISTS (SELECT FROM mailroom.email_queue WHERE from_email IS NOT NULL AND status IN ('pending', 'unrendered', 'assigned')) THEN
        RAISE EXCEPTION 'unsent emails have a From of their own, which revision 0012 would send with the account''s: wait for them or cancel them first'
            USING ERRCODE = 'object_in_use';
    END IF;
END $$;
DROP FUNCTION mailroom.from_refusals(text[], text[]);
DROP FUNCTION mailroom.sender_from_domains(text[], text);
DROP INDEX mailroom.email_queue_claim_idx;
CREATE INDEX email_queue_claim_idx ON mailroom.email_queue (priority DESC, scheduled_for, id) WHERE status = 'pending';
ALTER TABLE mailroom.email_queue DROP COLUMN stream, DROP COLUMN from_email, DROP COLUMN from_name;
ALTER TABLE mailroom.sender_accounts DROP COLUMN streams, DROP COLUMN from_domains;
DROP FUNCTION mailroom.all_match(text[], text);
