-- Birthday events that know their outcome, and a batch size per sender account.
--
-- An event used to be completed as soon as its email was enqueued, so a relay's refusal, a suppressed
-- address or an email that outlived the queue lifetime never reached it. Now the scheduler hands the
-- email over (status queued) and the event follows its email from there, in the database, whichever
-- worker records the outcome: completed when the relay took it, failed with the reason when it failed
-- for good, expired, was suppressed, bounced or was cancelled. When rendering or enqueueing the email
-- fails, the event is tried again with backoff (retry_count, 0 to 3 as reference 02 has it), then
-- fails with the reason. What it will send (template, locale, data) is recorded on the event when it is
-- created and kept current while it waits (delivery_payload).

-- == birthdays: events ==

ALTER TABLE mailroom.events ADD COLUMN delivery_payload jsonb, ADD COLUMN retry_at timestamptz;

-- What a person's birthday email is made of, from the person as they are now.
CREATE FUNCTION mailroom.birthday_payload(first_name text, last_name text, locale text) RETURNS jsonb
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT jsonb_build_object('template', 'birthday', 'locale', locale,
                              'data', jsonb_build_object('first_name', first_name, 'last_name', last_name))
$$;

COMMENT ON FUNCTION mailroom.birthday_payload(text, text, text) IS 'The delivery_payload of a birthday event: template birthday, the person''s locale, and their names as the template''s data.';

UPDATE mailroom.events e SET delivery_payload = mailroom.birthday_payload(p.first_name, p.last_name, p.locale)
FROM mailroom.people p WHERE p.id = e.person_id;

ALTER TABLE mailroom.events
    ALTER COLUMN delivery_payload SET NOT NULL,
    ADD CONSTRAINT events_delivery_payload_names_template
        -- IS NOT DISTINCT FROM: a payload without a template is refused, not let through as unknown
        CHECK (jsonb_typeof(delivery_payload) = 'object'
               AND jsonb_typeof(delivery_payload -> 'template') IS NOT DISTINCT FROM 'string'),
    DROP CONSTRAINT events_retry_count_not_negative,
    ADD CONSTRAINT events_retry_count_range CHECK (retry_count BETWEEN 0 AND 3),
    DROP CONSTRAINT events_status_known,
    ADD CONSTRAINT events_status_known
        CHECK (status IN ('pending', 'processing', 'queued', 'completed', 'failed', 'missed', 'cancelled'));

COMMENT ON COLUMN mailroom.events.status IS 'pending: waiting until due_at (and retry_at); processing: claimed by the scheduler; queued: its email is enqueued and not yet sent; completed: the relay accepted its email; failed: it could not be sent (failure_reason: the email failed, expired, bounced, was suppressed or cancelled, or could not be rendered or enqueued after 3 retries); missed: the local day ended before it went out; cancelled: the date of birth changed.';
COMMENT ON COLUMN mailroom.events.failure_reason IS 'Why it failed, was missed or cancelled; while pending after a failed attempt, that attempt''s error.';
COMMENT ON COLUMN mailroom.events.retry_count IS 'Attempts to render and enqueue its email that failed and were retried (0 to 3; the fourth failure fails the event).';
COMMENT ON COLUMN mailroom.events.retry_at IS 'After a failed attempt: not claimed again before this instant (backoff); NULL otherwise.';
COMMENT ON COLUMN mailroom.events.delivery_payload IS 'What it will send: {template, locale, data}, set when the event is created and kept current while it waits. Holds only the person''s names and locale, which read-only roles see in people anyway.';
COMMENT ON COLUMN mailroom.events.executed_at IS 'When the relay accepted its email (completed).';

-- Every way an event is made (the people triggers, the scheduling pass, a hand-written INSERT) gets its
-- payload here, so none can forget it.
CREATE FUNCTION mailroom.events_fill_payload() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    SELECT mailroom.birthday_payload(p.first_name, p.last_name, p.locale) INTO NEW.delivery_payload
    FROM mailroom.people p WHERE p.id = NEW.person_id;
    RETURN NEW;
