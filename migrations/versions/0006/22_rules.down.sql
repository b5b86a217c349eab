DROP TRIGGER email_queue_content_rules_update ON mailroom.email_queue;
DROP TRIGGER email_queue_content_rules_insert ON mailroom.email_queue;
DROP FUNCTION mailroom.email_queue_content_rules_update();
DROP FUNCTION mailroom.email_queue_content_rules_insert();
DROP FUNCTION mailroom.refuse_content(text);
DROP FUNCTION mailroom.email_content_problem(mailroom.email_queue);
DROP FUNCTION mailroom.recipients_problem(mailroom.email_queue);
DROP FUNCTION mailroom.headers_problem(jsonb);
DROP FUNCTION mailroom.address_list_problem(text, text[]);
DROP FUNCTION mailroom.address_problem(text);
DROP FUNCTION mailroom.header_text_problem(text);
DROP FUNCTION mailroom.content_rules();
ALTER TABLE mailroom.email_queue
    ADD CONSTRAINT email_queue_subject_check CHECK (subject !~ '[\x00-\x1f\x7f]'),
    ADD CONSTRAINT email_queue_recipient_name_check CHECK (recipient_name !~ '[\x00-\x1f\x7f]'),
    ADD CONSTRAINT email_queue_recipient_email_check
        CHECK (length(recipient_email) BETWEEN 3 AND 254 AND recipient_email !~ '[\x00-\x20\x7f<>]');
