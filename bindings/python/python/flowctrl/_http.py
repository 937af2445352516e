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

import asyncio
import math
from typing import TYPE_CHECKING, Any, Callable, List, Literal, Mapping, Optional, Tuple, Union

from ._errors import Limited

if TYPE_CHECKING:
    from ._flowctrl import Permit, Task

Key = Union[str, bytes]
Headers = List[Tuple[str, str]]

BODY_LIMITED = b"Too Many Requests\n"
BODY_BLOCKED = b"Forbidden\n"


def forwarded_for(values: List[str], trusted_hops: int) -> Optional[str]:
    """The client's address from ``X-Forwarded-For`` fields (in the order
    received) behind ``trusted_hops`` proxies that each append the address
    they saw: the ``trusted_hops``-th entry from the right; None when the
    fields hold fewer entries (the request did not come through them all)."""
    entries = [e.strip() for v in values for e in v.split(",")]
    entries = [e for e in entries if e]
    if trusted_hops < 1 or len(entries) < trusted_hops:
        return None
    return entries[-trusted_hops]


def check_hops(trusted_hops: int) -> int:
    if not isinstance(trusted_hops, int) or isinstance(trusted_hops, bool) or trusted_hops < 0:
        raise ValueError(f"trusted_hops must be a whole number of proxies (0 or more), not {trusted_hops!r}")
    return trusted_hops


def user_key(user: Any, attribute: Optional[str]) -> Optional[str]:
    """The key of an authenticated user object: its ``attribute`` (the
    object itself when None) as text; None for no user, an anonymous one
    (``is_authenticated`` false: Starlette's ``UnauthenticatedUser``,
    Django's ``AnonymousUser``) or an empty value."""
    if user is None or getattr(user, "is_authenticated", True) is False:
        return None
    value = user if attribute is None else getattr(user, attribute, None)
    if callable(value):  # a method: Django's get_username
        value = value()
    if value is None or value == "":
        return None
    return value if isinstance(value, str) else str(value)


def by_path(routes: Mapping[str, Optional[Task]]) -> Callable[[str], Optional[Task]]:
    """The task of a path: the value of the longest prefix of ``routes``
    that the path starts with, on a segment boundary ("/search" matches
    "/search" and "/search/x", not "/searches"); None when none matches."""
    for prefix in routes:
        if not prefix.startswith("/"):
            raise ValueError(f"a route prefix begins with '/': {prefix!r}")
    ordered = sorted(((p.rstrip("/"), t) for p, t in routes.items()), key=lambda e: -len(e[0]))

    def task_of(path: str) -> Optional[Task]:
        for prefix, task in ordered:
            if path == prefix or path.startswith(prefix + "/") or not prefix:
                return task
        return None

    return task_of


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
    the key's RateLimit-* headers too, unless its global rate refused it
    (they are the key's rates on the host, which did not). A blocked key
    gets 403 and no ``Retry-After``: waiting does not help it.
    """
    headers: Headers = [("Content-Type", "text/plain; charset=utf-8")]
    if refused.reason == "key_blocked":
        return 403, "Forbidden", headers, BODY_BLOCKED
    if refused.retry_after is not None:
        headers.append(("Retry-After", str(whole_seconds(refused.retry_after))))
    elif unknown_retry_after is not None:
        headers.append(("Retry-After", str(unknown_retry_after)))
    if key is not None and refused.reason != "key_global":
        headers.extend(rate_limit_headers(task, key))
    return 429, "Too Many Requests", headers, BODY_LIMITED


class Exchange:
    """The permit of one request and what became of the request; released
    once, by ``finish``, with the outcome the facts say. The rule: the
    client went away → "ignored"; the service failed to answer, or to
    answer in time → "dropped" (what adaptive limits learn from).

    * ``"ignored"``: the client went away (whatever happened after), or the
      request was abandoned by the server without a deadline passing (a
      quick shutdown: ``KeyboardInterrupt``, ``SystemExit(0)``,
      ``GeneratorExit``), or the response was cut short without an error;
    * ``"dropped"``: the application raised (a ``TimeoutError`` of its own
      included), answered 5xx, or answered nothing at all; or it ran out of
      time: its coroutine was cancelled while the client was still there
      (``asyncio.CancelledError``: an ``asyncio.timeout``/``wait_for``
      around it, a server's shutdown deadline), or its worker was aborted
      (``SystemExit`` with a non-zero code: gunicorn's worker timeout);
    * ``"success"``: a whole response below 500.
    """

    __slots__ = ("permit", "status", "complete", "disconnected", "failed", "timed_out", "abandoned")

    def __init__(self, permit: Permit) -> None:
        self.permit: Optional[Permit] = permit
        self.status: Optional[int] = None
        self.complete = False
        self.disconnected = False
        self.failed = False
        self.timed_out = False
        self.abandoned = False

    def raised(self, error: BaseException) -> None:
        """Records an exception out of the application."""
        if isinstance(error, Exception):
            self.failed = True
        elif isinstance(error, asyncio.CancelledError) or (
            isinstance(error, SystemExit) and error.code not in (None, 0)
        ):
            self.timed_out = True
        else:
            self.abandoned = True

    def outcome(self) -> Literal["success", "dropped", "ignored"]:
        if self.disconnected:
            return "ignored"
        if self.failed or self.timed_out:
            return "dropped"
        if self.abandoned:
            return "ignored"
        if self.status is None or self.status >= 500:
            return "dropped"
        return "success" if self.complete else "ignored"

    def finish(self) -> None:
        permit, self.permit = self.permit, None
        if permit is not None:
            permit.release(self.outcome())