END $$;

COMMENT ON FUNCTION mailroom.events_fill_payload() IS 'Row trigger: a new event without a delivery_payload takes its person''s.';

CREATE TRIGGER events_fill_payload BEFORE INSERT ON mailroom.events
    FOR EACH ROW WHEN (NEW.delivery_payload IS NULL) EXECUTE FUNCTION mailroom.events_fill_payload();

COMMENT ON TRIGGER events_fill_payload ON mailroom.events IS 'Only for rows inserted without a payload.';

-- A person renamed, given another locale, or rescheduled: the events still waiting send what they are now.
-- After people_after_update (name order), so an event that trigger made or moved is current too.
CREATE FUNCTION mailroom.people_refresh_payload() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    UPDATE mailroom.events e
    SET delivery_payload = mailroom.birthday_payload(n.first_name, n.last_name, n.locale)
    FROM new_people n JOIN old_people o ON o.id = n.id
    WHERE e.person_id = n.id AND e.status IN ('pending', 'processing')
      AND (n.first_name, n.last_name, n.locale, n.time_zone, n.date_of_birth)
          IS DISTINCT FROM (o.first_name, o.last_name, o.locale, o.time_zone, o.date_of_birth)
      AND e.delivery_payload IS DISTINCT FROM mailroom.birthday_payload(n.first_name, n.last_name, n.locale);
    RETURN NULL;
END $$;

COMMENT ON FUNCTION mailroom.people_refresh_payload() IS 'Statement trigger: a changed person''s waiting events take their new names and locale as delivery_payload.';

CREATE TRIGGER people_refresh_payload AFTER UPDATE ON mailroom.people
    REFERENCING OLD TABLE AS old_people NEW TABLE AS new_people
    FOR EACH STATEMENT EXECUTE FUNCTION mailroom.people_refresh_payload();

COMMENT ON TRIGGER people_refresh_payload ON mailroom.people IS 'Keeps the waiting events'' delivery_payload current.';

-- What an email's status means for the event it was sent for: (event status, reason). One mapping for
-- both ways the two meet (the email changes; the event is handed an email that already has an outcome).
CREATE FUNCTION mailroom.event_outcome(email_status text, last_error text, failure_kind text,
                                       suppression_reason text, OUT status text, OUT reason text)
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT CASE email_status
               WHEN 'sent' THEN 'completed'
               WHEN 'pending' THEN 'queued'
               WHEN 'unrendered' THEN 'queued'
               WHEN 'assigned' THEN 'queued'
               ELSE 'failed'
           END,
           CASE email_status
               WHEN 'failed' THEN CASE WHEN failure_kind = 'expired' THEN 'the email expired: '
                                       ELSE 'the email failed: ' END
                                  || coalesce(last_error, 'no reason recorded')
               WHEN 'bounced' THEN 'the email bounced: ' || coalesce(last_error, 'a bounce report arrived')
               WHEN 'suppressed' THEN 'the recipient is suppressed: '
                                      || coalesce(suppression_reason, 'on the suppression list')
               WHEN 'cancelled' THEN 'the email was cancelled'
           END
$$;

COMMENT ON FUNCTION mailroom.event_outcome(text, text, text, text) IS 'A birthday event''s status and failure reason given its email''s status: sent is completed; pending or being sent is queued; failed, expired, bounced, suppressed or cancelled is failed with the reason.';

CREATE FUNCTION mailroom.events_follow_email() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    outcome record;
BEGIN
    SELECT * INTO outcome FROM mailroom.event_outcome(NEW.status, NEW.last_error, NEW.failure_kind, NEW.suppression_reason);
    -- email_id = NEW.id: an email that only names an event (any role may enqueue one) changes nothing.
    UPDATE mailroom.events e
    SET status = outcome.status, failure_reason = outcome.reason, version = e.version + 1,
        executed_at = CASE outcome.status WHEN 'completed' THEN NEW.sent_at
                                          WHEN 'failed' THEN e.executed_at END
    WHERE e.id = NEW.reference_id::uuid AND e.email_id = NEW.id
      AND e.status IN ('queued', 'completed', 'failed')
      AND (e.status, e.failure_reason) IS DISTINCT FROM (outcome.status, outcome.reason);
    RETURN NULL;
