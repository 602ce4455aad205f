"""tmy.adapters.http.api: what every keyed JSON route shares (the admin API reuses it).

The API-key check is driven end to end through the listener (test_http.py, test_openai.py).
"""

from __future__ import annotations

import json

import pytest

from tmy.adapters.http import dumps, is_json_route, json_error


@pytest.mark.parametrize(
    ("method", "path", "expected"),
    [
        ("POST", "/v1/messages", True),
        ("POST", "/v1/chat/completions", True),
        ("POST", "/admin/reload", True),
        ("POST", "/admin/commands/vars", True),  # every admin route, mounted later or not
        ("GET", "/admin/reload", False),  # no body to check
        ("POST", "/onebot/v11/ws", False),
        ("POST", "/telegram/webhook", False),
    ],
)
def test_which_requests_must_be_json(method: str, path: str, expected: bool) -> None:
    assert is_json_route(method, path) is expected


def test_errors_and_json_are_readable_utf8() -> None:
    response = json_error(401, "没有钥匙")
    assert response.status == 401
    assert json.loads(response.text) == {
        "rule": None, "answer": "", "error": "没有钥匙", "trace_id": None,
    }  # fmt: skip
    assert dumps({"a": "中文"}) == '{"a": "中文"}'
    assert dumps({"a": "\ud800"}) == '{"a": "\\ud800"}'  # a lone surrogate: ASCII escapes
