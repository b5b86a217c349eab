DROP TRIGGER email_queue_content_rules ON mailroom.email_queue;
DROP FUNCTION mailroom.email_queue_content_rules();
DROP FUNCTION mailroom.email_content_problem(mailroom.email_queue);
DROP FUNCTION mailroom.recipients_problem(mailroom.email_queue);
DROP FUNCTION mailroom.headers_problem(jsonb);
DROP FUNCTION mailroom.address_list_problem(text, text[]);
DROP FUNCTION mailroom.address_problem(text);
DROP FUNCTION mailroom.header_text_problem(text);
DROP FUNCTION mailroom.content_rules();
