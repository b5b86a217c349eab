-- A suppression list people can see and manage. The lists stay where they were (bounce_list for
-- bounces, complaints and now an operator's own suppressions; unsubscribe_list for unsubscribes), and
-- three things are added: a history of every event for an address however it arrived, one view of
-- what is suppressed, and the check at enqueue, so an email to a suppressed address is stored
-- `suppressed` at once instead of waiting for a worker's claim (which still checks, for addresses
-- suppressed after the email was enqueued).

-- 1. An operator's suppression (`mailroom suppressions add`, an import): it stops every email to the
-- address, transactional too, like a hard bounce.
ALTER TABLE mailroom.bounce_list DROP CONSTRAINT bounce_list_bounce_type_known;
ALTER TABLE mailroom.bounce_list ADD CONSTRAINT bounce_list_bounce_type_known
    CHECK (bounce_type IN ('hard', 'soft', 'complaint', 'manual'));
COMMENT ON COLUMN mailroom.bounce_list.bounce_type IS
    'hard: the mailbox does not exist; soft: repeated temporary failures; complaint: the recipient reported spam; manual: an operator suppressed it (mailroom suppressions add or import).';

-- 2. The history. One row per event, whatever door it came through: a report (DSN, ARF complaint,
-- provider webhook: one row per bounce_events row), a list change nobody reported (the relay refused
-- the address during the SMTP session, an unsubscribe, an operator, an import, a privacy request)
-- and every lift. Written by triggers on the three tables, so no writer can forget it.
CREATE TABLE mailroom.suppression_events (
    id bigint GENERATED ALWAYS AS IDENTITY,
    occurred_at timestamptz NOT NULL DEFAULT now(),
    address text NOT NULL,
    kind text NOT NULL,
    change text NOT NULL,
    source text NOT NULL,
    status text,
    reason text,
    email_id bigint,
    bounce_event_id bigint,
    sender_account_id bigint,
    campaign_id text,
    actor text NOT NULL DEFAULT session_user,
    CONSTRAINT suppression_events_pkey PRIMARY KEY (id),
    CONSTRAINT suppression_events_address_lowercase CHECK (address = lower(address)),
    CONSTRAINT suppression_events_kind_known
        CHECK (kind IN ('hard', 'soft', 'complaint', 'unsubscribe', 'manual')),
    CONSTRAINT suppression_events_change_known CHECK (change IN ('reported', 'listed', 'lifted')),
    CONSTRAINT suppression_events_bounce_event_exists FOREIGN KEY (bounce_event_id)
        REFERENCES mailroom.bounce_events (id) ON DELETE SET NULL,
    CONSTRAINT suppression_events_sender_account_exists FOREIGN KEY (sender_account_id)
        REFERENCES mailroom.sender_accounts (id) ON DELETE SET NULL
);
CREATE INDEX suppression_events_address_idx ON mailroom.suppression_events (address, id);
CREATE INDEX suppression_events_bounce_event_idx ON mailroom.suppression_events (bounce_event_id)
    WHERE bounce_event_id IS NOT NULL;
COMMENT ON TABLE mailroom.suppression_events IS
    'The history of every address''s suppressions: each report, each listing nobody reported (a refusal during the SMTP session, an unsubscribe, an operator, an import) and each lift; written by triggers on bounce_events, bounce_list and unsubscribe_list.';
