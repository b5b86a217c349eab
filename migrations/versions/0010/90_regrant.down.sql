-- Nothing to undo: dropping this revision's columns and tables drops their grants with them.
SELECT 1;
