-- User lifecycle (reference 01) and birthday scheduling (reference 02): what the producers need on top
-- of revision 0001, and the fixes to what 0001 got wrong there.

-- ---------------------------------------------------------------------------
-- Clock and settings seen by the database
-- ---------------------------------------------------------------------------

-- The time the lifecycle and birthday logic runs at: `mailroom.now` when a caller set it (tests drive a
-- controllable clock this way, `SELECT set_config('mailroom.now', ..., true)`), else the transaction's now().
CREATE FUNCTION mailroom.clock() RETURNS timestamptz LANGUAGE sql STABLE AS $$
    SELECT coalesce(nullif(current_setting('mailroom.now', true), '')::timestamptz, now())
$$;

-- How long a new token lives: `mailroom.token_ttl` (set per transaction by Mailroom from
-- MAILROOM_TOKEN_TTL_SECONDS, or for the whole database with ALTER DATABASE ... SET), else 15 minutes.
CREATE FUNCTION mailroom.token_ttl() RETURNS interval LANGUAGE sql STABLE AS $$
    SELECT coalesce(nullif(current_setting('mailroom.token_ttl', true), ''), '15 minutes')::interval
$$;

-- The local time of day birthday email goes out: `mailroom.birthday_time`, else 09:00.
CREATE FUNCTION mailroom.birthday_time() RETURNS time LANGUAGE sql STABLE AS $$
    SELECT coalesce(nullif(current_setting('mailroom.birthday_time', true), ''), '09:00')::time
$$;

-- ---------------------------------------------------------------------------
-- User lifecycle
-- ---------------------------------------------------------------------------

-- The activation token made with a provisioned account lives for the configured time, not a fixed 15 minutes.
CREATE OR REPLACE FUNCTION mailroom.accounts_before_insert() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    NEW.status_changed_at := coalesce(NEW.status_changed_at, now());
    IF NEW.status = 'active' THEN
        NEW.activated_at := coalesce(NEW.activated_at, now());
    ELSIF NEW.status = 'suspended' THEN
        NEW.suspended_at := coalesce(NEW.suspended_at, now());
    END IF;
    IF NEW.status = 'provisioned' THEN
        -- The token's foreign key is deferred, so the token may precede its account in this transaction.
        INSERT INTO mailroom.tokens (account_id, action, expires_at)
        VALUES (NEW.id, 'activation', now() + mailroom.token_ttl());
    END IF;
    RETURN NEW;
END $$;

-- Tokens the mailer decided not to mail (expired, or the account is in the wrong state) say why; mailed_at
-- stays NULL for them. The mailer picks tokens that are neither mailed nor skipped, by this index, not by
-- `id > last_seq`: identities are handed out at INSERT, not at COMMIT, so a token whose transaction commits
-- after a higher id was mailed would be skipped forever by a pure cursor.
ALTER TABLE mailroom.tokens ADD COLUMN mail_skipped_reason text;
DROP INDEX mailroom.tokens_unmailed_idx;
CREATE INDEX tokens_to_mail_idx ON mailroom.tokens (id)
    WHERE mailed_at IS NULL AND mail_skipped_reason IS NULL;

-- Secrets at rest: a token is found by the SHA-256 of its secret. The plain secret is kept only until the
-- mailer has handled the token (it builds the link from it once, in the transaction that records the token
-- as mailed or skipped, and forgets it there); the CHECK holds every writer to that. Existing tokens get
-- their hash before their handled secrets are forgotten, so links already mailed keep working.
ALTER TABLE mailroom.tokens ADD COLUMN secret_hash bytea;
ALTER TABLE mailroom.tokens ALTER COLUMN secret DROP NOT NULL;
UPDATE mailroom.tokens
SET secret_hash = sha256(secret),
    secret = CASE WHEN mailed_at IS NULL AND mail_skipped_reason IS NULL THEN secret END;
ALTER TABLE mailroom.tokens ALTER COLUMN secret_hash SET NOT NULL;
ALTER TABLE mailroom.tokens ADD CONSTRAINT tokens_secret_hash_key UNIQUE (secret_hash);
ALTER TABLE mailroom.tokens ADD CONSTRAINT tokens_secret_hash_check CHECK (octet_length(secret_hash) = 32);
ALTER TABLE mailroom.tokens ADD CONSTRAINT tokens_secret_until_handled_check
    CHECK ((secret IS NULL) = (mailed_at IS NOT NULL OR mail_skipped_reason IS NOT NULL));
-- The hash is unique; a second index holding the plain secrets is not wanted.
ALTER TABLE mailroom.tokens DROP CONSTRAINT tokens_secret_key;

