DROP TABLE mailroom.sender_dns_findings;
