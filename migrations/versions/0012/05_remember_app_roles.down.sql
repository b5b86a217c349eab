-- Nothing to undo: 05 only remembers the application roles for 90_grants.
SELECT 1;