-- Guessing: 100,000 codes are few, so every wrong code given for an account counts against its usable
-- tokens, and a token with `mailroom.token_max_attempts()` wrong codes is locked (neither its code nor its
-- link works any more; a new token must be issued).
ALTER TABLE mailroom.tokens ADD COLUMN failed_attempts integer NOT NULL DEFAULT 0
    CONSTRAINT tokens_failed_attempts_check CHECK (failed_attempts >= 0);

CREATE FUNCTION mailroom.token_max_attempts() RETURNS integer LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT 5
$$;

CREATE FUNCTION mailroom.tokens_before_insert() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.secret IS NULL THEN
        RAISE EXCEPTION 'a new token needs its secret' USING ERRCODE = 'not_null_violation';
    END IF;
    NEW.secret_hash := sha256(NEW.secret);
    NEW.failed_attempts := 0;
    RETURN NEW;
END $$;
CREATE TRIGGER tokens_before_insert BEFORE INSERT ON mailroom.tokens
    FOR EACH ROW EXECUTE FUNCTION mailroom.tokens_before_insert();

-- A token is consumed once, before it expires and while it is not locked; it never changes what it is for,
-- its secret can only be forgotten, and its wrong codes only counted up: enforced for every writer.
CREATE FUNCTION mailroom.tokens_before_update() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.secret_hash IS DISTINCT FROM OLD.secret_hash OR NEW.code IS DISTINCT FROM OLD.code
       OR NEW.account_id IS DISTINCT FROM OLD.account_id OR NEW.action IS DISTINCT FROM OLD.action
       OR NEW.expires_at IS DISTINCT FROM OLD.expires_at
       OR (NEW.secret IS DISTINCT FROM OLD.secret AND NEW.secret IS NOT NULL) THEN
        RAISE EXCEPTION 'token % cannot change its secret, code, account, action or expiry', OLD.id
            USING ERRCODE = 'check_violation';
    END IF;
    IF NEW.failed_attempts < OLD.failed_attempts THEN
        RAISE EXCEPTION 'token % cannot forget its wrong codes', OLD.id USING ERRCODE = 'check_violation';
    END IF;
    IF OLD.consumed_at IS NOT NULL AND NEW.consumed_at IS DISTINCT FROM OLD.consumed_at THEN
        RAISE EXCEPTION 'token % was already consumed at %', OLD.id, OLD.consumed_at
            USING ERRCODE = 'check_violation';
    END IF;
    IF OLD.consumed_at IS NULL AND NEW.consumed_at >= OLD.expires_at THEN
        RAISE EXCEPTION 'token % expired at %', OLD.id, OLD.expires_at USING ERRCODE = 'check_violation';
    END IF;
    IF OLD.consumed_at IS NULL AND NEW.consumed_at IS NOT NULL
       AND OLD.failed_attempts >= mailroom.token_max_attempts() THEN
        RAISE EXCEPTION 'token % was locked after % wrong codes', OLD.id, OLD.failed_attempts
            USING ERRCODE = 'check_violation';
    END IF;
    RETURN NEW;
END $$;
CREATE TRIGGER tokens_before_update BEFORE UPDATE ON mailroom.tokens
    FOR EACH ROW EXECUTE FUNCTION mailroom.tokens_before_update();

-- Wake the lifecycle mailer: one NOTIFY per statement that inserted tokens.
CREATE FUNCTION mailroom.tokens_notify_mailer() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('mailroom_tokens', 'insert');
    RETURN NULL;
END $$;
CREATE TRIGGER tokens_notify_mailer AFTER INSERT ON mailroom.tokens
    FOR EACH STATEMENT EXECUTE FUNCTION mailroom.tokens_notify_mailer();

-- ---------------------------------------------------------------------------
-- Birthday scheduling
-- ---------------------------------------------------------------------------

-- pg_timezone_names reads the whole tz database on every call (milliseconds): far too slow for a check
-- on every inserted person. Known zone names are kept in a table; a name missing from it (a zone added by
-- a newer tz database) is still checked against pg_timezone_names.
CREATE TABLE mailroom.time_zone_names (
    name                text PRIMARY KEY
);
INSERT INTO mailroom.time_zone_names (name) SELECT name FROM pg_timezone_names ON CONFLICT DO NOTHING;

CREATE OR REPLACE FUNCTION mailroom.is_time_zone(zone text) RETURNS boolean LANGUAGE sql STABLE AS $$
    SELECT EXISTS (SELECT 1 FROM mailroom.time_zone_names WHERE name = zone)
        OR EXISTS (SELECT 1 FROM pg_timezone_names WHERE name = zone)
$$;

-- A person's version follows every change (optimistic updates compare it).
CREATE FUNCTION mailroom.people_bump_version() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.version = OLD.version THEN
        NEW.version := OLD.version + 1;
    END IF;
    RETURN NEW;