COMMENT ON COLUMN mailroom.suppression_events.occurred_at IS 'When the report arrived or the list changed.';
COMMENT ON COLUMN mailroom.suppression_events.address IS 'The address, lowercased.';
COMMENT ON COLUMN mailroom.suppression_events.kind IS 'hard, soft, complaint (bounce_list and reports), unsubscribe (unsubscribe_list) or manual (an operator''s).';
COMMENT ON COLUMN mailroom.suppression_events.change IS 'reported: a DSN, complaint or webhook report (bounce_event_id names it); listed: the address was put on a list, or its listing renewed, without a report; lifted: taken off a list.';
COMMENT ON COLUMN mailroom.suppression_events.source IS 'Where it came from: a report''s source (dsn, arf, plain, webhook, postmark, sendgrid, ses), smtp (the relay refused the address during the session), an unsubscribe''s (one_click, link, mailto, privacy), operator, import or sql (a change made in SQL by hand).';
COMMENT ON COLUMN mailroom.suppression_events.status IS 'The enhanced status code (5.1.1) or SMTP code reported, or the complaint''s Feedback-Type.';
COMMENT ON COLUMN mailroom.suppression_events.reason IS 'The diagnostic, the refusal, or the operator''s reason.';
COMMENT ON COLUMN mailroom.suppression_events.bounce_event_id IS 'The report this row records (change reported).';
COMMENT ON COLUMN mailroom.suppression_events.actor IS 'Who made the change: the operator (OS user, console:user) for the command line and the console, else the database role.';

-- The operator's commands say who and why for the changes they make in a transaction; anything else
-- is recorded with its own reason and the database role.
CREATE FUNCTION mailroom.suppression_note(name text) RETURNS text LANGUAGE sql STABLE AS $$
    SELECT nullif(current_setting('mailroom.suppression_' || name, true), '')
$$;
COMMENT ON FUNCTION mailroom.suppression_note(text) IS
    'The transaction''s mailroom.suppression_source, _actor or _reason setting (set by the operator''s commands), NULL when unset.';

CREATE FUNCTION mailroom.bounce_events_history() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'INSERT' THEN
        INSERT INTO mailroom.suppression_events (occurred_at, address, kind, change, source, status, reason,
                                                 email_id, bounce_event_id, sender_account_id, campaign_id)
        VALUES (NEW.received_at, NEW.recipient, NEW.kind, 'reported', NEW.source, NEW.status, NEW.diagnostic,
                NEW.email_id, NEW.id, NEW.sender_account_id, NEW.campaign_id);
        -- The listing this report causes next in the transaction is this row: not a second one.
        PERFORM set_config('mailroom.suppression_report', NEW.recipient, true);
    ELSIF NEW.recipient IS DISTINCT FROM OLD.recipient THEN
        -- A privacy erasure renames the address: its history follows.
        UPDATE mailroom.suppression_events SET address = NEW.recipient WHERE bounce_event_id = NEW.id;
    END IF;
    RETURN NULL;
END $$;
COMMENT ON FUNCTION mailroom.bounce_events_history() IS
    'Row trigger: each report becomes a suppression_events row; a renamed recipient (privacy erasure) renames its row.';
CREATE TRIGGER bounce_events_history AFTER INSERT OR UPDATE OF recipient ON mailroom.bounce_events
    FOR EACH ROW EXECUTE FUNCTION mailroom.bounce_events_history();
COMMENT ON TRIGGER bounce_events_history ON mailroom.bounce_events IS
    'Records each report in mailroom.suppression_events.';

CREATE FUNCTION mailroom.suppression_lists_history() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    unsubscribe boolean := TG_TABLE_NAME = 'unsubscribe_list';
    row_kind text;
    row_source text;
