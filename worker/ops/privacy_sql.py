"""The SQL of privacy export and erasure: what is read about an address, and what is changed to erase it."""

from __future__ import annotations

from psycopg import sql

# An email mentions the address as its recipient or in its other To, Cc, Bcc or Reply-To addresses.
MENTIONS = """(lower(recipient_email) = %(addr)s
    OR ((to_extra IS NOT NULL OR cc IS NOT NULL OR bcc IS NOT NULL OR reply_to IS NOT NULL)
        AND EXISTS (SELECT 1 FROM unnest(coalesce(to_extra, '{}') || coalesce(cc, '{}') || coalesce(bcc, '{}')
                                         || coalesce(reply_to, '{}')) AS a WHERE lower(a) = %(addr)s)))"""
# An address list with the erased address replaced (NULL stays NULL).
_REPLACED = (
    "CASE WHEN {list} IS NULL THEN NULL ELSE ARRAY(SELECT CASE WHEN lower(a) = %(addr)s THEN %(anon)s ELSE a END"
    " FROM unnest({list}) WITH ORDINALITY AS x(a, i) ORDER BY i) END"
)


def _with_mentions(statement: str) -> str:
    return sql.SQL(statement).format(mentions=sql.SQL(MENTIONS)).as_string(None)


def _with_lists(statement: str) -> str:
    lists = ("to_extra", "cc", "bcc", "reply_to")
    parts = {name: sql.SQL(_REPLACED).format(list=sql.Identifier(name)) for name in lists}
    return sql.SQL(statement).format(**parts).as_string(None)


MENTIONED_IDS = _with_mentions("SELECT id FROM mailroom.email_queue WHERE {mentions}")
CANCEL_UNSENT = _with_mentions(
    "UPDATE mailroom.email_queue SET status = 'cancelled' WHERE status IN ('pending', 'unrendered') AND {mentions}"
)
BEING_SENT = _with_mentions(
    "SELECT count(*) AS n, max(lease_expires_at) AS until FROM mailroom.email_queue"
    " WHERE status = 'assigned' AND {mentions}"
)

EXPORTS: dict[str, str] = {
    "emails": _with_mentions("SELECT * FROM mailroom.email_queue WHERE {mentions} ORDER BY id"),
    "bounce_events": "SELECT * FROM mailroom.bounce_events WHERE email_id = ANY(%(ids)s)"
    " OR recipient = %(addr)s ORDER BY id",
    # Reports that could not be read: the whole message, wherever it names the address.
    "bounce_quarantine": "SELECT * FROM mailroom.bounce_quarantine"
    " WHERE strpos(lower(encode(raw, 'escape')), %(addr)s) > 0 ORDER BY id",
    "recipient_outcomes": "SELECT * FROM mailroom.recipient_outcomes WHERE email_id = ANY(%(ids)s)"
    " OR lower(recipient) = %(addr)s ORDER BY id",
    # `lower(recipient_email)` as send_logs_recipient_idx holds it: a probe per month partition, not a scan.
    "send_logs": "SELECT * FROM mailroom.send_logs WHERE email_id = ANY(%(ids)s)"
    " OR lower(recipient_email) = %(addr)s ORDER BY attempted_at, id",
    "tracked_links": "SELECT * FROM mailroom.tracked_links WHERE email_id = ANY(%(ids)s) ORDER BY email_id, position",
    # The files of the address's email, content included (base64), each as the email carried it.
    "attachments": "SELECT a.email_id, a.position, a.filename, a.content_type, a.content_id,"
    " encode(a.sha256, 'hex') AS sha256, c.size, encode(c.content, 'base64') AS content"
    " FROM mailroom.email_attachments a JOIN mailroom.attachment_contents c ON c.sha256 = a.sha256"
    " WHERE a.email_id = ANY(%(ids)s) ORDER BY a.email_id, a.position",
    "open_events": "SELECT * FROM mailroom.open_events WHERE email_id = ANY(%(ids)s) ORDER BY occurred_at, id",
    "click_events": "SELECT * FROM mailroom.click_events WHERE email_id = ANY(%(ids)s) ORDER BY occurred_at, id",
    # What was told to applications' webhook endpoints about the address's email.
    "webhook_events": "SELECT * FROM mailroom.webhook_events WHERE email_id = ANY(%(ids)s)"
    " OR lower(recipient) = %(addr)s ORDER BY id",
    "unsubscribe_list": "SELECT * FROM mailroom.unsubscribe_list WHERE email = %(addr)s",
    "bounce_list": "SELECT * FROM mailroom.bounce_list WHERE email = %(addr)s",
    "suppression_events": "SELECT * FROM mailroom.suppression_events WHERE address = %(addr)s ORDER BY id",
    "inbox": "SELECT * FROM mailroom.inbox WHERE lower(payload->>'customer_email') = %(addr)s"
    " ORDER BY received_at",
    "expected_signers": "SELECT * FROM mailroom.expected_signers WHERE email = %(addr)s ORDER BY doc_id",
    "signatures": "SELECT * FROM mailroom.signatures WHERE signer_email = %(addr)s ORDER BY id",
    "reminder_logs": "SELECT * FROM mailroom.reminder_logs WHERE recipient_email = %(addr)s ORDER BY id",
    "accounts": "SELECT * FROM mailroom.accounts WHERE lower(email) = %(addr)s ORDER BY id",
    "people": "SELECT * FROM mailroom.people WHERE lower(email) = %(addr)s ORDER BY id",
    "events": "SELECT e.* FROM mailroom.events e JOIN mailroom.people p ON p.id = e.person_id"
    " WHERE lower(p.email) = %(addr)s ORDER BY e.due_at",
}


