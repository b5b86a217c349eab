-- Nothing to undo: the tables and their grants go with 10_webhooks's undo.
SELECT 1;
