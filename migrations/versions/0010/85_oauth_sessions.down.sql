DROP TABLE mailroom.oauth_sessions;