END $$;
CREATE TRIGGER people_bump_version BEFORE UPDATE ON mailroom.people
    FOR EACH ROW EXECUTE FUNCTION mailroom.people_bump_version();

-- The person's birthday in `year`: 29 February falls on 28 February in common years (date + interval
-- clamps to the last day of the month).
CREATE FUNCTION mailroom.birthday_in(dob date, year integer) RETURNS date
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT (dob + make_interval(years => year - extract(year FROM dob)::integer))::date
$$;

-- The first birthday on or after `from_date` (never the day of birth itself).
CREATE FUNCTION mailroom.next_birthday(dob date, from_date date) RETURNS date
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT CASE
        WHEN mailroom.birthday_in(dob, extract(year FROM greatest(from_date, dob + 1))::integer)
             >= greatest(from_date, dob + 1)
        THEN mailroom.birthday_in(dob, extract(year FROM greatest(from_date, dob + 1))::integer)
        ELSE mailroom.birthday_in(dob, extract(year FROM greatest(from_date, dob + 1))::integer + 1)
    END
$$;

-- The UTC instant of `send_time` on local day `day` in `zone`. A local time that does not exist (the clocks
-- jump over it) is read with the offset in force before the jump, so it lands as far after the jump as it
-- was meant to be after its start: 02:30 on a 02:00 -> 03:00 spring-forward day is sent at 03:30. A local
-- time that happens twice (clocks fall back) is the second of the two, read in standard time (PostgreSQL's
-- rule): 01:30 on New York's fall-back day is 01:30 EST (06:30 UTC), not 01:30 EDT.
CREATE FUNCTION mailroom.local_instant(day date, send_time time, zone text) RETURNS timestamptz
LANGUAGE sql STABLE PARALLEL SAFE AS $$
    SELECT (day + send_time) AT TIME ZONE zone
$$;

-- One person's next birthday day in their zone from `at`, never on or before a birthday already
-- completed, missed or failed (a history day ends the search there). The per-person paths use it; the
-- full pass over everyone computes the same thing with a hashed join instead.
CREATE FUNCTION mailroom.next_birthday_of(person uuid, dob date, zone text, at timestamptz) RETURNS date
LANGUAGE sql STABLE AS $$
    SELECT mailroom.next_birthday(dob, greatest((at AT TIME ZONE zone)::date,
        (SELECT max(e.local_due_at)::date FROM mailroom.events e
         WHERE e.person_id = person AND e.event_type = 'birthday'
           AND e.status IN ('completed', 'missed', 'failed')) + 1))
$$;

-- Event ids in time order where the server has uuidv7() (PostgreSQL 18 and later): the primary key then
-- grows at its right edge instead of splitting random pages, which matters at millions of events.
DO $$
BEGIN
    IF current_setting('server_version_num')::integer >= 180000 THEN
        EXECUTE 'CREATE FUNCTION mailroom.new_event_id() RETURNS uuid LANGUAGE sql VOLATILE AS ''SELECT uuidv7()''';
    ELSE
        EXECUTE 'CREATE FUNCTION mailroom.new_event_id() RETURNS uuid LANGUAGE sql VOLATILE AS ''SELECT gen_random_uuid()''';
    END IF;
END $$;
ALTER TABLE mailroom.events ALTER COLUMN id SET DEFAULT mailroom.new_event_id();

