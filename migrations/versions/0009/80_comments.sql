-- A comment on every table, function and trigger, and on every column whose name does not say what it
-- holds: `\d+` in psql and migrations/schema.sql then explain the schema where it is read. The text comes
-- from the earlier revisions' SQL parts and the docs, shortened for an operator. Objects an earlier
-- revision commented already keep their comment. The down part removes exactly what this part adds.

-- == schema and shared functions ==

COMMENT ON TABLE mailroom.alembic_version IS 'The schema revision the migrations left (Alembic''s record); `mailroom db status` reads it.';

COMMENT ON FUNCTION mailroom.clock() IS 'The time the lifecycle and birthday logic runs at: the setting mailroom.now when a caller set it (tests move time this way), else now().';
COMMENT ON FUNCTION mailroom.touch_row() IS 'Row trigger: updated_at follows every change; created_at can never be rewritten.';
COMMENT ON FUNCTION mailroom.forbid_created_at_change() IS 'Row trigger: refuses any change of created_at (check_violation).';
COMMENT ON FUNCTION mailroom.notify_change() IS 'Statement trigger: NOTIFY mailroom_changes with {table, op}; listeners (console, worker) re-read what they need.';

-- The shared triggers: every table with an updated_at, and every table the console watches.
COMMENT ON TRIGGER accounts_notify ON mailroom.accounts IS 'Tells listeners (console, worker) that the table changed: NOTIFY mailroom_changes.';
COMMENT ON TRIGGER audit_log_notify ON mailroom.audit_log IS 'Tells listeners (console, worker) that the table changed: NOTIFY mailroom_changes.';
COMMENT ON TRIGGER bounce_events_notify ON mailroom.bounce_events IS 'Tells listeners (console, worker) that the table changed: NOTIFY mailroom_changes.';
COMMENT ON TRIGGER bounce_list_notify ON mailroom.bounce_list IS 'Tells listeners (console, worker) that the table changed: NOTIFY mailroom_changes.';
COMMENT ON TRIGGER bounce_quarantine_notify ON mailroom.bounce_quarantine IS 'Tells listeners (console, worker) that the table changed: NOTIFY mailroom_changes.';
COMMENT ON TRIGGER click_events_notify ON mailroom.click_events IS 'Tells listeners (console, worker) that the table changed: NOTIFY mailroom_changes.';
COMMENT ON TRIGGER complaint_digests_notify ON mailroom.complaint_digests IS 'Tells listeners (console, worker) that the table changed: NOTIFY mailroom_changes.';
COMMENT ON TRIGGER documents_notify ON mailroom.documents IS 'Tells listeners (console, worker) that the table changed: NOTIFY mailroom_changes.';
COMMENT ON TRIGGER events_notify ON mailroom.events IS 'Tells listeners (console, worker) that the table changed: NOTIFY mailroom_changes.';
COMMENT ON TRIGGER expected_signers_notify ON mailroom.expected_signers IS 'Tells listeners (console, worker) that the table changed: NOTIFY mailroom_changes.';
COMMENT ON TRIGGER inbox_notify ON mailroom.inbox IS 'Tells listeners (console, worker) that the table changed: NOTIFY mailroom_changes.';
COMMENT ON TRIGGER open_events_notify ON mailroom.open_events IS 'Tells listeners (console, worker) that the table changed: NOTIFY mailroom_changes.';
COMMENT ON TRIGGER people_notify ON mailroom.people IS 'Tells listeners (console, worker) that the table changed: NOTIFY mailroom_changes.';
COMMENT ON TRIGGER sender_accounts_notify ON mailroom.sender_accounts IS 'Tells listeners (console, worker) that the table changed: NOTIFY mailroom_changes.';
COMMENT ON TRIGGER signatures_notify ON mailroom.signatures IS 'Tells listeners (console, worker) that the table changed: NOTIFY mailroom_changes.';
COMMENT ON TRIGGER tokens_notify ON mailroom.tokens IS 'Tells listeners (console, worker) that the table changed: NOTIFY mailroom_changes.';
COMMENT ON TRIGGER unsubscribe_list_notify ON mailroom.unsubscribe_list IS 'Tells listeners (console, worker) that the table changed: NOTIFY mailroom_changes.';
COMMENT ON TRIGGER accounts_touch ON mailroom.accounts IS 'updated_at follows every change; created_at is immutable.';
COMMENT ON TRIGGER documents_touch ON mailroom.documents IS 'updated_at follows every change; created_at is immutable.';
COMMENT ON TRIGGER events_touch ON mailroom.events IS 'updated_at follows every change; created_at is immutable.';
COMMENT ON TRIGGER people_touch ON mailroom.people IS 'updated_at follows every change; created_at is immutable.';
COMMENT ON TRIGGER sender_accounts_touch ON mailroom.sender_accounts IS 'updated_at follows every change; created_at is immutable.';
COMMENT ON TRIGGER templates_touch ON mailroom.templates IS 'updated_at follows every change; created_at is immutable.';

-- == queue and delivery ==

