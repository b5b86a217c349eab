-- Undo 60_lock_order: the shorter descriptions.
COMMENT ON TABLE mailroom.claims IS
    'One batch claimed under one lease token for one sender: its lease and the quota reserved for it. Locked before its emails; ended by the worker or by lease rescue, which return the unused quota with the unsent emails.';
COMMENT ON FUNCTION mailroom.rescue_expired_claims() IS
    'Return every expired claim: apply its sent journal, return the rest to the queue, give back the unused quota; returns the ids returned.';
