"""The tool list a client sends its model: every tool's input and output schema.

Strict inputs (``additionalProperties: false``, bounded integers), a structured output
schema on every tool, without the per-property titles pydantic would add, and the MCP
annotations.
"""

from __future__ import annotations

from typing import Any

import pytest
from mcp import Client

from tests.conftest import Tools

pytestmark = pytest.mark.anyio


def _keys(schema: Any) -> set[str]:
    if isinstance(schema, list):
        return set().union(*(_keys(s) for s in schema)) if schema else set()
    if not isinstance(schema, dict):
        return set()
    found = set(schema)
    for key, value in schema.items():
        if key in ("properties", "$defs") and isinstance(value, dict):
            found |= set().union(*(_keys(v) for v in value.values())) if value else set()
        else:
            found |= _keys(value)
    return found


def _integers(schema: Any) -> list[dict[str, Any]]:
    if isinstance(schema, list):
        return [i for s in schema for i in _integers(s)]
    if not isinstance(schema, dict):
        return []
    own = [schema] if schema.get("type") == "integer" else []
    return own + [i for v in schema.values() for i in _integers(v)]


async def test_every_tool_has_strict_input_an_untitled_output_schema_and_annotations(
    tools: Tools,
) -> None:
    client: Client = tools.client
    listed = (await client.list_tools()).tools
    assert len(listed) >= 39
    for tool in listed:
        assert tool.input_schema.get("additionalProperties") is False, tool.name
        assert all("maximum" in i for i in _integers(tool.input_schema)), tool.name
        assert tool.output_schema is not None, tool.name
        assert "title" not in _keys(tool.output_schema), tool.name
        assert tool.annotations is not None, tool.name
        assert tool.annotations.read_only_hint is not None, tool.name


async def test_a_structured_result_matches_its_output_schema(tools: Tools) -> None:
    listed = {t.name: t for t in (await tools.client.list_tools()).tools}
    result = await tools.call("list_panes")
    schema = listed["list_panes"].output_schema
    assert schema is not None and set(result) <= set(schema["properties"])
