"""Request lines the MCP SDK cannot read, and the JSON-RPC answer each must get.

Shared by the stdio and the HTTP tests: every one is answered, ``-32700`` (not JSON the
SDK accepts) or ``-32600`` (JSON, but no JSON-RPC message), with the request's ``id``
whenever it can still be read from the text, else ``null``.
"""

from __future__ import annotations

from typing import Any

PARSE_ERROR = -32700
INVALID_REQUEST = -32600
INVALID_PARAMS = -32602


def _call(request_id: int, arguments: str) -> str:
    return (
        f'{{"jsonrpc":"2.0","id":{request_id},"method":"tools/call",'
        f'"params":{{"name":"get_status","arguments":{arguments}}}}}'
    )


# name -> (line, code, id). Arguments nested 197 deep are still JSON the SDK reads (its
# parameter check then refuses them, -32602); 250 deep is past its parser's limit.
UNREADABLE: dict[str, tuple[str, int, Any]] = {
    "nested_197_deep": (_call(1, '{"name":' + "[" * 197 + "]" * 197 + "}"), INVALID_PARAMS, 1),
    "nested_250_deep": (_call(8, '{"name":' + "[" * 250 + "]" * 250 + "}"), PARSE_ERROR, 8),
    "lone_surrogate": (_call(2, '{"name":"\\ud800"}'), PARSE_ERROR, 2),
    "integer_5000_digits": (_call(3, '{"name":' + "7" * 5000 + "}"), PARSE_ERROR, 3),
    "truncated": ('{"jsonrpc":"2.0","id":"four","method":"tools/ca', PARSE_ERROR, "four"),
    "garbage": ("this is not json", PARSE_ERROR, None),
    "no_method": ('{"jsonrpc":"2.0","id":6}', INVALID_REQUEST, 6),
    "wrong_version": ('{"jsonrpc":"1.0","id":7,"method":"ping"}', INVALID_REQUEST, 7),
    "an_array": ("[1, 2, 3]", INVALID_REQUEST, None),
}
