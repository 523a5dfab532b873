"""How the Python hosts class a provider SDK's exception for the kernel: the HTTP status and
body the SDKs keep on their errors go to the table every host shares
(:func:`terminus_kernel.provider_error_kind`); what only the exception's class says (a timeout,
a rate limit, a refused connection) is read here. Private: each framework module exposes it as
its ``model_error_kind``."""

from __future__ import annotations

from typing import Any

from terminus_kernel import provider_error_kind, retry_after_ms

# The classes the kernel retries, which keep the delay the provider asked for.
_RETRIED = ("rate_limited", "server", "timeout")


def _error_text(error: BaseException, response: Any) -> str:
    """What the provider said: the error response's body when the SDK kept it (the JSON the
    shared table reads best), else the exception's text."""
    try:
        body = getattr(response, "text", None)
    except Exception:  # a streamed response whose body was never read
        body = None
    if isinstance(body, str) and body.strip():
        return body
    return str(error)


def sdk_error_kind(error: BaseException) -> tuple[str, int | None] | None:
    """The kernel's class of a failed model call (``rate_limited``, ``server``, ``timeout``,
    ``auth``, ``bad_request``, ``context_overflow``) with the delay the provider asked for in
    milliseconds, or ``None`` for an exception that is not a provider's error (a bug, an
    interrupt: it propagates). Reads the HTTP status of the provider SDKs' errors
    (``status_code``, or ``response.status_code``) and classes it with the table every host
    shares (:func:`terminus_kernel.provider_error_kind`), else the class: a timeout, a rate
    limit, a connection failure."""
    response = getattr(error, "response", None)
    status = getattr(error, "status_code", None)
    if not isinstance(status, int):
        status = getattr(response, "status_code", None)
    retry_after = _retry_after_ms(response)
    if isinstance(status, int) and not isinstance(status, bool) and 400 <= status < 600:
        # The table every host shares (the command line's HTTP client too).
        kind = provider_error_kind(status, _error_text(error, response))
        return kind, retry_after if kind in _RETRIED else None
    names = [cls.__name__.lower() for cls in type(error).__mro__]
    if isinstance(error, TimeoutError) or any("timeout" in n for n in names):
        return "timeout", None
    if any("ratelimit" in n for n in names):
        return "rate_limited", retry_after
    if isinstance(error, ConnectionError) or any(
        "connecterror" in n or "connectionerror" in n for n in names
    ):
        return "server", None
    return None


def _retry_after_ms(response: Any) -> int | None:
    """The delay the ``retry-after-ms`` or ``retry-after`` header of an HTTP response asks for
    (seconds or an HTTP date), read by the parser every host shares."""
    headers = getattr(response, "headers", None)
    if headers is None or not hasattr(headers, "get"):
        return None
    values = [headers.get(name) for name in ("retry-after-ms", "retry-after")]
    ms, seconds = (v if isinstance(v, str) else None for v in values)
    return retry_after_ms(ms, seconds)