COMMENT ON TABLE mailroom.email_queue IS 'Every outgoing email, from enqueue to its final state; the worker is its only consumer. Content is stored rendered: what is sent is what is stored.';
COMMENT ON COLUMN mailroom.email_queue.recipient_email IS 'The first To address, normalised; indexes, logs and suppression key on it (more recipients: to_extra, cc, bcc).';
COMMENT ON COLUMN mailroom.email_queue.headers IS 'Custom headers, a JSON object of name -> text; names Mailroom writes itself are refused by the content rules.';
COMMENT ON COLUMN mailroom.email_queue.template IS 'Provenance: the template the content was rendered from (an unrendered email is rendered from it by the worker).';
COMMENT ON COLUMN mailroom.email_queue.locale IS 'Provenance: the template locale used.';
COMMENT ON COLUMN mailroom.email_queue.template_data IS 'Provenance: the data the template was rendered with (secret to read-only roles: it may hold codes and links).';
COMMENT ON COLUMN mailroom.email_queue.priority IS 'Higher is claimed first (-1000..1000), then earlier scheduled_for.';
COMMENT ON COLUMN mailroom.email_queue.scheduled_for IS 'When the email may be claimed; a retry moves it to next_retry_at.';
COMMENT ON COLUMN mailroom.email_queue.status IS 'unrendered: stored with a template, waiting for the renderer; pending: waiting to be claimed; assigned: claimed under a lease; sent: a relay answered 2xx to the end of DATA; bounced: a DSN reported a permanent failure after sent; failed: permanent refusal, retries exhausted, expired or a bad row (last_error says which); cancelled: by an operator; suppressed: the recipient is on the bounce or unsubscribe list.';
COMMENT ON COLUMN mailroom.email_queue.lease_owner IS 'The worker holding the lease while assigned.';
COMMENT ON COLUMN mailroom.email_queue.lease_token IS 'The claim (mailroom.claims) the email belongs to while assigned.';
COMMENT ON COLUMN mailroom.email_queue.lease_expires_at IS 'When an assigned email''s lease runs out; lease rescue then returns it to the queue.';
COMMENT ON COLUMN mailroom.email_queue.sender_account_id IS 'The sender account that last claimed (or sent) the email.';
COMMENT ON COLUMN mailroom.email_queue.retry_count IS 'Attempts charged to the email (transient failures); sender faults are never charged.';
COMMENT ON COLUMN mailroom.email_queue.max_retries IS 'Charged attempts allowed before the email fails.';
COMMENT ON COLUMN mailroom.email_queue.next_retry_at IS 'When the last transient failure said to try again (backoff with jitter).';
COMMENT ON COLUMN mailroom.email_queue.last_error IS 'The last failure, with the reply code (550 5.1.1 User unknown); required when failed.';
COMMENT ON COLUMN mailroom.email_queue.error_details IS 'The last failure as JSON: outcome class, SMTP code, enhanced code.';
COMMENT ON COLUMN mailroom.email_queue.suppression_reason IS 'Why the email was suppressed (bounce list or unsubscribe); required when suppressed.';
COMMENT ON COLUMN mailroom.email_queue.idempotency_key IS 'The caller''s key: the same key from the same role (enqueued_by) returns the first email instead of a second one.';
COMMENT ON COLUMN mailroom.email_queue.transactional IS 'False for bulk or marketing email: it gets a one-click unsubscribe link and header.';
COMMENT ON COLUMN mailroom.email_queue.track_opens IS 'Whether the email carries an open-tracking pixel.';
COMMENT ON COLUMN mailroom.email_queue.track_clicks IS 'Whether the email''s links go through the tracker (mailroom.tracked_links).';
COMMENT ON COLUMN mailroom.email_queue.tracking_token IS 'Names the email in open-pixel URLs; never enough to unsubscribe (image proxies fetch it).';
COMMENT ON COLUMN mailroom.email_queue.reference_type IS 'What produced the email (reminder_log, token, event, inbox, ...), with reference_id.';
COMMENT ON COLUMN mailroom.email_queue.reference_id IS 'The id of the producing row, in the table reference_type names.';
COMMENT ON COLUMN mailroom.email_queue.message_id IS 'The stable Message-ID header, the same on every attempt.';
COMMENT ON COLUMN mailroom.email_queue.created_by IS 'Label of the caller that enqueued (cli, console, an application''s name); informational.';
COMMENT ON COLUMN mailroom.email_queue.assigned_at IS 'When the email was last claimed.';
COMMENT ON COLUMN mailroom.email_queue.sent_at IS 'When the relay accepted the email (2xx to the end of DATA); kept when it bounces later.';
COMMENT ON COLUMN mailroom.email_queue.finished_at IS 'When the email reached a final state (sent, failed, cancelled, suppressed).';
COMMENT ON COLUMN mailroom.email_queue.unsubscribe_token IS 'One-click unsubscribe token of non-transactional email; separate from tracking_token on purpose.';
COMMENT ON COLUMN mailroom.email_queue.to_extra IS 'To addresses after the first (NULL for the common single recipient).';
COMMENT ON COLUMN mailroom.email_queue.bcc IS 'Envelope-only recipients: never written in a header.';
COMMENT ON COLUMN mailroom.email_queue.reply_to IS 'Reply-To addresses.';

COMMENT ON TABLE mailroom.claims IS 'One batch claimed under one lease token for one sender: its lease and the quota reserved for it. Locked before its emails; ended by the worker or by lease rescue, which return the unused quota with the unsent emails.';
COMMENT ON COLUMN mailroom.claims.owner IS 'The worker that made the claim.';
COMMENT ON COLUMN mailroom.claims.day IS 'The UTC day the quota was reserved on; unused quota goes back to that day.';
COMMENT ON COLUMN mailroom.claims.reserved IS 'Sends of the day''s quota reserved for the batch.';
COMMENT ON COLUMN mailroom.claims.used IS 'Quota used by permanent refusals (sends are counted from the sent journal).';
COMMENT ON COLUMN mailroom.claims.expires_at IS 'When the lease runs out and another worker may rescue the claim.';

COMMENT ON TABLE mailroom.sent_journal IS 'Write-ahead record of every email a relay accepted, committed before the next message on the connection; moved into email_queue and send_logs at the end of the batch, or by lease rescue, so a journalled email is never sent again.';
COMMENT ON COLUMN mailroom.sent_journal.lease_token IS 'The claim the send belongs to.';
COMMENT ON COLUMN mailroom.sent_journal.response IS 'The relay''s reply to the end of DATA.';
COMMENT ON COLUMN mailroom.sent_journal.worker IS 'The worker that sent it.';

COMMENT ON TABLE mailroom.send_logs IS 'Every delivery attempt, partitioned by month of attempted_at (partitions made ahead by maintenance, dropped or archived by retention).';
COMMENT ON TABLE mailroom.send_logs_default IS 'Attempts outside every month partition (none when maintenance keeps partitions ahead).';
COMMENT ON COLUMN mailroom.send_logs.attempt IS 'Which attempt of the email this was (1 for the first).';
COMMENT ON COLUMN mailroom.send_logs.outcome IS 'sent: 2xx to the end of DATA; transient: 4xx or no reply, retried; permanent: 5xx, the email fails; bounced: bad mailbox, fails and the address goes on the bounce list; auth_failed: the sender was suspended, email returned uncharged; local_error: our own fault (bad row, 5xx to our commands); suppressed: dropped at claim time; sender_unreachable: the relay failed, the circuit opened, email returned uncharged.';
COMMENT ON COLUMN mailroom.send_logs.response IS 'The relay''s reply text (or our own error).';
COMMENT ON COLUMN mailroom.send_logs.duration_ms IS 'How long the attempt took, in milliseconds.';
COMMENT ON COLUMN mailroom.send_logs.worker IS 'The worker that made the attempt.';

COMMENT ON TABLE mailroom.recipient_outcomes IS 'What happened to each recipient of a many-recipient email that is not the email''s own outcome: dropped at claim time or refused at RCPT while others were accepted.';
COMMENT ON COLUMN mailroom.recipient_outcomes.kind IS 'Which list the recipient was on: to, cc or bcc.';
COMMENT ON COLUMN mailroom.recipient_outcomes.outcome IS 'suppressed: dropped at claim time (bounce or unsubscribe list); refused: the relay refused it at RCPT; accepted: taken by the relay.';
COMMENT ON COLUMN mailroom.recipient_outcomes.reason IS 'The suppression reason or the relay''s reply.';
COMMENT ON COLUMN mailroom.recipient_outcomes.at IS 'When the outcome was recorded.';