END $$;

COMMENT ON FUNCTION mailroom.events_follow_email() IS 'Row trigger: a birthday email''s outcome becomes its event''s status (completed, or failed with the reason; queued again when an operator retries it).';

-- Only birthday emails, when the status changed to anything but assigned: the hot path pays the WHEN test.
CREATE TRIGGER email_queue_event_outcome AFTER UPDATE OF status ON mailroom.email_queue
    FOR EACH ROW
    WHEN (NEW.reference_type = 'event' AND NEW.status IS DISTINCT FROM OLD.status AND NEW.status <> 'assigned'
          AND NEW.reference_id ~ '^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$')
    EXECUTE FUNCTION mailroom.events_follow_email();

COMMENT ON TRIGGER email_queue_event_outcome ON mailroom.email_queue IS 'Birthday emails only (reference_type event, a well-formed event id), when the status changed to anything but assigned.';

-- The scheduler hands an event its email: an email that already has an outcome (the idempotency key
-- found one sent earlier; the address was suppressed as it was enqueued) gives the event that outcome now.
CREATE FUNCTION mailroom.events_take_email_outcome() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    outcome record;
BEGIN
    SELECT (mailroom.event_outcome(q.status, q.last_error, q.failure_kind, q.suppression_reason)).*, q.sent_at
    INTO outcome FROM mailroom.email_queue q WHERE q.id = NEW.email_id;
    IF FOUND AND outcome.status <> 'queued' THEN
        NEW.status := outcome.status;
        NEW.failure_reason := outcome.reason;
        NEW.executed_at := CASE WHEN outcome.status = 'completed' THEN outcome.sent_at END;
    END IF;
    RETURN NEW;
END $$;

COMMENT ON FUNCTION mailroom.events_take_email_outcome() IS 'Row trigger: an event handed an email that is already sent, failed or suppressed takes that outcome at once.';

CREATE TRIGGER events_take_email_outcome BEFORE UPDATE OF status ON mailroom.events
    FOR EACH ROW WHEN (NEW.status = 'queued' AND OLD.status = 'processing' AND NEW.email_id IS NOT NULL)
    EXECUTE FUNCTION mailroom.events_take_email_outcome();

COMMENT ON TRIGGER events_take_email_outcome ON mailroom.events IS 'When the scheduler hands an event its email.';

-- Events completed before this revision were only enqueued: each takes its email's outcome now.
UPDATE mailroom.events e
SET status = o.status, failure_reason = o.reason,
    executed_at = CASE WHEN o.status = 'completed' THEN coalesce(q.sent_at, e.executed_at) END
FROM mailroom.email_queue q
CROSS JOIN LATERAL mailroom.event_outcome(q.status, q.last_error, q.failure_kind, q.suppression_reason) o
WHERE e.status = 'completed' AND q.id = e.email_id;

-- Queued events have their birthday handled: the next one is scheduled after it, never on the same day.
CREATE OR REPLACE FUNCTION mailroom.next_birthday_of(person uuid, dob date, zone text, at timestamptz) RETURNS date
LANGUAGE sql STABLE AS $$
    SELECT mailroom.next_birthday(dob, greatest((at AT TIME ZONE zone)::date,
        (SELECT max(e.local_due_at)::date FROM mailroom.events e
         WHERE e.person_id = person AND e.event_type = 'birthday'
           AND e.status IN ('queued', 'completed', 'missed', 'failed')) + 1))
$$;

COMMENT ON FUNCTION mailroom.next_birthday_of(uuid, date, text, timestamp with time zone) IS 'A person''s next birthday day in their zone, never on or before a birthday already queued, completed, missed or failed.';

