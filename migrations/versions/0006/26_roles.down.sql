DROP FUNCTION mailroom.grant_read_only_role(name);
DROP FUNCTION mailroom.secret_columns();
DROP FUNCTION mailroom.grant_app_role(name);
