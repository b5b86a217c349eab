"""User lifecycle (reference 01): accounts, activation and password-recovery tokens, and the mailer job.

Status transitions and their timestamps are enforced by triggers (`accounts_before_status_change`,
`tokens_before_insert` and `tokens_before_update` in schema.sql); creating a provisioned
account creates its activation token in the same transaction. The mailer job turns each new token into one
email inside the transaction that records it as mailed, under the lock of its cursor row, so any number of
workers may run it and no token is mailed twice or skipped.
"""

from worker.producers.lifecycle.accounts import (
    STATUSES,
    Account,
    ConsumedToken,
    TokenError,
    create_account,
    find_account,
    list_accounts,
    request_recovery,
    resend_activation,
    suspend_accounts,
    unsuspend_accounts,
)
from worker.producers.lifecycle.mailer import PRODUCER, MailerPass, mail_tokens, token_email
from worker.producers.lifecycle.tokens import consume_token

__all__ = [
    "PRODUCER",
    "STATUSES",
    "Account",
    "ConsumedToken",
    "MailerPass",
    "TokenError",
    "consume_token",
    "create_account",
    "find_account",
    "list_accounts",
    "mail_tokens",
    "request_recovery",
    "resend_activation",
    "suspend_accounts",
    "token_email",
    "unsuspend_accounts",
]