BEGIN
    IF TG_OP = 'UPDATE' AND NEW.email IS DISTINCT FROM OLD.email THEN
        -- A privacy erasure renames the address: its history follows, no new event.
        UPDATE mailroom.suppression_events SET address = NEW.email WHERE address = OLD.email;
        RETURN NULL;
    END IF;
    IF TG_OP = 'DELETE' THEN
        -- by name through jsonb: this one function serves both tables, and only bounce_list has bounce_type
        row_kind := coalesce(to_jsonb(OLD) ->> 'bounce_type', 'unsubscribe');
        INSERT INTO mailroom.suppression_events (address, kind, change, source, reason, actor)
        VALUES (OLD.email, row_kind, 'lifted', coalesce(mailroom.suppression_note('source'), 'sql'),
                mailroom.suppression_note('reason'), coalesce(mailroom.suppression_note('actor'), session_user));
        RETURN NULL;
    END IF;
    IF unsubscribe THEN
        INSERT INTO mailroom.suppression_events (address, kind, change, source, reason, email_id, campaign_id, actor)
        VALUES (NEW.email, 'unsubscribe', 'listed', coalesce(mailroom.suppression_note('source'), NEW.source),
                coalesce(mailroom.suppression_note('reason'), NEW.reason), NEW.email_id, NEW.campaign_id,
                coalesce(mailroom.suppression_note('actor'), session_user));
        RETURN NULL;
    END IF;
    IF mailroom.suppression_note('report') = NEW.email THEN
        RETURN NULL;  -- the report's own row says it (bounce_events_history)
    END IF;
    -- Without a report and without an operator's note, the worker listed it: the relay refused the
    -- address during the SMTP session (worker.engine.queue_sql.RECORD_BOUNCES).
    row_source := coalesce(mailroom.suppression_note('source'), 'smtp');
    INSERT INTO mailroom.suppression_events (address, kind, change, source, status, reason, sender_account_id,
                                             campaign_id, actor)
    VALUES (NEW.email, NEW.bounce_type, 'listed', row_source,
            coalesce(NEW.enhanced_code, NEW.smtp_code::text),
            coalesce(mailroom.suppression_note('reason'), NEW.reason), NEW.sender_account_id, NEW.campaign_id,
            coalesce(mailroom.suppression_note('actor'), session_user));
    RETURN NULL;
END $$;
COMMENT ON FUNCTION mailroom.suppression_lists_history() IS
    'Row trigger on bounce_list and unsubscribe_list: each listing, renewal and lift becomes a suppression_events row (a report''s listing is its report''s row).';
CREATE TRIGGER bounce_list_history AFTER INSERT OR UPDATE OR DELETE ON mailroom.bounce_list
    FOR EACH ROW EXECUTE FUNCTION mailroom.suppression_lists_history();
COMMENT ON TRIGGER bounce_list_history ON mailroom.bounce_list IS
    'Records each listing, renewal and lift in mailroom.suppression_events.';
CREATE TRIGGER unsubscribe_list_history AFTER INSERT OR UPDATE OR DELETE ON mailroom.unsubscribe_list
    FOR EACH ROW EXECUTE FUNCTION mailroom.suppression_lists_history();
COMMENT ON TRIGGER unsubscribe_list_history ON mailroom.unsubscribe_list IS
    'Records each unsubscribe and lift in mailroom.suppression_events.';
CREATE TRIGGER suppression_events_notify AFTER INSERT OR DELETE OR UPDATE ON mailroom.suppression_events
    FOR EACH STATEMENT EXECUTE FUNCTION mailroom.notify_change();
COMMENT ON TRIGGER suppression_events_notify ON mailroom.suppression_events IS
    'Tells listeners (console, worker) that the table changed: NOTIFY mailroom_changes.';

-- What the lists held before this revision: the reports, the listings without one (refusals during
-- the session), the unsubscribes.
INSERT INTO mailroom.suppression_events (occurred_at, address, kind, change, source, status, reason, email_id,
                                         bounce_event_id, sender_account_id, campaign_id, actor)
SELECT received_at, recipient, kind, 'reported', source, status, diagnostic, email_id, id, sender_account_id,
       campaign_id, session_user
FROM mailroom.bounce_events ORDER BY id;
INSERT INTO mailroom.suppression_events (occurred_at, address, kind, change, source, status, reason,
                                         sender_account_id, campaign_id, actor)
SELECT b.last_bounced_at, b.email, b.bounce_type, 'listed', 'smtp', coalesce(b.enhanced_code, b.smtp_code::text),
       b.reason, b.sender_account_id, b.campaign_id, session_user
FROM mailroom.bounce_list b
WHERE NOT EXISTS (SELECT 1 FROM mailroom.bounce_events e WHERE e.recipient = b.email)
ORDER BY b.last_bounced_at;
INSERT INTO mailroom.suppression_events (occurred_at, address, kind, change, source, reason, email_id,
                                         campaign_id, actor)
