ALTER TABLE mailroom.sender_accounts DROP COLUMN allow_plaintext_login;