COMMENT ON TABLE mailroom.archived_emails IS 'What outlives an email retention archived and deleted: its campaign, final status and unsubscribe token (old links keep working), never an address.';
COMMENT ON COLUMN mailroom.archived_emails.unsubscribe_token IS 'The email''s one-click unsubscribe token; NULL for many-recipient email (its token named nobody).';
COMMENT ON COLUMN mailroom.archived_emails.track_opens IS 'Whether it carried an open pixel (campaign stats still count it).';
COMMENT ON COLUMN mailroom.archived_emails.track_clicks IS 'Whether it carried tracked links (campaign stats still count it).';
COMMENT ON COLUMN mailroom.archived_emails.status IS 'The final status the email was archived in: sent, bounced, failed, cancelled or suppressed.';
COMMENT ON COLUMN mailroom.archived_emails.finished_at IS 'When the email ended (for sent rows written before 0006: sent_at).';
COMMENT ON COLUMN mailroom.archived_emails.last_error IS 'The last error, any address in it masked to ***@domain.';
COMMENT ON COLUMN mailroom.archived_emails.bounced IS 'Whether the email bounced (campaign stats count bounces from it).';

COMMENT ON TABLE mailroom.templates IS 'Email templates by name and locale (subject and bodies, rendered in a sandbox at enqueue).';
COMMENT ON TABLE mailroom.workers IS 'Workers that said they are alive; health asks whether any is while email is due.';
COMMENT ON COLUMN mailroom.workers.seen_at IS 'The worker''s last heartbeat.';

COMMENT ON FUNCTION mailroom.email_queue_before_insert() IS 'Row trigger: fills a NULL scheduled_for with the database''s now() and refuses a new email that is not pending.';
COMMENT ON FUNCTION mailroom.email_queue_before_update() IS 'Row trigger: the allowed status transitions and their timestamps; a lease exists only while assigned; created_at immutable.';
COMMENT ON FUNCTION mailroom.email_queue_content_rules_insert() IS 'Statement trigger: the content rules for inserted rows, checked as a set (simple rows cost a few regular expressions).';
COMMENT ON FUNCTION mailroom.email_queue_content_rules_update() IS 'Row trigger: the content rules for an update of a content column (status changes do not pay for it).';
COMMENT ON FUNCTION mailroom.email_queue_keep_archived() IS 'Statement trigger: deleted final-state email of a campaign, or sent with an unsubscribe token, leaves a row in archived_emails; rows older than every send log are pruned.';
COMMENT ON FUNCTION mailroom.email_queue_archive_no_shared_token() IS 'Statement trigger: an archived many-recipient email keeps no unsubscribe token (it would name only the first recipient).';
COMMENT ON FUNCTION mailroom.email_queue_notify_insert() IS 'Statement trigger: wakes the workers (NOTIFY mailroom_queue) and the console after an insert.';
COMMENT ON FUNCTION mailroom.email_queue_notify_update() IS 'Statement trigger: wakes the workers when an update left email pending, and the console.';
COMMENT ON FUNCTION mailroom.reminder_logs_follow_email() IS 'Row trigger: a reminder email''s outcome is copied into its reminder_logs row.';
COMMENT ON TRIGGER email_queue_before_insert ON mailroom.email_queue IS 'Only for rows without scheduled_for or not pending, so bulk COPY skips PL/pgSQL.';
COMMENT ON TRIGGER email_queue_before_update ON mailroom.email_queue IS 'Status transitions and their timestamps.';
COMMENT ON TRIGGER email_queue_content_rules_insert ON mailroom.email_queue IS 'Content rules for every inserted row.';
COMMENT ON TRIGGER email_queue_content_rules_update ON mailroom.email_queue IS 'Content rules when content columns change.';
COMMENT ON TRIGGER email_queue_keep_archived ON mailroom.email_queue IS 'Deleted email leaves its archived_emails row.';
COMMENT ON TRIGGER email_queue_keep_archived_one_recipient ON mailroom.email_queue IS 'Runs after email_queue_keep_archived (name order): drops the token of many-recipient email.';
COMMENT ON TRIGGER email_queue_notify_delete ON mailroom.email_queue IS 'Tells the console.';
COMMENT ON TRIGGER email_queue_notify_insert ON mailroom.email_queue IS 'Wakes the workers and the console.';
COMMENT ON TRIGGER email_queue_notify_update ON mailroom.email_queue IS 'Wakes the workers when email went back to pending; tells the console.';
COMMENT ON TRIGGER email_queue_reminder_outcome ON mailroom.email_queue IS 'Reminder emails only, when the status changed to anything but assigned.';

COMMENT ON FUNCTION mailroom.content_rules() IS 'The content rules this database enforces, from worker/core/content_rules.json (applications in any language may read it).';
COMMENT ON FUNCTION mailroom.header_text_problem(text) IS 'Why a header value is refused (control characters, encoded words, length), or NULL.';
COMMENT ON FUNCTION mailroom.address_problem(text) IS 'Why an address is refused (a plain ASCII mailbox is required), or NULL.';
COMMENT ON FUNCTION mailroom.address_list_problem(text, text[]) IS 'Why a list of addresses is refused, naming the element (cc[2]), or NULL.';
COMMENT ON FUNCTION mailroom.headers_problem(jsonb) IS 'Why the custom headers are refused (field names, reserved headers, values), or NULL.';
COMMENT ON FUNCTION mailroom.recipients_problem(mailroom.email_queue) IS 'Why the recipients are refused (an invalid address, too many in the envelope), or NULL.';
COMMENT ON FUNCTION mailroom.email_content_problem(mailroom.email_queue) IS 'The first content-rule problem of a queue row, naming the field, or NULL.';
COMMENT ON FUNCTION mailroom.refuse_content(text) IS 'Raise a content problem as check_violation (23514), with the field as the column in the diagnostics.';
COMMENT ON FUNCTION mailroom.normalise_address(text) IS 'An address as Mailroom stores it: trimmed, the local part as given, the domain lowercased.';
COMMENT ON FUNCTION mailroom.normalise_addresses(text[]) IS 'mailroom.normalise_address over a list.';
COMMENT ON FUNCTION mailroom.ensure_month_partitions(text, date, integer) IS 'Create the missing monthly partitions of a partitioned table from a month on, for some months; returns how many it made.';
COMMENT ON FUNCTION mailroom.rescue_expired_claims() IS 'Return every expired claim: apply its sent journal, return the rest to the queue, give back the unused quota; returns the ids returned.';
COMMENT ON FUNCTION mailroom.apply_sent_journal(uuid) IS 'Apply a claim''s journalled sends to the queue and the send log; returns how many.';
COMMENT ON FUNCTION mailroom.rescue_unclaimed(bigint) IS 'One email under an expired lease without a claim row: its journalled send applied, else back to the queue (true).';

-- == senders ==

