ALTER TABLE mailroom.email_queue
    DROP COLUMN correlation_id,
    DROP COLUMN tracestate,
    DROP COLUMN traceparent;
