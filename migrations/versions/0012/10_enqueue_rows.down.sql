DROP FUNCTION mailroom.schema_revision();
DROP FUNCTION mailroom.enqueue_templates();
DROP FUNCTION mailroom.enqueue_rows;