COMMENT ON TABLE mailroom.sender_accounts IS 'SMTP relays and mailboxes email is sent through, with their limits, warm-up, pacing, circuit and credentials (encrypted).';
COMMENT ON COLUMN mailroom.sender_accounts.name IS 'The operator''s name for the account (senders commands use it).';
COMMENT ON COLUMN mailroom.sender_accounts.smtp_security IS 'none: plain SMTP; starttls: upgrade after EHLO; tls: TLS from the first byte.';
COMMENT ON COLUMN mailroom.sender_accounts.smtp_password_encrypted IS 'The SMTP password, encrypted with the secret key (never readable by read-only roles).';
COMMENT ON COLUMN mailroom.sender_accounts.daily_limit IS 'Sends allowed per UTC day.';
COMMENT ON COLUMN mailroom.sender_accounts.warmup_stage IS '0: warm-up finished; 1..5: the stage, with warmup_limit the day''s cap.';
COMMENT ON COLUMN mailroom.sender_accounts.warmup_limit IS 'The day''s cap while warming up; doubles with each stage.';
COMMENT ON COLUMN mailroom.sender_accounts.send_delay_ms IS 'Pacing: at least this long between two sends of the account, across all workers (mailroom.sender_pacing).';
COMMENT ON COLUMN mailroom.sender_accounts.max_connections IS 'SMTP connections the account may have open at once in one worker process.';
COMMENT ON COLUMN mailroom.sender_accounts.status IS 'active: sends; warming_up: sends under warmup_limit; paused: stopped by an operator; suspended: stopped after an authentication failure; paused_limit_reached: the day''s limit is used up, usable again the next UTC day.';
COMMENT ON COLUMN mailroom.sender_accounts.status_reason IS 'Why the account is not active (the relay''s reply, the limit, the operator''s reason).';
COMMENT ON COLUMN mailroom.sender_accounts.status_changed_at IS 'When status last changed.';
COMMENT ON COLUMN mailroom.sender_accounts.limit_reached_on IS 'The UTC day paused_limit_reached applies to: the account is usable again on any later day.';
COMMENT ON COLUMN mailroom.sender_accounts.dkim_private_key_encrypted IS 'The DKIM signing key, encrypted; set with dkim_domain and dkim_selector or not at all.';
COMMENT ON COLUMN mailroom.sender_accounts.last_used_at IS 'When the account last sent.';
COMMENT ON COLUMN mailroom.sender_accounts.version IS 'Optimistic-update version, moved on by every update.';
COMMENT ON COLUMN mailroom.sender_accounts.warmup_checked_on IS 'The UTC day warm-up progress was last considered (once a day, at the first reservation).';
COMMENT ON COLUMN mailroom.sender_accounts.circuit_state IS 'closed: the relay answers; open: a sender-level fault, email waits uncharged until circuit_retry_at; half_open: one worker probes with a single email.';
COMMENT ON COLUMN mailroom.sender_accounts.circuit_reason IS 'The fault that opened the circuit.';
COMMENT ON COLUMN mailroom.sender_accounts.circuit_since IS 'When the circuit opened (NULL while closed).';
COMMENT ON COLUMN mailroom.sender_accounts.circuit_retry_at IS 'When a worker may probe the open circuit again.';
COMMENT ON COLUMN mailroom.sender_accounts.circuit_failures IS 'Failed probes in a row; the backoff doubles with each, up to a cap.';
COMMENT ON COLUMN mailroom.sender_accounts.auth_type IS 'password: SMTP AUTH with smtp_password_encrypted; oauth2: XOAUTH2 with an access token from the OAuth2 settings.';
COMMENT ON COLUMN mailroom.sender_accounts.oauth_token_url IS 'The OAuth2 token endpoint: HTTPS, or plain HTTP on the loopback interface only.';
COMMENT ON COLUMN mailroom.sender_accounts.oauth_client_secret_encrypted IS 'The OAuth2 client secret, encrypted.';
COMMENT ON COLUMN mailroom.sender_accounts.oauth_refresh_token_encrypted IS 'The OAuth2 refresh token, encrypted.';
COMMENT ON COLUMN mailroom.sender_accounts.bounce_domain IS 'The domain of the account''s VERP return paths (NULL: MAILROOM_BOUNCE_DOMAIN, else the sender''s own address).';
COMMENT ON COLUMN mailroom.sender_accounts.relay_provider IS 'The relay whose event webhooks report on this account''s email (postmark, sendgrid); messages are tagged for it.';

COMMENT ON TABLE mailroom.sender_usage IS 'Per sender and UTC day: sends reserved, bounces and errors. A new day starts at zero without any cron.';
COMMENT ON COLUMN mailroom.sender_usage.sent IS 'Sends reserved from the day''s quota (unused reservations are given back).';
COMMENT ON TABLE mailroom.sender_pacing IS 'The next free send slot of each paced account (send_delay_ms > 0), shared by every worker; no triggers, so a slot per send stays cheap.';
COMMENT ON COLUMN mailroom.sender_pacing.next_send_at IS 'The earliest time the account''s next send may start.';

COMMENT ON FUNCTION mailroom.sender_accounts_before_update() IS 'Row trigger: status_changed_at follows status, limit_reached_on clears off paused_limit_reached, version moves on.';
COMMENT ON TRIGGER sender_accounts_before_update ON mailroom.sender_accounts IS 'Status timestamps and the optimistic version.';
COMMENT ON FUNCTION mailroom.reserve_quota(bigint, integer) IS 'Reserve up to wanted sends of today''s quota (UTC), advancing warm-up once a day; returns how many were granted. The sender row lock serialises reservations.';
COMMENT ON FUNCTION mailroom.release_quota(bigint, integer) IS 'Give back unused sends of today''s quota (the form of workers before revision 0002).';
COMMENT ON FUNCTION mailroom.release_quota(bigint, integer, date) IS 'Give back unused sends to the UTC day they were reserved on, resuming an account paused at its limit that day.';
COMMENT ON FUNCTION mailroom.open_circuit(bigint, text, double precision, double precision) IS 'Open (or keep open) a sender''s circuit after a sender-level fault, backoff doubling to the cap; true when it was closed until now.';
COMMENT ON FUNCTION mailroom.take_probe(bigint, double precision) IS 'Take the one probe of an open circuit whose backoff has passed (half-open for hold_seconds); true for the worker that got it.';
COMMENT ON FUNCTION mailroom.close_circuit(bigint) IS 'The relay answered: close the circuit; true when it was open until now.';

-- == bounces and suppression ==

