-- Constraints PostgreSQL named after their table and column are renamed for what they check.
SELECT 1;
