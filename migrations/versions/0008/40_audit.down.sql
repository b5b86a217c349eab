-- Undo 40_audit.sql: the chain's trigger, head, pruning path and columns go; the trail's guard is again the
-- plain append-only one of revision 0006 (rows pruned meanwhile stay gone).
DROP FUNCTION mailroom.audit_prune(timestamptz, text, text);
DROP TABLE mailroom.audit_chain;
DROP FUNCTION mailroom.audit_chain_guard();
DROP TRIGGER audit_log_chain ON mailroom.audit_log;
DROP FUNCTION mailroom.audit_log_chain();
CREATE OR REPLACE FUNCTION mailroom.audit_log_append_only() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'mailroom.audit_log is append-only (% refused)', TG_OP
        USING ERRCODE = 'insufficient_privilege';
END $$;
DROP FUNCTION mailroom.audit_prune_allows(bigint);
DROP INDEX mailroom.audit_log_seq_idx;
ALTER TABLE mailroom.audit_log DROP COLUMN seq, DROP COLUMN prev_hash, DROP COLUMN row_hash;
DROP FUNCTION mailroom.audit_row_hash(bigint, bigint, timestamptz, text, text, text, text, bigint, jsonb, text);
DROP FUNCTION mailroom.audit_field(text);
