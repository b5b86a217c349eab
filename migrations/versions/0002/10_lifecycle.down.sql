-- Undo 10_lifecycle.sql: back to revision 0001's lifecycle and scheduling objects.

DROP INDEX IF EXISTS mailroom.events_processing_idx;
DROP TRIGGER IF EXISTS people_after_update ON mailroom.people;
DROP TRIGGER IF EXISTS people_after_insert ON mailroom.people;
DROP TRIGGER IF EXISTS people_bump_version ON mailroom.people;
DROP FUNCTION IF EXISTS mailroom.people_after_update();
DROP FUNCTION IF EXISTS mailroom.people_after_insert();
DROP FUNCTION IF EXISTS mailroom.people_bump_version();
DROP FUNCTION IF EXISTS mailroom.schedule_birthdays(uuid[], timestamptz, time, integer, integer);
ALTER TABLE mailroom.events ALTER COLUMN id SET DEFAULT gen_random_uuid();
DROP FUNCTION IF EXISTS mailroom.new_event_id();
DROP FUNCTION IF EXISTS mailroom.next_birthday_of(uuid, date, text, timestamptz);
DROP FUNCTION IF EXISTS mailroom.local_instant(date, time, text);
DROP FUNCTION IF EXISTS mailroom.next_birthday(date, date);
DROP FUNCTION IF EXISTS mailroom.birthday_in(date, integer);

CREATE OR REPLACE FUNCTION mailroom.is_time_zone(zone text) RETURNS boolean LANGUAGE sql STABLE AS $$
    SELECT EXISTS (SELECT 1 FROM pg_timezone_names WHERE name = zone)
$$;
DROP TABLE IF EXISTS mailroom.time_zone_names;

DROP TRIGGER IF EXISTS tokens_before_update ON mailroom.tokens;
DROP FUNCTION IF EXISTS mailroom.tokens_before_update();
DROP TRIGGER IF EXISTS tokens_before_insert ON mailroom.tokens;
DROP FUNCTION IF EXISTS mailroom.tokens_before_insert();
DROP FUNCTION IF EXISTS mailroom.token_max_attempts();
ALTER TABLE mailroom.tokens DROP COLUMN IF EXISTS failed_attempts;
-- Forgotten secrets cannot come back: those tokens get a fresh random secret, so their old links stop
-- working (revision 0001 finds tokens by the plain secret only).
ALTER TABLE mailroom.tokens DROP CONSTRAINT IF EXISTS tokens_secret_until_handled_check;
UPDATE mailroom.tokens SET secret = mailroom.random_secret() WHERE secret IS NULL;
ALTER TABLE mailroom.tokens ALTER COLUMN secret SET NOT NULL;
ALTER TABLE mailroom.tokens ADD CONSTRAINT tokens_secret_key UNIQUE (secret);
ALTER TABLE mailroom.tokens DROP COLUMN IF EXISTS secret_hash;
DROP TRIGGER IF EXISTS tokens_notify_mailer ON mailroom.tokens;
DROP FUNCTION IF EXISTS mailroom.tokens_notify_mailer();
DROP INDEX IF EXISTS mailroom.tokens_to_mail_idx;
CREATE INDEX IF NOT EXISTS tokens_unmailed_idx ON mailroom.tokens (id) WHERE mailed_at IS NULL;
ALTER TABLE mailroom.tokens DROP COLUMN IF EXISTS mail_skipped_reason;

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
        INSERT INTO mailroom.tokens (account_id, action) VALUES (NEW.id, 'activation');
    END IF;
    RETURN NEW;
END $$;

DROP FUNCTION IF EXISTS mailroom.birthday_time();
DROP FUNCTION IF EXISTS mailroom.token_ttl();
DROP FUNCTION IF EXISTS mailroom.clock();
