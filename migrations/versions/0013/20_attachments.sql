-- Attachments and inline images. Each content is stored once, under its SHA-256, however many emails
-- carry it (a terms-and-conditions PDF on every receipt is one row); each email names its files in
-- order with their filename, content type and, for an inline image, the Content-ID its HTML refers
-- to (cid:...). Contents go with the last email that carries them (archiving, retention, privacy
-- erasure all delete through the email: mailroom.drop_unused_attachments).
CREATE TABLE mailroom.attachment_contents (
    sha256 bytea PRIMARY KEY,
    content bytea NOT NULL,
    size integer GENERATED ALWAYS AS (octet_length(content)) STORED,
    created_at timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT attachment_contents_sha256 CHECK (sha256 = sha256(content)),
    -- The database's own ceiling; MAILROOM_MAX_ATTACHMENT_BYTES is the configured one (checked at enqueue).
    CONSTRAINT attachment_contents_size CHECK (octet_length(content) BETWEEN 1 AND 26214400)
);
-- Files are mostly compressed already (PDF, PNG, ZIP): stored out of line, not compressed again.
ALTER TABLE mailroom.attachment_contents ALTER COLUMN content SET STORAGE EXTERNAL;
COMMENT ON TABLE mailroom.attachment_contents IS
    'Attachment bytes, once per SHA-256, shared by the emails that carry them (mailroom.email_attachments); deleted with the last of those. No read-only role reads content.';