COMMENT ON TABLE mailroom.bounce_events IS 'One row per recipient report applied from a DSN, an ARF complaint or a provider webhook; no foreign key to the queue, which retention empties first.';
COMMENT ON COLUMN mailroom.bounce_events.email_id IS 'The email reported on (its VERP token or Message-ID named it).';
COMMENT ON COLUMN mailroom.bounce_events.kind IS 'hard: permanent failure, the address is suppressed; soft: temporary failure; complaint: the recipient reported the email as spam.';
COMMENT ON COLUMN mailroom.bounce_events.status IS 'The enhanced status code as reported (5.1.1), or the ARF Feedback-Type.';
COMMENT ON COLUMN mailroom.bounce_events.action IS 'The DSN Action (failed, delayed); NULL for complaints.';
COMMENT ON COLUMN mailroom.bounce_events.diagnostic IS 'The Diagnostic-Code as reported, size-capped.';
COMMENT ON COLUMN mailroom.bounce_events.source IS 'Where the report came from: dsn, arf, plain (an unstructured bounce), webhook (the generic one), postmark, sendgrid or ses.';
COMMENT ON COLUMN mailroom.bounce_events.source_message_id IS 'The report''s own Message-ID.';
COMMENT ON COLUMN mailroom.bounce_events.raw_size IS 'Size of the report in bytes.';
COMMENT ON COLUMN mailroom.bounce_events.dedupe_key IS 'Identifies the report: a redelivered one changes nothing twice.';
COMMENT ON COLUMN mailroom.bounce_events.sender_account_id IS 'The sender that sent the email, copied when applied: bounce rates per sender read it.';
COMMENT ON COLUMN mailroom.bounce_events.campaign_id IS 'The email''s campaign, copied when applied.';
COMMENT ON COLUMN mailroom.bounce_events.digest_id IS 'The complaint digest that told the administrators of this complaint.';

COMMENT ON TABLE mailroom.bounce_list IS 'Addresses not to mail because they bounced or complained; checked at enqueue and again at claim time.';
COMMENT ON COLUMN mailroom.bounce_list.email IS 'The suppressed address, lowercased.';
COMMENT ON COLUMN mailroom.bounce_list.bounce_type IS 'hard: the mailbox does not exist; soft: repeated temporary failures; complaint: the recipient reported spam.';
COMMENT ON COLUMN mailroom.bounce_list.reason IS 'The reply or report that put the address here.';
COMMENT ON COLUMN mailroom.bounce_list.sender_account_id IS 'The sender whose email bounced.';
COMMENT ON COLUMN mailroom.bounce_list.bounce_count IS 'How many bounces the address had.';

COMMENT ON TABLE mailroom.complaint_digests IS 'One digest of new complaints per period for the administrators, sent through the queue; the unique period makes two workers'' digests one.';
COMMENT ON COLUMN mailroom.complaint_digests.period_start IS 'The start of the period the digest covers.';
COMMENT ON COLUMN mailroom.complaint_digests.complaints IS 'How many complaints it told of.';
COMMENT ON COLUMN mailroom.complaint_digests.email_id IS 'The digest email in the queue.';

COMMENT ON COLUMN mailroom.bounce_quarantine.reason IS 'Why the report was not applied (no valid token, no known email, unreadable).';
COMMENT ON COLUMN mailroom.bounce_quarantine.envelope_recipient IS 'The address the report was sent to.';
COMMENT ON COLUMN mailroom.bounce_quarantine.raw_size IS 'Size of the whole message in bytes (raw keeps at most its first 256 KiB).';
COMMENT ON COLUMN mailroom.bounce_quarantine.digest IS 'SHA-256 of the whole message: a redelivery is kept once.';
COMMENT ON COLUMN mailroom.bounce_quarantine_size.one IS 'Always true: the table has one row.';
COMMENT ON COLUMN mailroom.bounce_quarantine_size.messages IS 'Messages in the quarantine.';
COMMENT ON COLUMN mailroom.bounce_quarantine_size.bytes IS 'Bytes of raw messages kept in the quarantine.';
COMMENT ON COLUMN mailroom.bounce_quarantine_clients.day IS 'The UTC day counted.';
COMMENT ON COLUMN mailroom.bounce_quarantine_clients.kept IS 'Messages of the client quarantined that day.';
COMMENT ON TRIGGER bounce_quarantine_count_inserts ON mailroom.bounce_quarantine IS 'Adds inserted messages to mailroom.bounce_quarantine_size.';
COMMENT ON TRIGGER bounce_quarantine_count_deletes ON mailroom.bounce_quarantine IS 'Takes deleted messages off mailroom.bounce_quarantine_size.';

COMMENT ON TABLE mailroom.unsubscribe_list IS 'Addresses that asked for no more non-transactional email (or an operator or privacy request put here).';
COMMENT ON COLUMN mailroom.unsubscribe_list.email IS 'The unsubscribed address, lowercased.';
COMMENT ON COLUMN mailroom.unsubscribe_list.source IS 'one_click: RFC 8058 POST; link: the unsubscribe page; mailto: a mail to the unsubscribe address; operator: by hand; import: a bulk import; privacy: a privacy request.';
COMMENT ON COLUMN mailroom.unsubscribe_list.campaign_id IS 'The campaign whose email the recipient unsubscribed from.';
COMMENT ON COLUMN mailroom.unsubscribe_list.email_id IS 'The email whose link or header was used.';
COMMENT ON COLUMN mailroom.unsubscribe_list.unsubscribed_at IS 'When the address unsubscribed.';

-- == tracking ==

COMMENT ON TABLE mailroom.tracked_links IS 'The destination of each tracked link of an email: the tracker redirects only to a stored URL, never to one from a request.';
COMMENT ON COLUMN mailroom.tracked_links.token IS 'The link''s id in the tracked URL (secret to read-only roles).';
COMMENT ON COLUMN mailroom.tracked_links.position IS 'The link''s place in the email (0 for the first).';
COMMENT ON TABLE mailroom.open_events IS 'Open-pixel fetches, partitioned by month (image proxies and scanners fetch too: a count of fetches, not of readers).';
COMMENT ON TABLE mailroom.open_events_default IS 'Opens outside every month partition.';
COMMENT ON COLUMN mailroom.open_events.occurred_at IS 'When the pixel was fetched.';
COMMENT ON TABLE mailroom.click_events IS 'Tracked-link clicks, partitioned by month.';
COMMENT ON TABLE mailroom.click_events_default IS 'Clicks outside every month partition.';
COMMENT ON COLUMN mailroom.click_events.occurred_at IS 'When the link was followed.';
COMMENT ON COLUMN mailroom.click_events.link_token IS 'The tracked link followed (mailroom.tracked_links.token).';
COMMENT ON COLUMN mailroom.click_events.url IS 'The destination redirected to.';

-- == lifecycle: accounts and tokens ==

