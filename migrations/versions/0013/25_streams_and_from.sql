-- Message streams and a From per email.
--
-- Each email belongs to a stream: `transactional` unless it is not transactional (campaign mail), then
-- `broadcast`, or the one it names. Each sender account serves one or more streams, and a claim only
-- takes email of a stream the account serves, so campaign mail never leaves through a relay kept for
-- password resets (Postmark's message streams, Postal's IP pools).
--
-- An email may name its own From (with a display name) within the domains a sender account may send
-- for (`from_domains`, none: the domain of the account's own From), aligned with its DKIM domain; the
-- account that sends it is one that may send for that domain, and enqueue refuses a From no account
-- of the email's stream may send for.
-- Whether every element of an array is a non-NULL text matching a pattern (a CHECK takes no subquery).
CREATE FUNCTION mailroom.all_match(names text[], pattern text) RETURNS boolean
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT NOT EXISTS (SELECT FROM unnest(names) AS n(v) WHERE n.v IS NULL OR n.v !~ pattern)
$$;
COMMENT ON FUNCTION mailroom.all_match(text[], text) IS
    'Whether every element of the array is non-NULL and matches the pattern (for CHECK constraints, which take no subquery).';

ALTER TABLE mailroom.sender_accounts
    ADD COLUMN streams text[] NOT NULL DEFAULT '{transactional,broadcast}',
    ADD COLUMN from_domains text[],
    ADD CONSTRAINT sender_accounts_streams CHECK (
        cardinality(streams) BETWEEN 1 AND 20 AND array_ndims(streams) = 1
        AND mailroom.all_match(streams, '^[a-z][a-z0-9_-]{0,31}$')),
    ADD CONSTRAINT sender_accounts_from_domains CHECK (
        from_domains IS NULL OR (cardinality(from_domains) BETWEEN 1 AND 50 AND array_ndims(from_domains) = 1
        AND mailroom.all_match(from_domains, '^[a-z0-9]([a-z0-9-]{0,62}\.)+[a-z0-9-]{1,63}$')));
COMMENT ON COLUMN mailroom.sender_accounts.streams IS
    'The message streams whose email this account sends (transactional, broadcast, or names of the operator''s own); a claim takes email of these only.';
COMMENT ON COLUMN mailroom.sender_accounts.from_domains IS
    'The domains an email sent through this account may have its own From in (lower case); NULL: the domain of the account''s from_email only.';

ALTER TABLE mailroom.email_queue
    ADD COLUMN stream text NOT NULL DEFAULT 'transactional',
    ADD COLUMN from_email text,
    ADD COLUMN from_name text,
    ADD CONSTRAINT email_queue_stream CHECK (stream ~ '^[a-z][a-z0-9_-]{0,31}$'),
    ADD CONSTRAINT email_queue_from_email CHECK (from_email IS NULL OR mailroom.address_problem(from_email) IS NULL),
    ADD CONSTRAINT email_queue_from_name CHECK (
        from_name IS NULL OR (from_email IS NOT NULL AND length(from_name) <= 255
                              AND mailroom.header_text_problem(from_name) IS NULL));
COMMENT ON COLUMN mailroom.email_queue.stream IS
    'The message stream: only a sender account serving it sends the email (transactional by default, broadcast for email that is not transactional).';
COMMENT ON COLUMN mailroom.email_queue.from_email IS
    'The email''s own From address (NULL: the sending account''s); only an account that may send for its domain sends it.';
COMMENT ON COLUMN mailroom.email_queue.from_name IS 'The display name of the email''s own From.';
-- Unsent campaign mail (and mail that may be retried) moves to the broadcast stream.
UPDATE mailroom.email_queue SET stream = 'broadcast'
WHERE NOT transactional AND status NOT IN ('sent', 'bounced', 'cancelled');

-- The claim reads one stream at a time, in priority order.
DROP INDEX mailroom.email_queue_claim_idx;
CREATE INDEX email_queue_claim_idx ON mailroom.email_queue (stream, priority DESC, scheduled_for, id)
    WHERE status = 'pending';

-- The domains an account may send a From in (its from_domains, else its own From's domain).
CREATE FUNCTION mailroom.sender_from_domains(from_domains text[], from_email text) RETURNS text[]
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT coalesce(from_domains, ARRAY[lower(split_part(from_email, '@', 2))])
$$;
COMMENT ON FUNCTION mailroom.sender_from_domains(text[], text) IS
    'The domains a sender account may send a From in: its from_domains, else its own From''s domain.';

-- Which of the given (From, stream) pairs no sender account of the stream may send: their places, from 1.
-- Asked by the enqueue functions, and by the Python API before it writes, so a refusal names the email.
CREATE FUNCTION mailroom.from_refusals(from_email text[], stream text[]) RETURNS integer[]
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
    SELECT coalesce(array_agg(g.n ORDER BY g.n), '{}')
    FROM unnest(from_email, stream) WITH ORDINALITY AS g(f, s, n)
    WHERE g.f IS NOT NULL
      AND NOT EXISTS (
          SELECT FROM mailroom.sender_accounts a
          WHERE g.s = ANY(a.streams)
            AND lower(split_part(g.f, '@', 2)) = ANY(mailroom.sender_from_domains(a.from_domains, a.from_email)))
$$;
REVOKE EXECUTE ON FUNCTION mailroom.from_refusals FROM PUBLIC;
COMMENT ON FUNCTION mailroom.from_refusals(text[], text[]) IS
    'The places (from 1) of the (From, stream) pairs that no sender account serving the stream may send: their From domain is none of its from_domains. Granted to application roles by mailroom.grant_app_role.';
