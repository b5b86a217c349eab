DROP VIEW mailroom.my_emails;
DROP FUNCTION mailroom.enqueue;
DROP FUNCTION mailroom.normalise_addresses(text[]);
DROP FUNCTION mailroom.normalise_address(text);
