DO $$
BEGIN
    IF EXISTS (SELECT FROM mailroom.email_attachments) THEN
        RAISE EXCEPTION 'emails carry attachments, which revision 0012 cannot hold: archive or delete them first'
            USING ERRCODE = 'object_in_use';
    END IF;
END $$;
CREATE OR REPLACE FUNCTION mailroom.secret_columns() RETURNS TABLE(table_name name, column_name name)
    LANGUAGE sql IMMUTABLE
    AS $$
    VALUES ('sender_accounts'::name, 'smtp_password_encrypted'::name),
           ('sender_accounts', 'dkim_private_key_encrypted'),
           ('sender_accounts', 'oauth_client_secret_encrypted'),
           ('sender_accounts', 'oauth_refresh_token_encrypted'),
           ('tokens', 'secret'), ('tokens', 'secret_hash'), ('tokens', 'code'),
           ('email_queue', 'text_body'), ('email_queue', 'html_body'), ('email_queue', 'template_data'),
           ('email_queue', 'headers'), ('email_queue', 'tracking_token'), ('email_queue', 'unsubscribe_token'),
           -- a Message-ID authenticates reports about its recipient (worker.core.recipient_tokens)
           ('email_queue', 'message_id'), ('sent_journal', 'message_id'),
           ('archived_emails', 'unsubscribe_token'),
           ('tracked_links', 'token'), ('tracked_links', 'url'),
           ('click_events', 'link_token'), ('click_events', 'url'),
           ('bounce_quarantine', 'raw'),
           ('inbox', 'payload')
$$;
DROP FUNCTION mailroom.store_attachments(bigint[], integer[], text[], text[], text[], integer[], bytea[]);
DROP TRIGGER email_attachments_drop_unused ON mailroom.email_attachments;
DROP FUNCTION mailroom.email_attachments_after_delete();
DROP FUNCTION mailroom.drop_unused_attachments(bytea[]);
ALTER TABLE mailroom.email_queue DROP CONSTRAINT email_queue_attachments;
ALTER TABLE mailroom.email_queue DROP COLUMN attachments;
DROP TABLE mailroom.email_attachments;
DROP TABLE mailroom.attachment_contents;
