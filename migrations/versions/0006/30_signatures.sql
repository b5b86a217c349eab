-- A tamper-evident signature chain (issue 14): signatures are append-only, each has its position in its
-- document's chain (`seq`, signed by payload version 2), and a chain head per document (how many
-- signatures, and the link hash the next one must carry) is kept by a trigger in the inserting
-- transaction, so deleting the newest signature, a middle one or all of them leaves a head that says so.
--
-- Refusals: UPDATE, DELETE or TRUNCATE of mailroom.signatures, and any direct write of
-- mailroom.signature_heads, raise SQLSTATE 42501 (insufficient_privilege), like mailroom.audit_log.
-- A signature inserted at a position other than the next one raises 23514 (check_violation).
-- The one way to remove signatures is mailroom.signature_maintenance(doc_id, reason, actor), which
-- writes a `signatures.maintenance` audit row in the same transaction and resets the head.

-- Positions of the signatures already stored, in chain (id) order.
ALTER TABLE mailroom.signatures ADD COLUMN seq integer CHECK (seq >= 1);
UPDATE mailroom.signatures s SET seq = p.seq
FROM (SELECT id, row_number() OVER (PARTITION BY doc_id ORDER BY id)::integer AS seq
      FROM mailroom.signatures) p
WHERE p.id = s.id;
ALTER TABLE mailroom.signatures ALTER COLUMN seq SET NOT NULL;
CREATE UNIQUE INDEX signatures_seq_idx ON mailroom.signatures (doc_id, seq);

-- What the next signature's prev_hash must be: SHA-256 of "payload_hash:signature" (as in Python's link_hash).
CREATE FUNCTION mailroom.signature_link_hash(payload_hash text, signature text) RETURNS text
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE AS $$
    SELECT encode(sha256(convert_to(payload_hash || ':' || signature, 'UTF8')), 'hex')
$$;

CREATE TABLE mailroom.signature_heads (
    doc_id      text PRIMARY KEY REFERENCES mailroom.documents (doc_id) ON DELETE CASCADE,
    count       integer NOT NULL DEFAULT 0 CHECK (count >= 0),
    last_hash   text CHECK (last_hash ~ '^[0-9a-f]{64}$'),
    updated_at  timestamptz NOT NULL DEFAULT clock_timestamp(),
    CHECK ((count = 0) = (last_hash IS NULL))
);
INSERT INTO mailroom.signature_heads (doc_id, count, last_hash)
SELECT d.doc_id, coalesce(t.seq, 0), mailroom.signature_link_hash(t.payload_hash, t.signature)
FROM mailroom.documents d
LEFT JOIN LATERAL (
    SELECT seq, payload_hash, signature FROM mailroom.signatures s
    WHERE s.doc_id = d.doc_id ORDER BY seq DESC LIMIT 1
) t ON true;

-- True while mailroom.signature_maintenance() works on `doc`: the transaction-local setting names a
-- `signatures.maintenance` audit row for that document written in this transaction, so even a hand-made
-- bypass leaves its audit row.
CREATE FUNCTION mailroom.signature_maintenance_allows(doc text) RETURNS boolean
LANGUAGE sql STABLE AS $$
    SELECT EXISTS (
        SELECT 1 FROM mailroom.audit_log a
        WHERE a.id = CASE WHEN current_setting('mailroom.signature_maintenance', true) ~ '^[0-9]{1,18}$'
                          THEN current_setting('mailroom.signature_maintenance', true)::bigint END
          AND a.action = 'signatures.maintenance' AND a.target = doc AND a.at >= now())
$$;

CREATE FUNCTION mailroom.signatures_append_only() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'DELETE' AND mailroom.signature_maintenance_allows(OLD.doc_id) THEN
        RETURN OLD;
    END IF;
    RAISE EXCEPTION 'mailroom.signatures is append-only (% refused)', TG_OP
        USING ERRCODE = 'insufficient_privilege',
              HINT = 'remove a document''s signatures with mailroom.signature_maintenance(doc_id, reason, actor)';
END $$;
-- Named to run after signatures_created_at (triggers fire in name order), which says "immutable" more precisely.
CREATE TRIGGER signatures_refuse_change BEFORE UPDATE OR DELETE ON mailroom.signatures
    FOR EACH ROW EXECUTE FUNCTION mailroom.signatures_append_only();
CREATE TRIGGER signatures_refuse_truncate BEFORE TRUNCATE ON mailroom.signatures
    FOR EACH STATEMENT EXECUTE FUNCTION mailroom.signatures_append_only();