COMMENT ON TABLE mailroom.accounts IS 'User accounts of the lifecycle producer: provisioned, activated with a mailed token, suspended and back.';
COMMENT ON COLUMN mailroom.accounts.status IS 'provisioned: created, not yet activated (an activation token is made with it); active: activated; suspended: blocked. A never-activated account that is unsuspended returns to provisioned.';
COMMENT ON COLUMN mailroom.accounts.status_changed_at IS 'When status last changed.';
COMMENT ON COLUMN mailroom.accounts.activated_at IS 'When the account first became active.';
COMMENT ON COLUMN mailroom.accounts.suspended_at IS 'When the account was suspended (set exactly while suspended).';
COMMENT ON COLUMN mailroom.accounts.unsuspended_at IS 'When the account last left suspended.';
COMMENT ON FUNCTION mailroom.accounts_before_insert() IS 'Row trigger: status timestamps of a new account, and the activation token of a provisioned one.';
COMMENT ON FUNCTION mailroom.accounts_before_status_change() IS 'Row trigger: provisioned -> active -> suspended -> active, with their timestamps; an active account never returns to provisioned.';
COMMENT ON TRIGGER accounts_before_insert ON mailroom.accounts IS 'Status timestamps and the activation token.';
COMMENT ON TRIGGER accounts_before_status_change ON mailroom.accounts IS 'Allowed status changes and their timestamps.';

COMMENT ON TABLE mailroom.tokens IS 'Activation and password-recovery tokens: a link secret and a 5-digit code, mailed once by the lifecycle mailer, consumed once.';
COMMENT ON COLUMN mailroom.tokens.action IS 'activation: consuming it activates the account; password_recovery: it lets the user set a new password.';
COMMENT ON COLUMN mailroom.tokens.secret IS 'The link''s 32 random bytes, kept only until the mailer handled the token (then NULL).';
COMMENT ON COLUMN mailroom.tokens.code IS 'The 5-digit code the user may type instead of following the link.';
COMMENT ON COLUMN mailroom.tokens.expires_at IS 'When the token stops working (mailroom.token_ttl() after creation).';
COMMENT ON COLUMN mailroom.tokens.consumed_at IS 'When the token was used (once).';
COMMENT ON COLUMN mailroom.tokens.mailed_at IS 'When the mailer enqueued its email.';
COMMENT ON COLUMN mailroom.tokens.email_id IS 'The email that carried the token.';
COMMENT ON COLUMN mailroom.tokens.mail_skipped_reason IS 'Why the mailer did not mail it (expired, account in the wrong state).';
COMMENT ON COLUMN mailroom.tokens.secret_hash IS 'SHA-256 of the secret: how a link finds its token, so the database holds no usable link.';
COMMENT ON COLUMN mailroom.tokens.failed_attempts IS 'Wrong codes given for it; at mailroom.token_max_attempts() the token is locked.';
COMMENT ON FUNCTION mailroom.tokens_before_insert() IS 'Row trigger: a new token needs its secret; stores its SHA-256 (secret_hash) and starts its wrong-code count at 0.';
COMMENT ON FUNCTION mailroom.tokens_before_update() IS 'Row trigger: consumed once, before it expires and while not locked; its action never changes, its secret can only be forgotten, its wrong codes only counted up.';
COMMENT ON FUNCTION mailroom.tokens_after_consumed() IS 'Row trigger: a consumed activation token activates its provisioned account.';
COMMENT ON FUNCTION mailroom.tokens_notify_mailer() IS 'Statement trigger: wakes the lifecycle mailer (one NOTIFY per statement that inserted tokens).';
COMMENT ON TRIGGER tokens_before_insert ON mailroom.tokens IS 'Secret hash of a new token.';
COMMENT ON TRIGGER tokens_before_update ON mailroom.tokens IS 'What may change in a token, and when.';
COMMENT ON TRIGGER tokens_after_consumed ON mailroom.tokens IS 'Activation.';
COMMENT ON TRIGGER tokens_created_at ON mailroom.tokens IS 'created_at is immutable.';
COMMENT ON TRIGGER tokens_notify_mailer ON mailroom.tokens IS 'Wakes the lifecycle mailer.';

COMMENT ON TABLE mailroom.jobs IS 'A cursor per producer job; the job locks its row (FOR UPDATE) so two workers never run it at once.';
COMMENT ON COLUMN mailroom.jobs.last_seq IS 'The last sequence number the job handled.';
COMMENT ON COLUMN mailroom.jobs.last_run_at IS 'When the job last ran.';

COMMENT ON FUNCTION mailroom.random_secret() IS '32 random bytes from core PostgreSQL''s CSPRNG (gen_random_uuid draws from pg_strong_random).';
COMMENT ON FUNCTION mailroom.random_code() IS 'A uniformly random 5-digit code (rejection sampling, never 100000).';
COMMENT ON FUNCTION mailroom.token_ttl() IS 'How long a new token lives: the setting mailroom.token_ttl (MAILROOM_TOKEN_TTL_SECONDS), else 15 minutes.';
COMMENT ON FUNCTION mailroom.token_max_attempts() IS 'Wrong codes after which a token is locked (5).';

-- == birthdays: people and events ==

COMMENT ON TABLE mailroom.people IS 'People whose birthday email the scheduler sends at their local time.';
COMMENT ON COLUMN mailroom.people.time_zone IS 'IANA time zone the birthday email is timed in (checked against mailroom.time_zone_names).';
COMMENT ON COLUMN mailroom.people.version IS 'Optimistic-update version, moved on by every update.';
COMMENT ON FUNCTION mailroom.people_validate() IS 'Row trigger: a known time zone and a date of birth in the past.';
COMMENT ON FUNCTION mailroom.people_bump_version() IS 'Row trigger: the version follows every change (optimistic updates compare it).';
COMMENT ON FUNCTION mailroom.people_after_insert() IS 'Statement trigger: new people get their next birthday event in the inserting transaction, one set-based pass.';
COMMENT ON FUNCTION mailroom.people_after_update() IS 'Statement trigger: a new time zone or date of birth moves the pending event, or closes a due one as missed or cancelled and schedules the next.';
COMMENT ON TRIGGER people_validate ON mailroom.people IS 'Time zone and date of birth.';
COMMENT ON TRIGGER people_bump_version ON mailroom.people IS 'Optimistic version.';
COMMENT ON TRIGGER people_after_insert ON mailroom.people IS 'Schedules the next birthday.';
COMMENT ON TRIGGER people_after_update ON mailroom.people IS 'Reschedules after a change of time zone or date of birth.';