CREATE OR REPLACE FUNCTION mailroom.schedule_birthdays(person_ids uuid[], at timestamptz, send_time time,
                                                       part integer DEFAULT 0, parts integer DEFAULT 1)
RETURNS integer LANGUAGE plpgsql AS $$
DECLARE
    created integer;
BEGIN
    IF person_ids IS NULL THEN
        -- Everyone: joins the planner can hash, over the whole table at once.
        INSERT INTO mailroom.events (person_id, event_type, due_at, local_due_at, time_zone, idempotency_key)
        SELECT p.id, 'birthday', d.due_at, d.due_at AT TIME ZONE p.time_zone, p.time_zone,
               'birthday:' || p.id::text || ':' || b.day::text
        FROM mailroom.people p
        LEFT JOIN (SELECT e.person_id, max(e.local_due_at)::date AS last_day FROM mailroom.events e
                   WHERE e.event_type = 'birthday' AND e.status IN ('queued', 'completed', 'missed', 'failed')
                   GROUP BY e.person_id) h ON h.person_id = p.id
        CROSS JOIN LATERAL (
            SELECT mailroom.next_birthday(p.date_of_birth,
                                          greatest((at AT TIME ZONE p.time_zone)::date, h.last_day + 1)) AS day
        ) b
        CROSS JOIN LATERAL (SELECT mailroom.local_instant(b.day, send_time, p.time_zone) AS due_at) d
        WHERE (parts = 1 OR get_byte(uuid_send(p.id), 0) * parts / 256 = part)
          AND NOT EXISTS (SELECT 1 FROM mailroom.events e
                          WHERE e.person_id = p.id AND e.event_type = 'birthday'
                            AND e.status IN ('pending', 'processing'))
        -- In person order: the person-keyed indexes then grow at their right edge (slice = id range).
        ORDER BY p.id
        ON CONFLICT DO NOTHING;
    ELSE
        -- A few people (after each sent birthday): index probes per person.
        INSERT INTO mailroom.events (person_id, event_type, due_at, local_due_at, time_zone, idempotency_key)
        SELECT p.id, 'birthday', d.due_at, d.due_at AT TIME ZONE p.time_zone, p.time_zone,
               'birthday:' || p.id::text || ':' || b.day::text
        FROM unnest(person_ids) AS u(id)
        JOIN mailroom.people p ON p.id = u.id
        CROSS JOIN LATERAL (SELECT mailroom.next_birthday_of(p.id, p.date_of_birth, p.time_zone, at) AS day) b
        CROSS JOIN LATERAL (SELECT mailroom.local_instant(b.day, send_time, p.time_zone) AS due_at) d
        WHERE NOT EXISTS (SELECT 1 FROM mailroom.events e
                          WHERE e.person_id = p.id AND e.event_type = 'birthday'
                            AND e.status IN ('pending', 'processing'))
        ON CONFLICT DO NOTHING;
    END IF;
    GET DIAGNOSTICS created = ROW_COUNT;
    RETURN created;
END $$;

COMMENT ON FUNCTION mailroom.schedule_birthdays(uuid[], timestamp with time zone, time without time zone, integer, integer) IS 'The set-based scheduling pass: everyone given (NULL: everyone, optionally one part of several) without a pending event gets their next one (after any birthday already queued, completed, missed or failed); returns how many were made.';

-- Recent outcomes (the console, `mailroom events list`): queued, failed, missed and retrying events by
-- when they changed, without a scan of the completed history.
CREATE INDEX events_outcome_idx ON mailroom.events (updated_at)
    WHERE status IN ('queued', 'failed', 'missed') OR retry_count > 0;

-- == sender accounts: batch size ==

ALTER TABLE mailroom.sender_accounts
    ADD COLUMN batch_size integer,
    ADD CONSTRAINT sender_accounts_batch_size_positive CHECK (batch_size >= 1);

COMMENT ON COLUMN mailroom.sender_accounts.batch_size IS 'Emails claimed for it at a time: how many it sends before the worker records their results and looks at its bounces and errors again. NULL: the worker''s --batch-size, which is also the ceiling.';