-- Every new signature takes the next position of its document's chain and moves the head, in the
-- inserting transaction; the head row lock serialises writers of one document.
CREATE FUNCTION mailroom.signatures_advance_head() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    head_count integer;
BEGIN
    INSERT INTO mailroom.signature_heads (doc_id) VALUES (NEW.doc_id) ON CONFLICT (doc_id) DO NOTHING;
    SELECT h.count INTO head_count FROM mailroom.signature_heads h WHERE h.doc_id = NEW.doc_id FOR UPDATE;
    IF NEW.seq IS NULL THEN
        NEW.seq := head_count + 1;
    ELSIF NEW.seq <> head_count + 1 THEN
        RAISE EXCEPTION 'signature of % at position % refused: the chain''s next position is %',
            NEW.doc_id, NEW.seq, head_count + 1
            USING ERRCODE = 'check_violation';
    END IF;
    UPDATE mailroom.signature_heads
    SET count = NEW.seq, last_hash = mailroom.signature_link_hash(NEW.payload_hash, NEW.signature),
        updated_at = clock_timestamp()
    WHERE doc_id = NEW.doc_id;
    RETURN NEW;
END $$;
CREATE TRIGGER signatures_chain_head BEFORE INSERT ON mailroom.signatures
    FOR EACH ROW EXECUTE FUNCTION mailroom.signatures_advance_head();

-- Every document has a head from its first moment, so a missing head row is itself evidence.
CREATE FUNCTION mailroom.documents_create_signature_head() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO mailroom.signature_heads (doc_id) VALUES (NEW.doc_id) ON CONFLICT (doc_id) DO NOTHING;
    RETURN NULL;
END $$;
CREATE TRIGGER documents_signature_head AFTER INSERT ON mailroom.documents
    FOR EACH ROW EXECUTE FUNCTION mailroom.documents_create_signature_head();

-- Heads change only from the triggers above (trigger depth > 1), a document's deletion (its
-- foreign-key cascade is a trigger too) or the maintenance path.
CREATE FUNCTION mailroom.signature_heads_guard() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_LEVEL = 'ROW' AND (pg_trigger_depth() > 1 OR mailroom.signature_maintenance_allows(
            CASE WHEN TG_OP = 'DELETE' THEN OLD.doc_id ELSE NEW.doc_id END)) THEN
        RETURN CASE WHEN TG_OP = 'DELETE' THEN OLD ELSE NEW END;
    END IF;
    RAISE EXCEPTION 'mailroom.signature_heads is kept by the signatures'' triggers (% refused)', TG_OP
        USING ERRCODE = 'insufficient_privilege';
END $$;
CREATE TRIGGER signature_heads_guard BEFORE INSERT OR UPDATE OR DELETE ON mailroom.signature_heads
    FOR EACH ROW EXECUTE FUNCTION mailroom.signature_heads_guard();
CREATE TRIGGER signature_heads_no_truncate BEFORE TRUNCATE ON mailroom.signature_heads
    FOR EACH STATEMENT EXECUTE FUNCTION mailroom.signature_heads_guard();

-- The one explicit, audited way to remove signatures: every signature of one document (a privacy
-- erase, a test document), with a `signatures.maintenance` audit row in the same transaction, and
-- the head reset to an empty chain. Returns how many signatures were removed. A missing reason or
-- actor raises 22023 (invalid_parameter_value); an unknown document raises P0002 (no_data_found).
CREATE FUNCTION mailroom.signature_maintenance(doc_id text, reason text, actor text) RETURNS bigint
LANGUAGE plpgsql AS $$
DECLARE
    doc CONSTANT text := signature_maintenance.doc_id;
    head record;
    removed bigint;
    audit_id bigint;
BEGIN
    IF coalesce(btrim(reason), '') = '' OR coalesce(btrim(actor), '') = '' THEN
        RAISE EXCEPTION 'signature maintenance needs a reason and an actor'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    -- The document lock waits for signers in flight, as they hold it while they sign.
    PERFORM 1 FROM mailroom.documents d WHERE d.doc_id = doc FOR NO KEY UPDATE;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'no document %', doc USING ERRCODE = 'no_data_found';
    END IF;
    SELECT h.count, h.last_hash INTO head FROM mailroom.signature_heads h WHERE h.doc_id = doc FOR UPDATE;
    SELECT count(*) INTO removed FROM mailroom.signatures s WHERE s.doc_id = doc;
    audit_id := mailroom.audit('signatures.maintenance', actor, doc, removed,
        jsonb_build_object('reason', reason, 'removed', removed,
                           'head_count', head.count, 'head_last_hash', head.last_hash));
    PERFORM set_config('mailroom.signature_maintenance', audit_id::text, true);
    DELETE FROM mailroom.signatures s WHERE s.doc_id = doc;
    INSERT INTO mailroom.signature_heads AS h (doc_id, count, last_hash) VALUES (doc, 0, NULL)
    ON CONFLICT ON CONSTRAINT signature_heads_pkey
    DO UPDATE SET count = 0, last_hash = NULL, updated_at = clock_timestamp();
    PERFORM set_config('mailroom.signature_maintenance', '', true);
    RETURN removed;
END $$;