COMMENT ON TABLE mailroom.events IS 'Birthday events: one pending per person, claimed by the scheduler when due, each turned into an email once.';
COMMENT ON COLUMN mailroom.events.status IS 'pending: waiting until due_at; processing: claimed by the scheduler; completed: its email was enqueued; failed: could not be sent (failure_reason); missed: the local day ended before it went out; cancelled: the date of birth changed.';
COMMENT ON COLUMN mailroom.events.due_at IS 'The UTC instant the event is due (local_due_at in time_zone).';
COMMENT ON COLUMN mailroom.events.local_due_at IS 'The local date and time it is due at in the person''s zone.';
COMMENT ON COLUMN mailroom.events.time_zone IS 'The zone due_at was computed in.';
COMMENT ON COLUMN mailroom.events.executed_at IS 'When the event was completed.';
COMMENT ON COLUMN mailroom.events.version IS 'Optimistic version: a scheduler whose claim went stale (the person changed) drops its completion.';
COMMENT ON COLUMN mailroom.events.idempotency_key IS 'Person, type and day: the same birthday is never scheduled twice.';
COMMENT ON COLUMN mailroom.events.email_id IS 'The email it became.';

COMMENT ON TABLE mailroom.time_zone_names IS 'Known time zone names, a fast check for every inserted person (pg_timezone_names reads the tz database on every call).';

COMMENT ON FUNCTION mailroom.is_time_zone(text) IS 'Whether a name is a time zone: mailroom.time_zone_names, else pg_timezone_names (a zone newer than the table).';
COMMENT ON FUNCTION mailroom.birthday_time() IS 'The local time of day birthday email goes out: the setting mailroom.birthday_time, else 09:00.';
COMMENT ON FUNCTION mailroom.birthday_in(date, integer) IS 'The birthday in a year: 29 February falls on 28 February in common years.';
COMMENT ON FUNCTION mailroom.next_birthday(date, date) IS 'The first birthday on or after a date (never the day of birth itself).';
COMMENT ON FUNCTION mailroom.next_birthday_of(uuid, date, text, timestamp with time zone) IS 'A person''s next birthday day in their zone, never on or before a birthday already completed, missed or failed.';
COMMENT ON FUNCTION mailroom.local_instant(date, time without time zone, text) IS 'The UTC instant of a local time on a day in a zone; a skipped local time lands as far after the jump, a repeated one is read in standard time.';
COMMENT ON FUNCTION mailroom.new_event_id() IS 'A new event id: uuidv7 (time ordered, so the primary key grows at its right edge) where the server has it, else gen_random_uuid.';
COMMENT ON FUNCTION mailroom.schedule_birthdays(uuid[], timestamp with time zone, time without time zone, integer, integer) IS 'The set-based scheduling pass: everyone given (NULL: everyone, optionally one part of several) without a pending event gets their next one; returns how many were made.';

-- == inbox: orders and other outside events ==

COMMENT ON TABLE mailroom.inbox IS 'Incoming application events (orders placed, completed, cancelled, ...), de-duplicated by message id per consumer and turned into email once.';
COMMENT ON COLUMN mailroom.inbox.message_id IS 'The sender''s id for the event: a redelivery of the same id is counted, not applied twice.';
COMMENT ON COLUMN mailroom.inbox.consumer IS 'Who handles the event; one message may feed several consumers.';
COMMENT ON COLUMN mailroom.inbox.payload IS 'The event as received (secret to read-only roles: it becomes template data).';
COMMENT ON COLUMN mailroom.inbox.receive_count IS 'How many times the event was delivered.';
COMMENT ON COLUMN mailroom.inbox.processed_at IS 'When its email was enqueued (NULL: not yet).';
COMMENT ON COLUMN mailroom.inbox.email_id IS 'The email it became.';

-- == documents and signatures ==

COMMENT ON TABLE mailroom.documents IS 'Documents people are asked to acknowledge by signature.';
COMMENT ON COLUMN mailroom.documents.checksum IS 'Hex digest of the document''s content (length fits checksum_algorithm).';
COMMENT ON COLUMN mailroom.documents.checksum_algorithm IS 'SHA-256 or SHA-512; set with checksum or not at all.';
COMMENT ON FUNCTION mailroom.documents_create_signature_head() IS 'Row trigger: every document has a chain head from its first moment, so a missing head is itself evidence.';
COMMENT ON TRIGGER documents_signature_head ON mailroom.documents IS 'Creates the document''s signature head.';

COMMENT ON TABLE mailroom.expected_signers IS 'Who is expected to sign each document; reminders go to those who have not.';
COMMENT ON COLUMN mailroom.expected_signers.email IS 'The signer''s address, lowercased.';
COMMENT ON COLUMN mailroom.expected_signers.added_by IS 'Who added the signer.';

COMMENT ON TABLE mailroom.signatures IS 'Ed25519 signatures of documents, append-only, each chained to the one before it in its document (prev_hash, seq).';
COMMENT ON COLUMN mailroom.signatures.signed_at IS 'When the signer signed (inside the signed payload).';
COMMENT ON COLUMN mailroom.signatures.nonce IS 'Unique per signature: a signed payload cannot be replayed.';
COMMENT ON COLUMN mailroom.signatures.payload IS 'The exact text that was signed.';
COMMENT ON COLUMN mailroom.signatures.payload_hash IS 'SHA-256 (hex) of the payload.';
COMMENT ON COLUMN mailroom.signatures.signature IS 'The Ed25519 signature of the payload.';
COMMENT ON COLUMN mailroom.signatures.prev_hash IS 'mailroom.signature_link_hash of the previous signature of the document (NULL for the first).';
COMMENT ON COLUMN mailroom.signatures.seq IS 'Position in the document''s chain (1 for the first).';
COMMENT ON FUNCTION mailroom.signatures_advance_head() IS 'Row trigger: a new signature takes the next position of its document''s chain and moves the head; the head row lock serialises writers.';
COMMENT ON FUNCTION mailroom.signatures_append_only() IS 'Trigger: UPDATE, DELETE and TRUNCATE of signatures are refused (42501), but inside mailroom.signature_maintenance().';
COMMENT ON TRIGGER signatures_chain_head ON mailroom.signatures IS 'Position and head of the chain.';
COMMENT ON TRIGGER signatures_created_at ON mailroom.signatures IS 'created_at is immutable.';
COMMENT ON TRIGGER signatures_refuse_change ON mailroom.signatures IS 'Append-only (runs after signatures_created_at, by name).';
COMMENT ON TRIGGER signatures_refuse_truncate ON mailroom.signatures IS 'Append-only: no TRUNCATE.';

COMMENT ON TABLE mailroom.signature_heads IS 'The head of each document''s signature chain: how many signatures and the link hash the next must carry. Deleting any signature leaves a head that says so.';
COMMENT ON COLUMN mailroom.signature_heads.count IS 'Signatures in the chain.';
COMMENT ON COLUMN mailroom.signature_heads.last_hash IS 'The link hash the next signature''s prev_hash must be (NULL while empty).';
COMMENT ON FUNCTION mailroom.signature_heads_guard() IS 'Trigger: heads change only from the signature triggers, a document''s deletion or the maintenance path (42501 otherwise).';
COMMENT ON TRIGGER signature_heads_guard ON mailroom.signature_heads IS 'No direct writes.';
COMMENT ON TRIGGER signature_heads_no_truncate ON mailroom.signature_heads IS 'No TRUNCATE.';

