-- Each recipient of an email with several gets its own copy with its own unsubscribe link
-- (`/u/<token>.<mac>`, worker.core.recipient_tokens); the email's plain token names nobody then. Once
-- retention deletes such an email, the tracker could no longer tell its recipients apart (only its
-- first recipient's address outlives it, in the send log), so its archived row keeps no token: a
-- recipient who strips the mac off their own link can never unsubscribe the first recipient.
-- This trigger fires after email_queue_keep_archived (triggers of one event fire in name order).
CREATE FUNCTION mailroom.email_queue_archive_no_shared_token() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    UPDATE mailroom.archived_emails a SET unsubscribe_token = NULL
    FROM old_rows o
    WHERE a.email_id = o.id AND a.unsubscribe_token IS NOT NULL
      AND (o.to_extra IS NOT NULL OR o.cc IS NOT NULL OR o.bcc IS NOT NULL);
    RETURN NULL;
END;
$$;

CREATE TRIGGER email_queue_keep_archived_one_recipient AFTER DELETE ON mailroom.email_queue
    REFERENCING OLD TABLE AS old_rows FOR EACH STATEMENT
    EXECUTE FUNCTION mailroom.email_queue_archive_no_shared_token();