SELECT unsubscribed_at, email, 'unsubscribe', 'listed', source, reason, email_id, campaign_id, session_user
FROM mailroom.unsubscribe_list ORDER BY unsubscribed_at;

-- 3. The rule, once: why an email to this address is not sent, or NULL. The claim applies the same
-- rule (worker.engine.queue_sql.CLAIM); a soft bounce under three is a hold there, not a suppression.
CREATE FUNCTION mailroom.suppression_reason(address text, transactional boolean) RETURNS text
LANGUAGE sql STABLE PARALLEL SAFE AS $$
    SELECT coalesce(
        (SELECT CASE WHEN b.bounce_type IN ('hard', 'complaint', 'manual')
                         THEN 'on the bounce list (' || b.bounce_type || ')'
                     WHEN b.bounce_count >= 3 THEN 'on the bounce list (soft, ' || b.bounce_count || ' times)'
                END
         FROM mailroom.bounce_list b WHERE b.email = lower(address)),
        (SELECT 'unsubscribed' FROM mailroom.unsubscribe_list u
         WHERE u.email = lower(address) AND NOT transactional))
$$;
REVOKE EXECUTE ON FUNCTION mailroom.suppression_reason(text, boolean) FROM PUBLIC;
COMMENT ON FUNCTION mailroom.suppression_reason(text, boolean) IS
    'Why email to this address is not sent (hard bounce, complaint, manual, soft three times, or unsubscribed for non-transactional email), NULL when it may be sent.';

-- An email is suppressed when every recipient is (as the claim decides); a pending one only: an
-- unrendered email is checked by the claim after it is rendered.
-- SECURITY DEFINER: the Python API's INSERT ... RETURNING calls it as the role it connects as, which
-- may not read the lists. Not open to every role (it would answer for any address without a trace):
-- roles that write the queue get it below, and a role given INSERT on it later needs it granted.
CREATE FUNCTION mailroom.enqueue_suppression(
    status text, recipient text, to_extra text[], cc text[], bcc text[], transactional boolean
) RETURNS text LANGUAGE sql STABLE PARALLEL SAFE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
    SELECT CASE
        WHEN status <> 'pending' THEN NULL
        WHEN to_extra IS NULL AND cc IS NULL AND bcc IS NULL THEN mailroom.suppression_reason(recipient, transactional)
        WHEN bool_and(mailroom.suppression_reason(a, transactional) IS NOT NULL)
            THEN 'every recipient suppressed; the first: ' || mailroom.suppression_reason(recipient, transactional)
    END
    FROM unnest(ARRAY[recipient] || coalesce(to_extra, '{}') || coalesce(cc, '{}') || coalesce(bcc, '{}')) AS r(a)
$$;
REVOKE EXECUTE ON FUNCTION mailroom.enqueue_suppression(text, text, text[], text[], text[], boolean) FROM PUBLIC;
DO $$
DECLARE
    r record;
BEGIN
    FOR r IN
        SELECT DISTINCT grantee FROM information_schema.role_table_grants
        WHERE table_schema = 'mailroom' AND table_name = 'email_queue' AND privilege_type = 'INSERT'
          AND grantee <> current_user AND grantee IN (SELECT rolname FROM pg_roles)
    LOOP
        EXECUTE format('GRANT EXECUTE ON FUNCTION mailroom.enqueue_suppression(text, text, text[], text[],'
                       ' text[], boolean) TO %I', r.grantee);
    END LOOP;
END $$;
COMMENT ON FUNCTION mailroom.enqueue_suppression(text, text, text[], text[], text[], boolean) IS
    'Why a new email is stored suppressed (every recipient suppressed), NULL when it is queued; the Python API returns it with the id.';