COMMENT ON TABLE mailroom.checksum_verifications IS 'Each check of a document''s checksum: what was stored, what was calculated, whether they matched.';
COMMENT ON COLUMN mailroom.checksum_verifications.is_valid IS 'Whether the calculated checksum matched (false needs error_message).';

COMMENT ON TABLE mailroom.reminder_logs IS 'Reminder emails asked for each expected signer; the row follows its email''s fate.';
COMMENT ON COLUMN mailroom.reminder_logs.email_id IS 'The reminder email (its reference_id names this row).';
COMMENT ON COLUMN mailroom.reminder_logs.status IS 'queued: the email is in the queue; sent, failed, bounced, suppressed, cancelled: copied from the email''s final state.';
COMMENT ON COLUMN mailroom.reminder_logs.finished_at IS 'When the email reached its final state.';

COMMENT ON FUNCTION mailroom.signature_link_hash(text, text) IS 'What the next signature''s prev_hash must be: SHA-256 of payload_hash:signature.';
COMMENT ON FUNCTION mailroom.signature_maintenance(text, text, text) IS 'The one audited way to remove signatures: every signature of one document, the head reset; returns how many.';
COMMENT ON FUNCTION mailroom.signature_maintenance_allows(text) IS 'True inside mailroom.signature_maintenance() for its document (a signatures.maintenance audit row of this transaction).';

-- == audit ==

COMMENT ON TABLE mailroom.audit_log IS 'Append-only, hash-chained record of sensitive operations: when, which role and actor, what, on what, how many.';
COMMENT ON COLUMN mailroom.audit_log.at IS 'When the operation was recorded.';
COMMENT ON COLUMN mailroom.audit_log.db_role IS 'The database role that wrote the row (session_user).';
COMMENT ON COLUMN mailroom.audit_log.actor IS 'Who asked: an OS user, console, an application''s name.';
COMMENT ON COLUMN mailroom.audit_log.action IS 'What was done (sender.suspend, privacy.erase, app.*, ...).';
COMMENT ON COLUMN mailroom.audit_log.target IS 'What it was done to.';
COMMENT ON COLUMN mailroom.audit_log.affected IS 'How many rows it affected.';
COMMENT ON COLUMN mailroom.audit_log.detail IS 'Further details, a JSON object.';
COMMENT ON FUNCTION mailroom.audit_log_append_only() IS 'Trigger: audit rows are never changed or removed, but the oldest by mailroom.audit_prune() (42501 otherwise).';
COMMENT ON TRIGGER audit_log_append_only ON mailroom.audit_log IS 'Append-only.';
COMMENT ON TRIGGER audit_log_chain ON mailroom.audit_log IS 'Chains every new row.';
COMMENT ON TRIGGER audit_log_no_truncate ON mailroom.audit_log IS 'No TRUNCATE.';

COMMENT ON COLUMN mailroom.audit_chain.only_row IS 'Always true: the table has one row.';
COMMENT ON FUNCTION mailroom.audit_chain_guard() IS 'Trigger: the head changes only from the chain trigger or inside mailroom.audit_prune() (42501 otherwise).';
COMMENT ON TRIGGER audit_chain_guard ON mailroom.audit_chain IS 'No direct writes.';
COMMENT ON TRIGGER audit_chain_no_truncate ON mailroom.audit_chain IS 'No TRUNCATE.';

COMMENT ON FUNCTION mailroom.audit(text, text, text, bigint, jsonb) IS 'Record one sensitive operation; returns the audit row''s id. The database role is taken from the session.';

-- == roles and API functions ==

COMMENT ON VIEW mailroom.my_emails IS 'The email the current role enqueued (enqueued_by = session_user): status and outcome, for applications.';
COMMENT ON FUNCTION mailroom.enqueue(text[], text, text, text, text, text[], text[], text[], jsonb, text, timestamp with time zone, integer, integer, text, text, text, jsonb, text) IS 'Enqueue an email from SQL, in the caller''s transaction, as the Python API would; returns its id (the first email''s for a repeated idempotency key). 22023: a bad argument; 23514: content the rules refuse.';
COMMENT ON FUNCTION mailroom.grant_app_role(name) IS 'Let an existing role enqueue (mailroom.enqueue), read its own email (mailroom.my_emails) and write app.* audit rows; nothing else.';
COMMENT ON FUNCTION mailroom.grant_read_only_role(name) IS 'Let an existing role read every table but the secret columns; idempotent, and revokes what became secret since.';
COMMENT ON FUNCTION mailroom.secret_columns() IS 'Columns no read-only role sees: encrypted secrets, one-time codes, tokens, bodies and raw reports.';

-- Month partitions are made by maintenance, by name of the calendar; each gets a comment as it is made.
CREATE OR REPLACE FUNCTION mailroom.ensure_month_partitions(parent text, start_month date, months integer)
RETURNS integer LANGUAGE plpgsql AS $$
DECLARE
    created integer := 0;
    first_day date := date_trunc('month', start_month)::date;
    part_name text;
BEGIN
    FOR i IN 0 .. months - 1 LOOP
        part_name := format('%s_%s', parent, to_char(first_day + make_interval(months => i), 'YYYY_MM'));
        IF to_regclass(format('mailroom.%I', part_name)) IS NULL THEN
            EXECUTE format('CREATE TABLE mailroom.%I PARTITION OF mailroom.%I FOR VALUES FROM (%L) TO (%L)',
                           part_name, parent,
                           first_day + make_interval(months => i),
                           first_day + make_interval(months => i + 1));
            EXECUTE format('COMMENT ON TABLE mailroom.%I IS %L', part_name,
                           format('%s of %s (a month partition made by mailroom.ensure_month_partitions)',
                                  parent, to_char(first_day + make_interval(months => i), 'YYYY-MM')));
            created := created + 1;
        END IF;
    END LOOP;
    RETURN created;
END $$;

-- The month partitions made before this revision get the same comment.
DO $$
DECLARE
    r record;
BEGIN
    FOR r IN
        SELECT c.relname, p.relname AS parent, substring(c.relname FROM '(\d{4})_\d{2}$') AS y,
               substring(c.relname FROM '\d{4}_(\d{2})$') AS m
        FROM pg_inherits i
        JOIN pg_class c ON c.oid = i.inhrelid
        JOIN pg_class p ON p.oid = i.inhparent
        WHERE p.relnamespace = 'mailroom'::regnamespace AND c.relname ~ '_\d{4}_\d{2}$'
    LOOP
        EXECUTE format('COMMENT ON TABLE mailroom.%I IS %L', r.relname,
                       format('%s of %s-%s (a month partition made by mailroom.ensure_month_partitions)',
                              r.parent, r.y, r.m));
    END LOOP;
END $$;
