-- Undo 20_suppressions: the application roles' grant as revision 0008 wrote it, no enqueue-time
-- check, no history, no operator's suppressions (they would break the restored kind check).
CREATE OR REPLACE FUNCTION mailroom.grant_app_role(role_name name) RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    EXECUTE format('GRANT USAGE ON SCHEMA mailroom TO %I', role_name);
    EXECUTE format('GRANT EXECUTE ON FUNCTION mailroom.enqueue TO %I', role_name);
    EXECUTE format('GRANT EXECUTE ON FUNCTION mailroom.app_audit TO %I', role_name);
    EXECUTE format('GRANT SELECT ON mailroom.my_emails TO %I', role_name);
END $$;

DROP FUNCTION mailroom.enqueue_outcome(bigint);
DROP VIEW mailroom.suppressions;
DROP TRIGGER email_queue_suppress_listed ON mailroom.email_queue;
DROP FUNCTION mailroom.email_queue_suppress_listed();
DROP FUNCTION mailroom.enqueue_suppression(text, text, text[], text[], text[], boolean);
DROP FUNCTION mailroom.suppression_reason(text, boolean);

DROP TRIGGER unsubscribe_list_history ON mailroom.unsubscribe_list;
DROP TRIGGER bounce_list_history ON mailroom.bounce_list;
DROP FUNCTION mailroom.suppression_lists_history();
DROP TRIGGER bounce_events_history ON mailroom.bounce_events;
DROP FUNCTION mailroom.bounce_events_history();
DROP FUNCTION mailroom.suppression_note(text);
DROP TABLE mailroom.suppression_events;

DELETE FROM mailroom.bounce_list WHERE bounce_type = 'manual';
ALTER TABLE mailroom.bounce_list DROP CONSTRAINT bounce_list_bounce_type_known;
ALTER TABLE mailroom.bounce_list ADD CONSTRAINT bounce_list_bounce_type_known
    CHECK (bounce_type IN ('hard', 'soft', 'complaint'));
COMMENT ON COLUMN mailroom.bounce_list.bounce_type IS
    'hard: the mailbox does not exist; soft: repeated temporary failures; complaint: the recipient reported spam.';
