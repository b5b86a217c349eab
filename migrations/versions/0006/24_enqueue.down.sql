DROP VIEW mailroom.my_emails;
DROP FUNCTION mailroom.enqueue(text[], text, text, text, text, text[], text[], text[], jsonb, text, timestamptz,
                               integer, integer, text, text);
DROP FUNCTION mailroom.normalise_addresses(text[]);
DROP FUNCTION mailroom.normalise_address(text);
