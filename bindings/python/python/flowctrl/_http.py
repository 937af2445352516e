"""What ``flowctrl.asgi`` and ``flowctrl.wsgi`` share: the permit of one
HTTP exchange, the outcome it is released with, and the answer to a
refusal. No limit is decided here: the task (and its key limits) decide,
this module only turns the decision into HTTP.

The headers follow the IETF draft ``draft-ietf-httpapi-ratelimit-headers-06``
(December 2022), the last with three separate fields: ``RateLimit-Limit``
(the key's tightest rate: its burst), ``RateLimit-Remaining`` (what that
rate admits now) and ``RateLimit-Reset`` (seconds until it is whole again,
rounded up), read from ``Task.key_state``. Later drafts (07 on) merge them
into one structured ``RateLimit`` field; clients and gateways read the
three-field form far more widely today.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any, Callable, List, Literal, Optional, Tuple, Union

from ._errors import Limited

if TYPE_CHECKING:
    from ._flowctrl import Permit, Task

Key = Union[str, bytes]
Headers = List[Tuple[str, str]]

BODY_LIMITED = b"Too Many Requests\n"
BODY_BLOCKED = b"Forbidden\n"


def cost_of(cost: Union[int, Callable[[Any], int]], request: Any) -> int:
    """A request's cost in permits: a number, or a function of the request."""
    return cost if isinstance(cost, int) else cost(request)


def whole_seconds(seconds: float) -> int:
    """``Retry-After`` of a wait: whole seconds, rounded up, at least 1 (a
    refused request cannot pass at once)."""
    return max(1, math.ceil(seconds))


def rate_limit_headers(task: Task, key: Key) -> Headers:
    """The RateLimit-* headers of ``key`` now; none when the key has no rate
    (its limit is 0: only a concurrency cap, or unlimited)."""
    state = task.key_state(key)
    limit = state["limit"]
    if not limit:
        return []
    return [
        ("RateLimit-Limit", str(limit)),
        ("RateLimit-Remaining", str(state["remaining"])),
        ("RateLimit-Reset", str(math.ceil(state["reset_after"]))),
    ]


def refusal(
    task: Task, key: Optional[Key], refused: Limited, unknown_retry_after: Optional[int]
) -> Tuple[int, str, Headers, bytes]:
    """The answer to a refusal: (status, reason phrase, headers, body).

    429 with ``Retry-After`` the refusal's own wait (whole seconds, rounded
    up) or, where the library knows none (a concurrency cap: a release
    decides), ``unknown_retry_after`` (None: no header); for a keyed request
    the key's RateLimit-* headers too. A blocked key gets 403 and no
    ``Retry-After``: waiting does not help it.
    """
    headers: Headers = [("Content-Type", "text/plain; charset=utf-8")]
    if refused.reason == "key_blocked":
        return 403, "Forbidden", headers, BODY_BLOCKED
    if refused.retry_after is not None:
        headers.append(("Retry-After", str(whole_seconds(refused.retry_after))))
    elif unknown_retry_after is not None:
        headers.append(("Retry-After", str(unknown_retry_after)))
    if key is not None:
        headers.extend(rate_limit_headers(task, key))
    return 429, "Too Many Requests", headers, BODY_LIMITED


class Exchange:
    """The permit of one request and what became of the request; released
    once, by ``finish``, with the outcome the facts say:

    * ``"ignored"``: the client went away, or the request was abandoned (a
      cancelled coroutine, a worker stopping: a BaseException that is not an
      Exception), or the response was cut short without an error;
    * ``"dropped"``: the application raised, answered 5xx, or answered
      nothing at all;
    * ``"success"``: a whole response below 500.
    """

    __slots__ = ("permit", "status", "complete", "disconnected", "failed")

    def __init__(self, permit: Permit) -> None:
        self.permit: Optional[Permit] = permit
        self.status: Optional[int] = None
        self.complete = False
        self.disconnected = False
        self.failed = False

    def raised(self, error: BaseException) -> None:
        """Records an exception out of the application."""
        if isinstance(error, Exception):
            self.failed = True
        else:
            self.disconnected = True

    def outcome(self) -> Literal["success", "dropped", "ignored"]:
        if self.disconnected:
            return "ignored"
        if self.failed or self.status is None or self.status >= 500:
            return "dropped"
        return "success" if self.complete else "ignored"

    def finish(self) -> None:
        permit, self.permit = self.permit, None
        if permit is not None:
            permit.release(self.outcome())