CREATE TABLE mailroom.email_attachments (
    email_id bigint NOT NULL,
    position smallint NOT NULL,
    sha256 bytea NOT NULL,
    filename text NOT NULL,
    content_type text NOT NULL,
    content_id text,
    PRIMARY KEY (email_id, position),
    CONSTRAINT email_attachments_email FOREIGN KEY (email_id) REFERENCES mailroom.email_queue (id) ON DELETE CASCADE,
    CONSTRAINT email_attachments_content FOREIGN KEY (sha256) REFERENCES mailroom.attachment_contents (sha256),
    CONSTRAINT email_attachments_position CHECK (position BETWEEN 1 AND 100),
    -- A name, never a path, and nothing that could end a header line.
    CONSTRAINT email_attachments_filename CHECK (
        length(filename) BETWEEN 1 AND 255 AND filename !~ '[\x01-\x1f\x7f/\\]' AND filename NOT IN ('.', '..')),
    -- type/subtype, lower case, without parameters (RFC 6838's restricted names).
    CONSTRAINT email_attachments_content_type CHECK (
        content_type ~ '^[a-z0-9][a-z0-9!#$&^_.+-]{0,126}/[a-z0-9][a-z0-9!#$&^_.+-]{0,126}$'),
    -- An inline part's Content-ID, as its HTML names it after cid: (written <...> in the header).
    CONSTRAINT email_attachments_content_id CHECK (
        content_id IS NULL OR content_id ~ '^[A-Za-z0-9._+-]{1,64}(@[A-Za-z0-9.-]{1,190})?$')
);
CREATE INDEX email_attachments_sha256_idx ON mailroom.email_attachments (sha256);
COMMENT ON TABLE mailroom.email_attachments IS
    'The files of an email, in order: which content (mailroom.attachment_contents), under which filename and content type, and for an inline image its Content-ID. Deleted with the email.';

-- How many files an email carries, written with it: the claim hands it to the worker, which loads the
-- files of an email only when it builds that email.
ALTER TABLE mailroom.email_queue ADD COLUMN attachments smallint NOT NULL DEFAULT 0;
ALTER TABLE mailroom.email_queue ADD CONSTRAINT email_queue_attachments CHECK (attachments BETWEEN 0 AND 100);
COMMENT ON COLUMN mailroom.email_queue.attachments IS
    'How many files (mailroom.email_attachments) the email carries; 0 for most.';

-- Contents no email carries any more. One that an enqueue in flight has just locked (it is about to
-- carry it) is skipped, and a later call takes it if it is still unused.
CREATE FUNCTION mailroom.drop_unused_attachments(candidates bytea[] DEFAULT NULL) RETURNS bigint
LANGUAGE sql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
    WITH unused AS (
        SELECT c.sha256 FROM mailroom.attachment_contents c
        WHERE (candidates IS NULL OR c.sha256 = ANY(candidates))
          AND NOT EXISTS (SELECT FROM mailroom.email_attachments a WHERE a.sha256 = c.sha256)
        FOR UPDATE SKIP LOCKED
    ), dropped AS (
        DELETE FROM mailroom.attachment_contents c USING unused u WHERE c.sha256 = u.sha256 RETURNING 1
    )
    SELECT count(*) FROM dropped
$$;
REVOKE EXECUTE ON FUNCTION mailroom.drop_unused_attachments FROM PUBLIC;
COMMENT ON FUNCTION mailroom.drop_unused_attachments(bytea[]) IS
    'Delete attachment contents no email carries (among candidates, or all); skips one an enqueue has locked. Returns how many were deleted.';

CREATE FUNCTION mailroom.email_attachments_after_delete() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    PERFORM mailroom.drop_unused_attachments(ARRAY(SELECT DISTINCT o.sha256 FROM gone o));
    RETURN NULL;
END $$;
CREATE TRIGGER email_attachments_drop_unused AFTER DELETE ON mailroom.email_attachments
    REFERENCING OLD TABLE AS gone FOR EACH STATEMENT EXECUTE FUNCTION mailroom.email_attachments_after_delete();
COMMENT ON FUNCTION mailroom.email_attachments_after_delete() IS
    'After files are deleted (with their email, by archiving, retention or privacy erasure): the contents no email carries any more go too.';
COMMENT ON TRIGGER email_attachments_drop_unused ON mailroom.email_attachments IS
    'Deletes the contents the deleted files leave unused (mailroom.drop_unused_attachments).';

-- Store the files of emails just written (called by the enqueue functions as the schema's owner):
-- each distinct content once per SHA-256, then each email's files, which name their content by its
-- place in `contents` (a PDF on a thousand emails crosses the wire once). A content that another
-- transaction deletes between finding it here and locking it is stored again, so an enqueue never
-- fails on that race.
CREATE FUNCTION mailroom.store_attachments(
    file_email bigint[], file_position integer[], file_name text[], file_type text[], file_cid text[],
    file_data integer[], contents bytea[]
) RETURNS void
LANGUAGE plpgsql VOLATILE SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    hashes bytea[];
    locked integer;
BEGIN
    IF coalesce(cardinality(file_email), 0) = 0 THEN
        RETURN;
    END IF;
    IF EXISTS (SELECT FROM unnest(contents) AS c(b) WHERE c.b IS NULL OR octet_length(c.b) = 0) THEN
        RAISE EXCEPTION 'attachments: a file without content' USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF EXISTS (SELECT FROM unnest(file_data) AS d(i) WHERE d.i IS NULL OR d.i NOT BETWEEN 1 AND cardinality(contents)) THEN
        RAISE EXCEPTION 'attachments: a file names no content' USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF EXISTS (SELECT FROM unnest(file_email, file_data) AS f(e, d) GROUP BY f.e
               HAVING sum(octet_length(contents[f.d])) > 26214400) THEN
        RAISE EXCEPTION 'attachments: more than 25 MiB of files in one email'
            USING ERRCODE = 'program_limit_exceeded';
    END IF;
    hashes := ARRAY(SELECT sha256(c.b) FROM unnest(contents) WITH ORDINALITY AS c(b, i) ORDER BY c.i);
    LOOP
        INSERT INTO mailroom.attachment_contents (sha256, content)
        SELECT DISTINCT ON (h.h) h.h, h.b FROM unnest(hashes, contents) AS h(h, b)
        ON CONFLICT (sha256) DO NOTHING;
        SELECT count(*) INTO locked FROM (
            SELECT FROM mailroom.attachment_contents c WHERE c.sha256 = ANY(hashes) FOR KEY SHARE) l;
        EXIT WHEN locked = (SELECT count(DISTINCT h) FROM unnest(hashes) AS h);
    END LOOP;
    INSERT INTO mailroom.email_attachments (email_id, position, sha256, filename, content_type, content_id)
    SELECT f.e, f.p, hashes[f.d], f.n, f.t, f.c
    FROM unnest(file_email, file_position, file_name, file_type, file_cid, file_data) AS f(e, p, n, t, c, d);
END $$;
REVOKE EXECUTE ON FUNCTION mailroom.store_attachments FROM PUBLIC;
COMMENT ON FUNCTION mailroom.store_attachments(bigint[], integer[], text[], text[], text[], integer[], bytea[]) IS
    'Store the files of emails the enqueue functions just wrote: each content once per SHA-256, then each email''s files (file_data: the place of its content in contents). Called by those functions, not granted to anyone.';

-- No read-only role reads an attachment's content or its filename (which often names a person).
CREATE OR REPLACE FUNCTION mailroom.secret_columns() RETURNS TABLE(table_name name, column_name name)
    LANGUAGE sql IMMUTABLE
    AS $$
    VALUES ('sender_accounts'::name, 'smtp_password_encrypted'::name),
           ('sender_accounts', 'dkim_private_key_encrypted'),
           ('sender_accounts', 'oauth_client_secret_encrypted'),
           ('sender_accounts', 'oauth_refresh_token_encrypted'),
           ('tokens', 'secret'), ('tokens', 'secret_hash'), ('tokens', 'code'),
           ('email_queue', 'text_body'), ('email_queue', 'html_body'), ('email_queue', 'template_data'),
           ('email_queue', 'headers'), ('email_queue', 'tracking_token'), ('email_queue', 'unsubscribe_token'),
           -- a Message-ID authenticates reports about its recipient (worker.core.recipient_tokens)
           ('email_queue', 'message_id'), ('sent_journal', 'message_id'),
           ('archived_emails', 'unsubscribe_token'),
           ('tracked_links', 'token'), ('tracked_links', 'url'),
           ('click_events', 'link_token'), ('click_events', 'url'),
           ('bounce_quarantine', 'raw'),
           ('inbox', 'payload'),
           ('attachment_contents', 'content'), ('email_attachments', 'filename')
$$;
