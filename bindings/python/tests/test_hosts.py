"""The host suite's provider errors (``spec/hosts/provider-errors.json``): the Python hosts class
each case as the command line's HTTP client does, through the table they share, with the error
in the shapes the SDKs raise it (``status_code`` on the error, or on its ``response`` with the
body as ``text``; the ``openai`` SDK's own ``APIStatusError`` for the OpenAI Agents SDK)."""

from __future__ import annotations

import email.utils
import json
import time
from typing import Any

import httpx
import openai
import pytest

from conftest import REPO
from terminus_kernel import provider_error_kind, retry_after_ms
from terminus_kernel.langchain import model_error_kind
from terminus_kernel.openai_agents import model_error_kind as agents_error_kind

SUITE = json.loads((REPO / "spec" / "hosts" / "provider-errors.json").read_text())


class StatusError(Exception):
    """An SDK error that carries its status (LangChain's wrappers, Anthropic's)."""

    def __init__(self, status_code: int, text: str):
        super().__init__(text)
        self.status_code = status_code


class ResponseError(Exception):
    """An SDK error that keeps the HTTP response (OpenAI's ``APIStatusError``, httpx's)."""

    def __init__(self, status_code: int, text: str):
        super().__init__(f"Error code: {status_code}")
        self.response: Any = type(
            "Response", (), {"status_code": status_code, "text": text, "headers": {}}
        )()


def test_every_provider_error_case_gets_its_class_in_every_python_host() -> None:
    cases = SUITE["cases"]
    assert len(cases) >= 15, "the suite lost its cases"
    for case in cases:
        status, text, kind = case["status"], case["text"], case["kind"]
        where = f"{status} {text!r}"
        assert provider_error_kind(status, text) == kind, where
        assert model_error_kind(StatusError(status, text)) == (kind, None), where
        got = model_error_kind(ResponseError(status, text))
        assert got is not None and got[0] == kind, where
        assert agents_error_kind(openai_error(status, text))[0] == kind, where


def openai_error(status: int, text: str) -> openai.APIStatusError:
    """The error the ``openai`` SDK (under the OpenAI Agents SDK's models) raises for a status."""
    request = httpx.Request("POST", "http://127.0.0.1/v1/chat/completions")
    response = httpx.Response(status, text=text, request=request)
    return openai.APIStatusError(f"Error code: {status}", response=response, body=None)


def test_the_openai_sdks_errors_without_a_status_and_the_delay_asked_for() -> None:
    request = httpx.Request("POST", "http://127.0.0.1/v1/chat/completions")
    assert agents_error_kind(openai.APITimeoutError(request=request)) == ("timeout", None)
    assert agents_error_kind(openai.APIConnectionError(request=request)) == ("server", None)
    limited = httpx.Response(429, text="{}", headers={"retry-after": "2"}, request=request)
    error = openai.RateLimitError("Error code: 429", response=limited, body=None)
    assert agents_error_kind(error) == ("rate_limited", 2000)
    assert agents_error_kind(KeyError("a bug")) is None


def test_retry_after_is_read_by_the_parser_every_host_shares() -> None:
    # Milliseconds rounded up, seconds, an HTTP date, the 60 s cap: as the command line reads them.
    assert retry_after_ms("250.2", "9") == 251
    assert retry_after_ms(None, "0.5") == 500
    assert retry_after_ms(None, "3600") == 60_000
    assert retry_after_ms(None, "soon") is None
    assert retry_after_ms() is None
    in_30s = email.utils.formatdate(time.time() + 30, usegmt=True)
    assert 28_000 <= (retry_after_ms(None, in_30s) or 0) <= 30_000
    # Through an SDK's error: the date form was dropped before.
    request = httpx.Request("POST", "http://127.0.0.1/v1/chat/completions")
    limited = httpx.Response(429, text="{}", headers={"retry-after": in_30s}, request=request)
    error = openai.RateLimitError("Error code: 429", response=limited, body=None)
    kind, delay = agents_error_kind(error) or ("", None)
    assert kind == "rate_limited" and 28_000 <= (delay or 0) <= 30_000


@pytest.mark.parametrize("status", [42, 600, -1, 2**40])
def test_a_status_that_is_not_one_is_refused_naming_it(status: int) -> None:
    with pytest.raises(ValueError, match=f"status: {status} is not an HTTP status"):
        provider_error_kind(status, "x")
