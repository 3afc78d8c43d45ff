"""What one S3 operation of the load generator came to (:class:`OpResult`), and the helpers
that fill one in from an answer: errors are data, never exceptions, so a run keeps going and
counts them.
"""

from __future__ import annotations

import html
import re
from dataclasses import dataclass, field

_CODE_RE = re.compile(rb"<Code>([^<]*)</Code>")
_MSG_RE = re.compile(rb"<Message>([^<]*)</Message>")


@dataclass(slots=True)
class OpResult:
    endpoint: str
    start_ns: int = 0
    first_byte_ns: int = 0
    end_ns: int = 0
    status: int = 0
    size: int = 0
    error: str = ""
    retries: int = 0
    count: int = 1
    keys: list[str] = field(default_factory=list)
    #: the Retry-After of a 503 answer, in seconds
    retry_after: float = 0.0


def xml_text(raw: bytes) -> str:
    """An S3 XML element's text, its entities (``&apos;``, ``&#13;``) made characters again."""
    return html.unescape(raw.decode(errors="replace"))


def error_text(status: int, body: bytes) -> str:
    code = _CODE_RE.search(body)
    msg = _MSG_RE.search(body)
    text = f"HTTP {status}"
    if code:
        text += f" {xml_text(code.group(1))}"
    if msg:
        text += f": {xml_text(msg.group(1))[:200]}"
    return text


def drop(view: memoryview) -> None:
    """A sink for response bodies nobody reads."""


def retry_after_seconds(text: str) -> float:
    """A Retry-After in seconds (1 when absent or not a number)."""
    try:
        return max(0.0, float(text))
    except ValueError:
        return 1.0


def failed(result: OpResult, exc: BaseException) -> None:
    """A request that got no HTTP answer: status 0, the exception as the error."""
    result.status = 0
    result.error = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
