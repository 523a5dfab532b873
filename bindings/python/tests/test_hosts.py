"""The host suite's provider errors (``spec/hosts/provider-errors.json``): the Python hosts class
each case as the command line's HTTP client does, through the table they share, with the error
in the shapes the SDKs raise it (``status_code`` on the error, or on its ``response`` with the
body as ``text``)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from conftest import REPO
from terminus_kernel import provider_error_kind
from terminus_kernel.langchain import model_error_kind

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


@pytest.mark.parametrize("status", [42, 600, -1, 2**40])
def test_a_status_that_is_not_one_is_refused_naming_it(status: int) -> None:
    with pytest.raises(ValueError, match=f"status: {status} is not an HTTP status"):
        provider_error_kind(status, "x")