-- The set-based scheduling pass: give every person in `person_ids` (NULL: everyone; with `parts` > 1, only
-- those whose id falls in part `part`, so that several sessions can share a large pass) who has no pending
-- or processing birthday event their next one, as of `at`, at `send_time` local time. A birthday already
-- handled (completed, missed or failed) is never scheduled again. Returns how many events were created.
CREATE FUNCTION mailroom.schedule_birthdays(person_ids uuid[], at timestamptz, send_time time,
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

-- New people get their next birthday event in the inserting transaction, one set-based statement per
-- INSERT (a bulk COPY of a million people is one pass, not a million trigger calls).
CREATE FUNCTION mailroom.people_after_insert() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    at timestamptz := mailroom.clock();
    send_time time := mailroom.birthday_time();
BEGIN
    INSERT INTO mailroom.events (person_id, event_type, due_at, local_due_at, time_zone, idempotency_key)
    SELECT n.id, 'birthday', d.due_at, d.due_at AT TIME ZONE n.time_zone, n.time_zone,
           'birthday:' || n.id::text || ':' || b.day::text
    FROM new_people n
    CROSS JOIN LATERAL (
        SELECT mailroom.next_birthday(n.date_of_birth, (at AT TIME ZONE n.time_zone)::date) AS day
    ) b
    CROSS JOIN LATERAL (SELECT mailroom.local_instant(b.day, send_time, n.time_zone) AS due_at) d
    ORDER BY n.id
    ON CONFLICT DO NOTHING;
    PERFORM pg_notify('mailroom_events', 'people');
    RETURN NULL;
END $$;
CREATE TRIGGER people_after_insert AFTER INSERT ON mailroom.people
    REFERENCING NEW TABLE AS new_people
    FOR EACH STATEMENT EXECUTE FUNCTION mailroom.people_after_insert();

-- A new time zone or date of birth reschedules the person's pending (or in-flight) event in the same
-- transaction. The event's version moves on, so a scheduler that claimed it before the change finds its
-- completion stale and drops it; nothing is lost by that:
--  * an event that is not yet due, or whose local day is still the birthday after the change, is moved in
--    place (same id, pending) and is sent at its new time;
--  * an event that already came due and that the change moves to another day is not moved but closed, with
--    the reason: `missed` when the new zone's local day of the birthday has ended (the catch-up rule), or
--    `cancelled` when the date of birth changed (it was not their birthday); the next one is scheduled.
CREATE FUNCTION mailroom.people_after_update() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    at timestamptz := mailroom.clock();
    send_time time := mailroom.birthday_time();
    closed uuid[];
BEGIN
    WITH changed AS (
        SELECT n.id, n.date_of_birth, n.time_zone, n.date_of_birth IS DISTINCT FROM o.date_of_birth AS born
        FROM new_people n JOIN old_people o ON o.id = n.id
        WHERE n.time_zone IS DISTINCT FROM o.time_zone OR n.date_of_birth IS DISTINCT FROM o.date_of_birth
    ), next AS (
        SELECT c.id, c.time_zone, c.born, b.day
        FROM changed c
        CROSS JOIN LATERAL (SELECT mailroom.next_birthday_of(c.id, c.date_of_birth, c.time_zone, at) AS day) b
    ), closing AS (
        UPDATE mailroom.events e
        SET status = CASE WHEN x.born THEN 'cancelled' ELSE 'missed' END,
            failure_reason = CASE
                WHEN x.born THEN format('the date of birth changed after the birthday of %s came due',
                                        e.local_due_at::date)
                ELSE format('the time zone changed to %s after it came due; the local day %s had ended there',
                            x.time_zone, e.local_due_at::date)
            END,
            -- a cancelled birthday frees its key: should the old date of birth come back, it is scheduled again
            idempotency_key = CASE WHEN x.born THEN e.idempotency_key || ':cancelled:' || e.id::text
                                   ELSE e.idempotency_key END,
            version = e.version + 1
        FROM next x
        WHERE e.person_id = x.id AND e.event_type = 'birthday' AND e.status IN ('pending', 'processing')
          AND e.due_at <= at AND x.day <> e.local_due_at::date
        RETURNING e.person_id
    )
    SELECT array_agg(person_id) INTO closed FROM closing;

    WITH changed AS (
        SELECT n.id, n.date_of_birth, n.time_zone
        FROM new_people n JOIN old_people o ON o.id = n.id
        WHERE n.time_zone IS DISTINCT FROM o.time_zone OR n.date_of_birth IS DISTINCT FROM o.date_of_birth
    ), next AS (
        SELECT c.id, c.time_zone, b.day, mailroom.local_instant(b.day, send_time, c.time_zone) AS due_at
        FROM changed c
        CROSS JOIN LATERAL (SELECT mailroom.next_birthday_of(c.id, c.date_of_birth, c.time_zone, at) AS day) b
    )
    UPDATE mailroom.events e
    SET due_at = x.due_at, local_due_at = x.due_at AT TIME ZONE x.time_zone, time_zone = x.time_zone,
        idempotency_key = 'birthday:' || x.id::text || ':' || x.day::text,
        status = 'pending', version = e.version + 1
    FROM next x
    WHERE e.person_id = x.id AND e.event_type = 'birthday' AND e.status IN ('pending', 'processing');

    IF closed IS NOT NULL THEN
        PERFORM mailroom.schedule_birthdays(closed, at, send_time);
    END IF;
    PERFORM pg_notify('mailroom_events', 'people');
    RETURN NULL;
END $$;
CREATE TRIGGER people_after_update AFTER UPDATE ON mailroom.people
    REFERENCING OLD TABLE AS old_people NEW TABLE AS new_people
    FOR EACH STATEMENT EXECUTE FUNCTION mailroom.people_after_update();

-- The scheduler's claim walks pending events by due time; events_due_idx (0001) serves it. In-flight
-- events are found by the rescue of stalled claims through this index.
CREATE INDEX events_processing_idx ON mailroom.events (updated_at) WHERE status = 'processing';
