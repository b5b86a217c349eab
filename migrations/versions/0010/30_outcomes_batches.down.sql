-- Undo 30_outcomes_batches.sql: an event is completed again once its email is enqueued, with no payload
-- or backoff of its own; sender accounts lose their batch size.

ALTER TABLE mailroom.sender_accounts DROP CONSTRAINT sender_accounts_batch_size_positive, DROP COLUMN batch_size;

DROP INDEX mailroom.events_outcome_idx;

DROP TRIGGER events_take_email_outcome ON mailroom.events;
DROP FUNCTION mailroom.events_take_email_outcome();
DROP TRIGGER email_queue_event_outcome ON mailroom.email_queue;
DROP FUNCTION mailroom.events_follow_email();
DROP FUNCTION mailroom.event_outcome(text, text, text, text);
DROP TRIGGER people_refresh_payload ON mailroom.people;
DROP FUNCTION mailroom.people_refresh_payload();
DROP TRIGGER events_fill_payload ON mailroom.events;
DROP FUNCTION mailroom.events_fill_payload();

-- Queued meant "enqueued", which the revision before called completed.
UPDATE mailroom.events SET status = 'completed', executed_at = coalesce(executed_at, updated_at)
WHERE status = 'queued';

ALTER TABLE mailroom.events
    DROP CONSTRAINT events_status_known,
    ADD CONSTRAINT events_status_known
        CHECK (status IN ('pending', 'processing', 'completed', 'failed', 'missed', 'cancelled')),
    DROP CONSTRAINT events_retry_count_range,
    ADD CONSTRAINT events_retry_count_not_negative CHECK (retry_count >= 0),
    DROP CONSTRAINT events_delivery_payload_names_template,
    DROP COLUMN delivery_payload,
    DROP COLUMN retry_at;

DROP FUNCTION mailroom.birthday_payload(text, text, text);

COMMENT ON COLUMN mailroom.events.status IS 'pending: waiting until due_at; processing: claimed by the scheduler; completed: its email was enqueued; failed: could not be sent (failure_reason); missed: the local day ended before it went out; cancelled: the date of birth changed.';
COMMENT ON COLUMN mailroom.events.failure_reason IS NULL;
COMMENT ON COLUMN mailroom.events.retry_count IS NULL;
COMMENT ON COLUMN mailroom.events.executed_at IS 'When the event was completed.';

CREATE OR REPLACE FUNCTION mailroom.next_birthday_of(person uuid, dob date, zone text, at timestamptz) RETURNS date
LANGUAGE sql STABLE AS $$
    SELECT mailroom.next_birthday(dob, greatest((at AT TIME ZONE zone)::date,
        (SELECT max(e.local_due_at)::date FROM mailroom.events e
         WHERE e.person_id = person AND e.event_type = 'birthday'
           AND e.status IN ('completed', 'missed', 'failed')) + 1))
$$;

COMMENT ON FUNCTION mailroom.next_birthday_of(uuid, date, text, timestamp with time zone) IS 'A person''s next birthday day in their zone, never on or before a birthday already completed, missed or failed.';

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
                   WHERE e.event_type = 'birthday' AND e.status IN ('completed', 'missed', 'failed')
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

COMMENT ON FUNCTION mailroom.schedule_birthdays(uuid[], timestamp with time zone, time without time zone, integer, integer) IS 'The set-based scheduling pass: everyone given (NULL: everyone, optionally one part of several) without a pending event gets their next one; returns how many were made.';
