-- Columns no read-only role reads: add a webhook endpoint's URL (a receiver's URL is often its own secret)
-- and an event's data (a click's URL, a failure's reason).
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
           ('inbox', 'payload'),
           ('attachment_contents', 'content'), ('email_attachments', 'filename'),
           ('webhook_endpoints', 'url'), ('webhook_events', 'data')
$$;
