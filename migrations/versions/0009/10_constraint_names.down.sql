-- The names PostgreSQL gave.
SELECT 1;
