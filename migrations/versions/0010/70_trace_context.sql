-- The W3C trace context of the code that enqueued an email, and the correlation id of the event it came
-- from: the worker's delivery spans continue that trace, so one trace runs from an order event to the
-- relay's reply, across processes. Nullable: an email enqueued outside any trace has none.
--
-- The Python API writes the columns itself. SQL callers (mailroom.enqueue, or an INSERT) set them for
-- their transaction with set_config('mailroom.traceparent', ..., true) (and mailroom.tracestate,
-- mailroom.correlation_id): the columns' defaults read those settings, so mailroom.enqueue takes them
-- without a change of its signature. A malformed value is refused by the checks below (23514); the
-- worker checks the stored value again and ignores one it cannot read.
ALTER TABLE mailroom.email_queue
    ADD COLUMN traceparent text DEFAULT nullif(current_setting('mailroom.traceparent', true), ''),
    ADD COLUMN tracestate text DEFAULT nullif(current_setting('mailroom.tracestate', true), ''),
    ADD COLUMN correlation_id text DEFAULT nullif(current_setting('mailroom.correlation_id', true), ''),
    -- version 00 (the only one defined), lower-case hex, neither id all zeros (the spec's invalid ids)
    ADD CONSTRAINT email_queue_traceparent_format CHECK (
        traceparent ~ '^00-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}$'
        AND substr(traceparent, 4, 32) <> repeat('0', 32)
        AND substr(traceparent, 37, 16) <> repeat('0', 16)),
    -- printable ASCII within the spec's 512 characters, and only beside a traceparent
    ADD CONSTRAINT email_queue_tracestate_format CHECK (
        tracestate IS NULL OR (traceparent IS NOT NULL AND length(tracestate) <= 512 AND tracestate ~ '^[ -~]+$')),
    ADD CONSTRAINT email_queue_correlation_id_format CHECK (
        length(correlation_id) BETWEEN 1 AND 255 AND correlation_id !~ '[[:cntrl:]]');

COMMENT ON COLUMN mailroom.email_queue.traceparent IS 'W3C traceparent of the code that enqueued the email (its span); the worker''s delivery spans are its children. Default: the transaction''s mailroom.traceparent setting.';
COMMENT ON COLUMN mailroom.email_queue.tracestate IS 'W3C tracestate that came with traceparent (vendors'' trace data, passed on unread). Default: the transaction''s mailroom.tracestate setting.';
COMMENT ON COLUMN mailroom.email_queue.correlation_id IS 'The correlation id of the event the email came from (an order event''s, or its message id); in the worker''s logs and spans. Default: the transaction''s mailroom.correlation_id setting.';