-- Every way in (mailroom.enqueue, the Python API, COPY, an application's own INSERT) goes through
-- this statement trigger; one statement for a whole COPY. SECURITY DEFINER: the inserting role needs
-- no right to read the lists.
CREATE FUNCTION mailroom.email_queue_suppress_listed() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM mailroom.bounce_list) AND NOT EXISTS (SELECT 1 FROM mailroom.unsubscribe_list) THEN
        RETURN NULL;  -- nothing suppressed: nothing to look up
    END IF;
    UPDATE mailroom.email_queue q SET status = 'suppressed', suppression_reason = s.reason
    FROM (SELECT n.id, mailroom.enqueue_suppression(n.status, n.recipient_email, n.to_extra, n.cc, n.bcc,
                                                    n.transactional) AS reason
          FROM new_rows n WHERE n.status = 'pending') s
    WHERE q.id = s.id AND s.reason IS NOT NULL;
    RETURN NULL;
END $$;
COMMENT ON FUNCTION mailroom.email_queue_suppress_listed() IS
    'Statement trigger: a new email whose every recipient is suppressed is stored suppressed at once, with the reason.';
CREATE TRIGGER email_queue_suppress_listed AFTER INSERT ON mailroom.email_queue
    REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION mailroom.email_queue_suppress_listed();
COMMENT ON TRIGGER email_queue_suppress_listed ON mailroom.email_queue IS
    'Stores a new email to a suppressed address suppressed at once (the claim checks again later).';

-- 4. What is suppressed now, one row per address and list, and what it stops.
CREATE VIEW mailroom.suppressions AS
SELECT b.email AS address, b.bounce_type AS kind,
       CASE WHEN b.bounce_type <> 'soft' OR b.bounce_count >= 3 THEN 'all email'
            ELSE 'held a day after each bounce' END AS stops,
       b.reason, coalesce(b.enhanced_code, b.smtp_code::text) AS status, b.bounce_count AS times,
       b.first_bounced_at AS since, b.last_bounced_at AS last_at, b.sender_account_id, b.campaign_id
FROM mailroom.bounce_list b
UNION ALL
SELECT u.email, 'unsubscribe', 'non-transactional email', u.reason, NULL, 1, u.unsubscribed_at,
       u.unsubscribed_at, NULL, u.campaign_id
FROM mailroom.unsubscribe_list u;
COMMENT ON VIEW mailroom.suppressions IS
    'Every suppressed address, one row per list it is on: its kind, what it stops (all email, non-transactional email, or a hold for a soft bounce under three), why and since when.';

-- 5. The caller of mailroom.enqueue is told: SELECT * FROM mailroom.enqueue_outcome(mailroom.enqueue(...)).
-- Only the calling role's email (as mailroom.my_emails), so it tells nothing of other applications'.
-- VOLATILE: it must see the row the mailroom.enqueue call in the same statement has just inserted
-- (a STABLE function reads with the statement's snapshot, taken before that call).
CREATE FUNCTION mailroom.enqueue_outcome(email_id bigint)
RETURNS TABLE (id bigint, status text, suppressed boolean, suppression_reason text)
LANGUAGE sql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
    SELECT e.id, e.status, e.status = 'suppressed', e.suppression_reason
    FROM mailroom.email_queue e
    WHERE e.id = enqueue_outcome.email_id AND e.enqueued_by = session_user
$$;
REVOKE EXECUTE ON FUNCTION mailroom.enqueue_outcome(bigint) FROM PUBLIC;
COMMENT ON FUNCTION mailroom.enqueue_outcome(bigint) IS
    'The state of an email the calling role enqueued: whether it was stored suppressed and why. Granted to application roles by mailroom.grant_app_role.';

CREATE OR REPLACE FUNCTION mailroom.grant_app_role(role_name name) RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    EXECUTE format('GRANT USAGE ON SCHEMA mailroom TO %I', role_name);
    EXECUTE format('GRANT EXECUTE ON FUNCTION mailroom.enqueue TO %I', role_name);
    EXECUTE format('GRANT EXECUTE ON FUNCTION mailroom.enqueue_outcome TO %I', role_name);
    EXECUTE format('GRANT EXECUTE ON FUNCTION mailroom.app_audit TO %I', role_name);
    EXECUTE format('GRANT SELECT ON mailroom.my_emails TO %I', role_name);
END $$;
