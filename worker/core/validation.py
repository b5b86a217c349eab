"""Input checks for everything that becomes an email header: addresses, names, subjects, custom headers."""

from __future__ import annotations

import email.policy
import re
from email.errors import HeaderParseError
from email.header import decode_header, make_header
from functools import lru_cache

from worker.core.rules import plain_address, reserved_header_problem, rules

# C0 controls, DEL, and the Unicode line breaks that Python's str.splitlines() honours (NEL, LS,
# PS, FS, GS, RS, VT, FF): any of them in a header is an injection attempt. These patterns and the
# reserved names come from the specification the database enforces too (`worker.core.rules`).
_FORBIDDEN = rules().forbidden
_ENCODED_WORD = rules().encoded_word
_HEADER_NAME = rules().header_name
_READER = email.policy.default

# Headers Mailroom writes itself; a caller may not set or override them (nor the relay-control and
# trace headers of the same specification: `reserved_header_problem`).
RESERVED_HEADERS = rules().reserved_headers


class ValidationError(ValueError):
    """One rejected field, with a message an operator can act on."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message


class BatchValidationError(ValidationError):
    """One request of an `enqueue_many` call was refused; nothing of the call was written.

    `index` is the request's position in the sequence given (from 0); `field` and `message`
    are what `enqueue` would have raised for that request alone.
    """

    __module__ = "mailroom"  # the public API's name for it (`mailroom.BatchValidationError`)

    def __init__(self, index: int, field: str, message: str) -> None:
        super().__init__(field, message)
        self.index = index
        self.args = (f"requests[{index}]: {field}: {message}",)

    def __reduce__(self) -> tuple[type[BatchValidationError], tuple[int, str, str]]:
        # The arguments `__init__` takes, not `args`: so the error survives pickling (multiprocessing, logging).
        return (type(self), (self.index, self.field, self.message))


def check_header_text(field: str, value: str) -> str:
    """Reject control characters and line breaks, including those hidden in RFC 2047 encoded words."""
    match = _FORBIDDEN.search(value)
    if match:
        raise ValidationError(field, f"control character {match.group()!r} is not allowed in a header")
    if "=?" in value:
        # Mailroom encodes non-ASCII itself, so text a reader would decode differently from what is
        # stored (an RFC 2047 encoded word, valid or not) is refused: what is sent is what is stored.
        try:
            decoded = str(make_header(decode_header(value)))
        except (HeaderParseError, LookupError, UnicodeDecodeError, ValueError):
            decoded = None
        hidden = _FORBIDDEN.search(decoded or "")
        if hidden:
            raise ValidationError(field, f"encoded word decodes to control character {hidden.group()!r}")
        if (
            decoded != value
            or _ENCODED_WORD.search(value)
            or str(_READER.header_factory("subject", value)) != value
        ):
            raise ValidationError(field, "looks like an RFC 2047 encoded word; give the plain text instead")
    return value


# The common shape, checked without email-validator's full parser (which costs ~30 µs an address):
# an ASCII dot-atom local part and a lower-case LDH host name with an alphabetic TLD. Anything
# else takes the full path. A property test holds this fast path to email-validator's verdict.
_ATEXT = r"[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]+"
_LABEL = r"[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?"
_SIMPLE_ADDRESS = re.compile(rf"^(?=.{{1,64}}@)({_ATEXT}(?:\.{_ATEXT})*)@((?:{_LABEL}\.)+[a-z]{{2,63}})$")


@lru_cache(maxsize=4096)
def _plain_domain(domain: str) -> bool:
    # Cached: a bulk load sends many addresses to few domains. email-validator is imported when first
    # needed: its tables cost a worker's start-up a few hundredths of a second it rarely needs.
    from email_validator import SPECIAL_USE_DOMAIN_NAMES

    for special in SPECIAL_USE_DOMAIN_NAMES:
        if domain == special or domain.endswith("." + special):
            return False
    # IDNA-reserved labels (xn--, ...) get the full check
    return not ("--" in domain and any(label[2:4] == "--" for label in domain.split(".")))


def _fast_address(address: str) -> str | None:
    # Length first: the pattern's repeated groups (each after a literal `.`, so linear) then see 254 characters at most.
    if len(address) > 254:
        return None
    match = _SIMPLE_ADDRESS.fullmatch(address)
    if match is None or not _plain_domain(match.group(2)):
        return None
    return address


@lru_cache(maxsize=65536)
def _normalise_address(address: str) -> str:
    # SMTPUTF8 mailboxes are refused; internationalised domains are kept in their ASCII (punycode) form.
    from email_validator import validate_email

    valid = validate_email(address, check_deliverability=False, allow_smtputf8=False)
    return str(valid.ascii_email or valid.normalized)


def normalise_address(field: str, address: object) -> str:
    """Return the normalised form of one email address, or raise naming the field."""
    if not isinstance(address, str) or not address.strip():
        raise ValidationError(field, "an email address is required")
    check_header_text(field, address)
    address = address.strip()
    fast = _fast_address(address)
    if fast is not None:
        return fast
    from email_validator import EmailNotValidError

    try:
        normalised = _normalise_address(address)
    except EmailNotValidError as exc:
        raise ValidationError(field, f"invalid email address: {exc}") from None
    if not plain_address(normalised):
        # email-validator accepts a few forms the database's rule does not (a numeric top-level domain).
        raise ValidationError(field, "invalid email address: not a plain ASCII mailbox address")
    return normalised


def check_header_name(name: str) -> str:
    """Accept an RFC 5322 field name that Mailroom does not write itself."""
    if not _HEADER_NAME.fullmatch(name):
        raise ValidationError(f"headers.{name}"[:90], "not a valid header name")
    problem = reserved_header_problem(name)
    if problem is not None:
        raise ValidationError(f"headers.{name}", problem)
    return name
