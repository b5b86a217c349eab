ALTER TABLE mailroom.documents DROP COLUMN require_login;
ALTER TABLE mailroom.signatures
    DROP CONSTRAINT signatures_user_agent_format,
    DROP CONSTRAINT signatures_referer_format,
    DROP CONSTRAINT signatures_user_sub_format,
    DROP COLUMN user_agent,
    DROP COLUMN ip_address,
    DROP COLUMN referer,
    DROP COLUMN user_sub;
