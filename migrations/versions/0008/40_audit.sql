-- A tamper-evident audit trail (issue 23), like the signature chain: every audit row carries its position in
-- the chain (`seq`), the hash of the row before it (`prev_hash`) and its own hash (`row_hash`) over a canonical
-- encoding of its content. The database computes them in a trigger, so every writer (mailroom.audit(), a plain
-- INSERT, COPY, the console) is chained, and the trigger locks the one chain-head row, so concurrent writers
-- queue behind each other instead of forking the chain. Editing a row, removing one or inserting one out of
-- chain (as a superuser who disables the triggers could) leaves a chain that `mailroom audit verify` names
-- the first broken row of; a head exported with `mailroom audit head` catches the newest rows' removal too.
--
-- The hash is SHA-256 (core since PostgreSQL 11; pgcrypto is not needed) over
--   'mailroom-audit/1,' || one netstring per field: seq, id, at (microseconds since the Unix epoch), db_role,
--   actor, action, target, affected, detail (jsonb's text form), prev_hash
-- where a netstring is `<UTF-8 byte length>:<text>,` and NULL is `-,`. worker/ops/audit_chain.py computes the
-- same in Python to verify, without trusting any function in the database.
--
-- Rows leave the trail only through mailroom.audit_prune(before, reason, actor): the oldest rows, up to a
-- position recorded in the head as the anchor (`pruned_seq`, `pruned_hash`: the kept chain's first prev_hash)
-- and in the `audit.prune` row it writes, so the chain still verifies after pruning.

-- One field of the canonical encoding (a netstring; NULL as `-,`).
CREATE FUNCTION mailroom.audit_field(value text) RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT CASE WHEN value IS NULL THEN '-,'
                ELSE octet_length(convert_to(value, 'UTF8'))::text || ':' || value || ',' END
$$;
COMMENT ON FUNCTION mailroom.audit_field(text) IS
    'One field of an audit row''s canonical encoding: <UTF-8 byte length>:<text>, and NULL as -,';

-- An audit row's hash, as worker/ops/audit_chain.py computes it to verify.
CREATE FUNCTION mailroom.audit_row_hash(
    seq bigint, id bigint, at timestamptz, db_role text, actor text, action text, target text,
    affected bigint, detail jsonb, prev_hash text
) RETURNS text LANGUAGE sql STABLE PARALLEL SAFE AS $$
    SELECT encode(sha256(convert_to('mailroom-audit/1,'
        || mailroom.audit_field(seq::text) || mailroom.audit_field(id::text)
        || mailroom.audit_field((extract(epoch FROM at) * 1000000)::bigint::text)
        || mailroom.audit_field(db_role) || mailroom.audit_field(actor) || mailroom.audit_field(action)
        || mailroom.audit_field(target) || mailroom.audit_field(affected::text)
        || mailroom.audit_field(detail::text) || mailroom.audit_field(prev_hash), 'UTF8')), 'hex')
$$;
COMMENT ON FUNCTION mailroom.audit_row_hash(bigint, bigint, timestamptz, text, text, text, text, bigint, jsonb, text)
    IS 'SHA-256 (hex) of an audit row''s canonical encoding: its row_hash';

ALTER TABLE mailroom.audit_log
    ADD COLUMN seq bigint,
    ADD COLUMN prev_hash text,
    ADD COLUMN row_hash text;

-- The one chain head: the newest position, its row and hash, and the anchor left by pruning.
CREATE TABLE mailroom.audit_chain (
    only_row    boolean PRIMARY KEY DEFAULT true CONSTRAINT audit_chain_one_row CHECK (only_row),
    seq         bigint NOT NULL DEFAULT 0 CONSTRAINT audit_chain_seq_positive CHECK (seq >= 0),
    last_id     bigint,
    last_hash   text CONSTRAINT audit_chain_last_hash_hex CHECK (last_hash ~ '^[0-9a-f]{64}$'),
    pruned_seq  bigint NOT NULL DEFAULT 0,
    pruned_hash text CONSTRAINT audit_chain_pruned_hash_hex CHECK (pruned_hash ~ '^[0-9a-f]{64}$'),
    updated_at  timestamptz NOT NULL DEFAULT clock_timestamp(),
    CONSTRAINT audit_chain_head_set CHECK ((seq = 0) = (last_hash IS NULL) AND (seq = 0) = (last_id IS NULL)),
    CONSTRAINT audit_chain_pruned_within CHECK (pruned_seq BETWEEN 0 AND seq),
    CONSTRAINT audit_chain_pruned_set CHECK ((pruned_seq = 0) = (pruned_hash IS NULL))
);
COMMENT ON TABLE mailroom.audit_chain IS
    'The audit trail''s chain head (one row), moved by the audit_log_chain trigger; export it with mailroom audit head';
COMMENT ON COLUMN mailroom.audit_chain.seq IS 'Position of the newest audit row (0: none yet)';
COMMENT ON COLUMN mailroom.audit_chain.last_id IS 'Id of the newest audit row';
COMMENT ON COLUMN mailroom.audit_chain.last_hash IS 'row_hash of the newest audit row';
COMMENT ON COLUMN mailroom.audit_chain.pruned_seq IS
    'Rows at positions up to this one were removed by mailroom.audit_prune (0: none)';
COMMENT ON COLUMN mailroom.audit_chain.pruned_hash IS
    'row_hash of the last pruned row: the prev_hash the oldest kept row must carry';

-- Rows already written are chained in id order (the order they were written in). The trail's own guard
-- refuses UPDATE, so it is switched off for this one pass inside the migration's transaction.
ALTER TABLE mailroom.audit_log DISABLE TRIGGER audit_log_append_only;
DO $$
DECLARE
    r record;
    pos bigint := 0;
    previous text;
    last bigint;
BEGIN
    FOR r IN SELECT * FROM mailroom.audit_log ORDER BY id LOOP
        pos := pos + 1;
        UPDATE mailroom.audit_log a
        SET seq = pos, prev_hash = previous,
            row_hash = mailroom.audit_row_hash(pos, r.id, r.at, r.db_role, r.actor, r.action, r.target,
                                               r.affected, r.detail, previous)
        WHERE a.id = r.id
        RETURNING a.row_hash INTO previous;
        last := r.id;
    END LOOP;
    INSERT INTO mailroom.audit_chain (seq, last_id, last_hash) VALUES (pos, last, previous);
END $$;
ALTER TABLE mailroom.audit_log ENABLE TRIGGER audit_log_append_only;

ALTER TABLE mailroom.audit_log
    ALTER COLUMN seq SET NOT NULL,
    ALTER COLUMN row_hash SET NOT NULL,
    ADD CONSTRAINT audit_log_seq_positive CHECK (seq >= 1),
    ADD CONSTRAINT audit_log_prev_hash_hex CHECK (prev_hash ~ '^[0-9a-f]{64}$'),
    ADD CONSTRAINT audit_log_row_hash_hex CHECK (row_hash ~ '^[0-9a-f]{64}$');
CREATE UNIQUE INDEX audit_log_seq_idx ON mailroom.audit_log (seq);
COMMENT ON COLUMN mailroom.audit_log.seq IS 'Position in the audit chain (set by the audit_log_chain trigger)';
COMMENT ON COLUMN mailroom.audit_log.prev_hash IS
    'row_hash of the row at the previous position (NULL for the first row of a never-pruned chain)';
COMMENT ON COLUMN mailroom.audit_log.row_hash IS
    'SHA-256 of this row''s canonical encoding (mailroom.audit_row_hash), prev_hash included';

-- True while mailroom.audit_prune() removes rows up to position `through`: the transaction-local setting names an
-- `audit.prune` row written in this transaction whose detail covers that position.
CREATE FUNCTION mailroom.audit_prune_allows(through bigint) RETURNS boolean
LANGUAGE sql STABLE AS $$
    SELECT EXISTS (
        SELECT 1 FROM mailroom.audit_log a
        WHERE a.id = CASE WHEN current_setting('mailroom.audit_prune', true) ~ '^[0-9]{1,18}$'
                          THEN current_setting('mailroom.audit_prune', true)::bigint END
          AND a.action = 'audit.prune' AND a.at >= now()
          AND through <= (a.detail ->> 'through_seq')::bigint)
$$;
COMMENT ON FUNCTION mailroom.audit_prune_allows(bigint) IS
    'True inside mailroom.audit_prune() for positions its audit.prune row covers';

-- Append-only as before, but for the oldest rows mailroom.audit_prune() removes.
CREATE OR REPLACE FUNCTION mailroom.audit_log_append_only() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'DELETE' AND TG_LEVEL = 'ROW' AND mailroom.audit_prune_allows(OLD.seq) THEN
        RETURN OLD;
    END IF;
    RAISE EXCEPTION 'mailroom.audit_log is append-only (% refused)', TG_OP
        USING ERRCODE = 'insufficient_privilege',
              HINT = 'the oldest rows leave only through mailroom.audit_prune(before, reason, actor)';
END $$;

-- Every new row takes the next position and links to the head's hash; the head row's lock, held to the end of
-- the writing transaction, queues concurrent writers (under REPEATABLE READ a second writer gets a
-- serialization failure instead: never a fork). Whatever position or hashes the writer gave are replaced.
-- SECURITY DEFINER: any role allowed to write an audit row moves the head, which no role may write directly.
CREATE FUNCTION mailroom.audit_log_chain() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    head record;
BEGIN
    SELECT c.seq, c.last_hash INTO head FROM mailroom.audit_chain c WHERE c.only_row FOR UPDATE;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'the audit chain has no head row (mailroom.audit_chain was emptied)'
            USING ERRCODE = 'insufficient_privilege', HINT = 'run mailroom audit verify';
    END IF;
    NEW.seq := head.seq + 1;
    NEW.prev_hash := head.last_hash;
    NEW.row_hash := mailroom.audit_row_hash(NEW.seq, NEW.id, NEW.at, NEW.db_role, NEW.actor, NEW.action,
                                            NEW.target, NEW.affected, NEW.detail, NEW.prev_hash);
    UPDATE mailroom.audit_chain c
    SET seq = NEW.seq, last_id = NEW.id, last_hash = NEW.row_hash, updated_at = clock_timestamp()
    WHERE c.only_row;
    RETURN NEW;
END $$;
COMMENT ON FUNCTION mailroom.audit_log_chain() IS
    'Chains each new audit row (seq, prev_hash, row_hash) and moves mailroom.audit_chain, under its row lock';
CREATE TRIGGER audit_log_chain BEFORE INSERT ON mailroom.audit_log
    FOR EACH ROW EXECUTE FUNCTION mailroom.audit_log_chain();

-- The head changes only from the chain trigger (trigger depth > 1) or inside mailroom.audit_prune().
CREATE FUNCTION mailroom.audit_chain_guard() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_LEVEL = 'ROW' AND TG_OP = 'UPDATE'
       AND (pg_trigger_depth() > 1 OR mailroom.audit_prune_allows(NEW.pruned_seq)) THEN
        RETURN NEW;
    END IF;
    RAISE EXCEPTION 'mailroom.audit_chain is kept by the audit trail''s trigger (% refused)', TG_OP
        USING ERRCODE = 'insufficient_privilege';
END $$;
CREATE TRIGGER audit_chain_guard BEFORE INSERT OR UPDATE OR DELETE ON mailroom.audit_chain
    FOR EACH ROW EXECUTE FUNCTION mailroom.audit_chain_guard();
CREATE TRIGGER audit_chain_no_truncate BEFORE TRUNCATE ON mailroom.audit_chain
    FOR EACH STATEMENT EXECUTE FUNCTION mailroom.audit_chain_guard();

-- The one way audit rows leave: every row of the chain's oldest stretch written before `before` (up to the
-- first row at or after it, so the kept rows stay one unbroken chain). Writes an `audit.prune` row naming the
-- anchor (`through_seq`, `through_hash`) and records it in the head, in one transaction; returns how many rows
-- went. A missing reason or actor raises 22023 (invalid_parameter_value).
CREATE FUNCTION mailroom.audit_prune(before timestamptz, reason text, actor text) RETURNS bigint
LANGUAGE plpgsql AS $$
DECLARE
    head record;
    through bigint;
    through_hash text;
    removed bigint;
    audit_id bigint;
BEGIN
    IF audit_prune.before IS NULL OR coalesce(btrim(reason), '') = '' OR coalesce(btrim(actor), '') = '' THEN
        RAISE EXCEPTION 'pruning the audit trail needs a time, a reason and an actor'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    -- The head's lock waits for audit writers in flight and keeps new ones out until this commits.
    SELECT c.seq, c.pruned_seq INTO head FROM mailroom.audit_chain c WHERE c.only_row FOR UPDATE;
    SELECT coalesce(min(a.seq) - 1, head.seq) INTO through
    FROM mailroom.audit_log a WHERE a.at >= audit_prune.before;
    IF through <= head.pruned_seq THEN
        RETURN 0;
    END IF;
    SELECT a.row_hash INTO through_hash FROM mailroom.audit_log a WHERE a.seq = through;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'audit chain position % is missing: the chain is broken', through
            USING ERRCODE = 'data_corrupted', HINT = 'run mailroom audit verify';
    END IF;
    SELECT count(*) INTO removed FROM mailroom.audit_log a WHERE a.seq <= through;
    audit_id := mailroom.audit('audit.prune', actor, NULL, removed,
        jsonb_build_object('reason', reason, 'before', audit_prune.before, 'through_seq', through,
                           'through_hash', through_hash, 'previously_pruned_seq', head.pruned_seq));
    PERFORM set_config('mailroom.audit_prune', audit_id::text, true);
    UPDATE mailroom.audit_chain c SET pruned_seq = through, pruned_hash = through_hash WHERE c.only_row;
    DELETE FROM mailroom.audit_log a WHERE a.seq <= through;
    PERFORM set_config('mailroom.audit_prune', '', true);
    RETURN removed;
END $$;
-- Only the schema's owner prunes (it runs as its caller, so another role would be refused anyway).
REVOKE EXECUTE ON FUNCTION mailroom.audit_prune(timestamptz, text, text) FROM PUBLIC;
COMMENT ON FUNCTION mailroom.audit_prune(timestamptz, text, text) IS
    'Remove the audit trail''s oldest rows written before a time, audited, leaving a verifiable anchor';
