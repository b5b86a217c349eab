DROP TABLE mailroom.sender_pacing;