# Each statement: (report key, SQL). %(addr)s is the address, %(anon)s its replacement, %(re)s a
# case-insensitive regular expression matching it inside free text.
ERASURES: tuple[tuple[str, str], ...] = (
    (
        "email_queue",
        _with_lists("""UPDATE mailroom.email_queue
           SET recipient_email = CASE WHEN lower(recipient_email) = %(addr)s THEN %(anon)s ELSE recipient_email END,
               to_extra = {to_extra}, cc = {cc}, bcc = {bcc}, reply_to = {reply_to}, recipient_name = NULL,
               subject = %(erased)s, text_body = %(erased)s, html_body = NULL, template_data = NULL,
               headers = '{{}}', attachments = 0, last_error = regexp_replace(last_error, %(re)s, %(anon)s, 'gi'),
               suppression_reason = regexp_replace(suppression_reason, %(re)s, %(anon)s, 'gi'),
               error_details = regexp_replace(error_details::text, %(re)s, %(anon)s, 'gi')::jsonb
           WHERE id = ANY(%(ids)s)"""),
    ),
    # The files go; a content no other email carries goes with them (mailroom.drop_unused_attachments).
    ("attachments", "DELETE FROM mailroom.email_attachments WHERE email_id = ANY(%(ids)s)"),
    (
        "bounce_events",
        """UPDATE mailroom.bounce_events
           SET recipient = CASE WHEN recipient = %(addr)s THEN %(anon)s ELSE recipient END,
               diagnostic = regexp_replace(diagnostic, %(re)s, %(anon)s, 'gi')
           WHERE email_id = ANY(%(ids)s) OR recipient = %(addr)s""",
    ),
    (
        "bounce_quarantine",
        "DELETE FROM mailroom.bounce_quarantine WHERE strpos(lower(encode(raw, 'escape')), %(addr)s) > 0",
    ),
    (
        "recipient_outcomes",
        """UPDATE mailroom.recipient_outcomes
           SET recipient = CASE WHEN lower(recipient) = %(addr)s THEN %(anon)s ELSE recipient END,
               reason = regexp_replace(reason, %(re)s, %(anon)s, 'gi')
           WHERE email_id = ANY(%(ids)s) OR lower(recipient) = %(addr)s""",
    ),
    (
        # Through send_logs_email_idx and send_logs_recipient_idx (the same `lower(recipient_email)`).
        "send_logs",
        """UPDATE mailroom.send_logs SET recipient_email = %(anon)s,
               response = regexp_replace(response, %(re)s, %(anon)s, 'gi')
           WHERE email_id = ANY(%(ids)s) OR lower(recipient_email) = %(addr)s""",
    ),
    (
        "tracked_links",
        """UPDATE mailroom.tracked_links SET url = regexp_replace(url, %(re)s, %(anon)s, 'gi')
           WHERE email_id = ANY(%(ids)s) AND url ~* %(re)s""",
    ),
    (
        "open_events",
        "UPDATE mailroom.open_events SET ip_address = NULL, user_agent = NULL WHERE email_id = ANY(%(ids)s)",
    ),
    (
        "click_events",
        """UPDATE mailroom.click_events SET ip_address = NULL, user_agent = NULL,
               url = regexp_replace(url, %(re)s, %(anon)s, 'gi')
           WHERE email_id = ANY(%(ids)s)""",
    ),
    (
        # Events not yet POSTed then carry the replacement; data holds a click's URL and a reason.
        "webhook_events",
        """UPDATE mailroom.webhook_events
           SET recipient = CASE WHEN lower(recipient) = %(addr)s THEN %(anon)s ELSE recipient END,
               data = regexp_replace(data::text, %(re)s, %(anon)s, 'gi')::jsonb
           WHERE email_id = ANY(%(ids)s) OR lower(recipient) = %(addr)s""",
    ),
    (
        "bounce_list",
        """UPDATE mailroom.bounce_list SET email = %(anon)s,
               reason = regexp_replace(reason, %(re)s, %(anon)s, 'gi')
           WHERE email = %(addr)s""",
    ),
    (
        "unsubscribe_list",
        """UPDATE mailroom.unsubscribe_list SET email = CASE WHEN %(suppress)s THEN email ELSE %(anon)s END,
               reason = regexp_replace(reason, %(re)s, %(anon)s, 'gi'), user_agent = NULL, ip_address = NULL
           WHERE email = %(addr)s""",
    ),
    (
        # The history of an address whose listing was lifted (a listed one follows its list row).
        "suppression_events",
        """UPDATE mailroom.suppression_events SET address = %(anon)s,
               reason = regexp_replace(reason, %(re)s, %(anon)s, 'gi')
           WHERE address = %(addr)s""",
    ),
    (
        "inbox",
        # Only the order's details stay; any other field the producer sent may be personal.
        """UPDATE mailroom.inbox
           SET payload = regexp_replace(
                   (coalesce((SELECT jsonb_object_agg(key, value) FROM jsonb_each(payload)
                              WHERE key = ANY(%(order_keys)s)), '{}'::jsonb)
                    || jsonb_build_object('customer_email', %(anon)s::text, 'customer_name', %(erased)s::text))::text,
                   %(re)s, %(anon)s, 'gi')::jsonb
           WHERE lower(payload->>'customer_email') = %(addr)s""",
    ),
    # A signer of a document they have not signed; a signed one keeps its signer beside the signature.
    # Both tables in one statement: the reminder logs' foreign key is checked when it ends.
    (
        "expected_signers",
        """WITH unsigned AS (
               SELECT e.doc_id FROM mailroom.expected_signers e
               WHERE e.email = %(addr)s AND NOT EXISTS (
                   SELECT 1 FROM mailroom.signatures s WHERE s.doc_id = e.doc_id AND s.signer_email = e.email)
           ), logs AS (
               UPDATE mailroom.reminder_logs SET recipient_email = %(anon)s,
                   error_message = regexp_replace(error_message, %(re)s, %(anon)s, 'gi')
               WHERE recipient_email = %(addr)s AND doc_id IN (SELECT doc_id FROM unsigned)
               RETURNING 1
           )
           UPDATE mailroom.expected_signers SET email = %(anon)s, name = '', notes = NULL
           WHERE email = %(addr)s AND doc_id IN (SELECT doc_id FROM unsigned)""",
    ),
    (
        "accounts",
        """UPDATE mailroom.accounts SET email = %(anon_local)s || '.' || id || '@' || %(domain)s,
               login = %(anon_local)s || '.' || id || '@' || %(domain)s
           WHERE lower(email) = %(addr)s""",
    ),
    (
        "people",
        """UPDATE mailroom.people SET email = %(anon_local)s || '.' || id || '@' || %(domain)s,
               first_name = %(erased)s, last_name = %(erased)s
           WHERE lower(email) = %(addr)s""",
    ),
)
