-- Undo 30_signatures.sql.
DROP FUNCTION mailroom.signature_maintenance(text, text, text);
DROP TRIGGER documents_signature_head ON mailroom.documents;
DROP FUNCTION mailroom.documents_create_signature_head();
DROP TRIGGER signatures_chain_head ON mailroom.signatures;
DROP FUNCTION mailroom.signatures_advance_head();
DROP TRIGGER signatures_refuse_truncate ON mailroom.signatures;
DROP TRIGGER signatures_refuse_change ON mailroom.signatures;
DROP FUNCTION mailroom.signatures_append_only();
DROP TABLE mailroom.signature_heads;
DROP FUNCTION mailroom.signature_heads_guard();
DROP FUNCTION mailroom.signature_maintenance_allows(text);
DROP FUNCTION mailroom.signature_link_hash(text, text);
DROP INDEX mailroom.signatures_seq_idx;
ALTER TABLE mailroom.signatures DROP COLUMN seq;
