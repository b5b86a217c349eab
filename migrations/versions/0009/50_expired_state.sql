-- Why a failed email failed, recorded as a state. The worker used to tell an email the queue lifetime
-- ended from every other failed one by comparing its last_error with one sentence, so rewording that
-- sentence (or an operator's note in last_error) would have moved email between retention's ages.
-- failure_kind says it as a value the engine writes where it fails the email; last_error stays the
-- human reason. NULL on a failed email: failed by something other than the engine (a template that did
-- not render, an operator). It is cleared whenever the email leaves the failed state (an operator's
-- retry), so it never describes an email that is not failed.

ALTER TABLE mailroom.email_queue ADD COLUMN failure_kind text;

-- Existing email: expired is what carried the queue lifetime's sentence; an attempt's failure is what
-- the engine recorded with an outcome in error_details.
UPDATE mailroom.email_queue SET failure_kind = 'expired'
WHERE status = 'failed'
  AND last_error = 'expired: in the queue longer than the queue lifetime (MAILROOM_QUEUE_LIFETIME_SECONDS)';
UPDATE mailroom.email_queue SET failure_kind = 'attempt'
WHERE status = 'failed' AND failure_kind IS NULL AND error_details ? 'outcome';

ALTER TABLE mailroom.email_queue
    ADD CONSTRAINT email_queue_failure_kind_known CHECK (failure_kind IN ('expired', 'attempt')),
    ADD CONSTRAINT email_queue_failure_kind_only_when_failed CHECK (failure_kind IS NULL OR status = 'failed');

COMMENT ON COLUMN mailroom.email_queue.failure_kind IS 'Why a failed email failed, written by the engine: expired (in the queue longer than the queue lifetime, MAILROOM_QUEUE_LIFETIME_SECONDS; retention archives it after MAILROOM_ARCHIVE_EXPIRED_AFTER_DAYS), attempt (an attempt failed it: a permanent refusal, a bad mailbox, retries used up, or an error of ours while sending). NULL unless failed, and NULL for email failed outside the engine (a template that did not render).';

CREATE FUNCTION mailroom.email_queue_clear_failure_kind() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
BEGIN
    NEW.failure_kind := NULL;
    RETURN NEW;
END $$;

COMMENT ON FUNCTION mailroom.email_queue_clear_failure_kind() IS 'Forget why an email failed once it is no longer failed (see email_queue.failure_kind).';

-- Only for the rare row that leaves the failed state: the WHEN test costs the hot path (claims, sends)
-- no function call.
CREATE TRIGGER email_queue_clear_failure_kind BEFORE UPDATE OF status ON mailroom.email_queue
    FOR EACH ROW WHEN (NEW.failure_kind IS NOT NULL AND NEW.status <> 'failed')
    EXECUTE FUNCTION mailroom.email_queue_clear_failure_kind();

COMMENT ON TRIGGER email_queue_clear_failure_kind ON mailroom.email_queue IS 'An email leaving the failed state (an operator''s retry or cancel) loses its failure_kind.';
