"""The schema check across PostgreSQL versions: what 15 to 17 print otherwise than 18, which made
`migrations/schema.sql`, compares equal; a real difference still shows."""

from __future__ import annotations

from worker.core.schema import SCHEMA_FILE, as_file_version, comparable

# As PostgreSQL 18 prints them (schema.sql's words) ...
PARTITION_18 = """CREATE TABLE mailroom.send_logs_default (
    id bigint CONSTRAINT send_logs_id_not_null NOT NULL,
    attempted_at timestamp with time zone DEFAULT now() CONSTRAINT send_logs_attempted_at_not_null NOT NULL,
    campaign_id text
);"""
VIEW_18 = """CREATE VIEW mailroom.my_emails WITH (security_barrier='true') AS
 SELECT id,
    mailroom.suppression_told(suppression_reason) AS suppression_reason
   FROM mailroom.email_queue
  WHERE (enqueued_by = SESSION_USER);"""
EVENT_ID_18 = """CREATE FUNCTION mailroom.new_event_id() RETURNS uuid
    LANGUAGE sql
    AS $$SELECT uuidv7()$$;"""
# ... and as PostgreSQL 15 prints the same objects.
PARTITION_15 = """CREATE TABLE mailroom.send_logs_default (
    id bigint NOT NULL,
    attempted_at timestamp with time zone DEFAULT now() NOT NULL,
    campaign_id text
);"""
VIEW_15 = """CREATE VIEW mailroom.my_emails WITH (security_barrier='true') AS
 SELECT email_queue.id,
    mailroom.suppression_told(email_queue.suppression_reason) AS suppression_reason
   FROM mailroom.email_queue
  WHERE (email_queue.enqueued_by = SESSION_USER);"""
EVENT_ID_15 = EVENT_ID_18.replace("uuidv7", "gen_random_uuid")


def test_postgresql_15s_words_for_the_same_schema_compare_equal_to_18s() -> None:
    file = "\n\n".join([PARTITION_18, VIEW_18, EVENT_ID_18])
    live = "\n\n".join([PARTITION_15, VIEW_15, EVENT_ID_15])
    assert as_file_version(live, 15) == comparable(file)


def test_on_the_files_own_version_gen_random_uuid_is_a_difference() -> None:
    """18 has uuidv7(): revision 0002 choosing gen_random_uuid there would be a change to see."""
    assert as_file_version(EVENT_ID_15, 18) != comparable(EVENT_ID_18)


def test_a_named_not_null_constraint_and_a_view_over_two_relations_keep_their_words() -> None:
    named = PARTITION_18.replace("send_logs_id_not_null", "send_logs_id_required")
    assert "CONSTRAINT send_logs_id_required NOT NULL" in comparable(named)
    joined = """CREATE VIEW mailroom.v AS
 SELECT a.id,
    b.id AS other
   FROM (mailroom.a
     JOIN mailroom.b ON ((b.id = a.id)));"""
    assert comparable(joined) == joined


def test_a_real_difference_still_shows() -> None:
    assert as_file_version(PARTITION_15.replace("campaign_id text", "campaign text"), 15) != comparable(
        PARTITION_18
    )


def test_the_shipped_file_needs_only_the_not_null_names_dropped() -> None:
    """schema.sql is 18's: comparing it in common words changes nothing but the partitions' NOT NULL names."""
    text = SCHEMA_FILE.read_text(encoding="utf-8")
    changed = [
        (a, b) for a, b in zip(text.splitlines(), comparable(text).splitlines(), strict=True) if a != b
    ]
    assert changed and all("_not_null NOT NULL" in a and "CONSTRAINT" not in b for a, b in changed)
