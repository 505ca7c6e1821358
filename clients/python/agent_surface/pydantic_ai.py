"""A Pydantic AI toolset that recovers from agent-surface errors as the decision table says.

```python
from pydantic_ai import Agent
from pydantic_ai.mcp import MCPToolset
from agent_surface.pydantic_ai import RecoveringToolset

toolset = RecoveringToolset(MCPToolset("http://127.0.0.1:8787/mcp", cache_tools=False), host=MyHost())
agent = Agent("openai:gpt-5", toolsets=[toolset])
```

It wraps an `MCPToolset` through Pydantic AI's public API only: it is a `WrapperToolset`
(`get_tools`, `call_tool`), calls tools with `MCPToolset.direct_call_tool(..., metadata=...)`
(request `_meta`), and lists tools with the toolset's public FastMCP `client`
(`list_tools_mcp()`, for the list's `_meta`).

- Each model tool call is one intent with its own invocation id; waits (`after-delay`),
  re-listings (`after-refresh`, retried while the tool and its instance are still listed), fresh ids, a conflict's
  derived id and the host's approval happen inside the call, so the model sees one result.
- An error the model must act on (`change-input`), or one that ends the intent (`stop`,
  `not-converging`, `denied`, ...), comes back as the tool's *return value*
  `{"error": payload, "recovery": {"stop", "action", "attempts"}}`, not as a `ModelRetry`: it does
  not spend the tool's retry budget (1 by default, so a second consecutive error would end the
  run), and the model reads the payload, not a prose retry prompt.
- `get_tools` offers only the tools the server lists now: a stale cached list cannot offer a tool
  that is gone. Calls are planned on the listing `get_tools` last showed the model of their run
  (`RunContext.run_id`: concurrent runs of one toolset keep their own); a re-listing inside a call's
  recovery serves that call's retry only. Build the `MCPToolset` with `cache_tools=False` so that new tools appear too (no
  public hook invalidates its cache).

Where Pydantic AI has no public hook, the helper makes do: a failed call's `CallToolResult`
reaches a wrapper only as the text of the `ModelRetry` (or `ToolFailed`) that `direct_call_tool`
raises, so the payload is parsed back from that text (the demo's text block is the payload's JSON);
and the list's `_meta` (the surface tokens) needs the FastMCP client, as `MCPToolset.list_tools`
drops it.
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass, field
from typing import Any

from pydantic_ai.exceptions import ModelRetry, ToolFailed
from pydantic_ai.tools import RunContext
from pydantic_ai.toolsets import WrapperToolset
from pydantic_ai.toolsets.abstract import ToolsetTool

from .loop import Host, Listing, Outcome, Recoverer, Recovery
from .table import BOUNDS, Bounds


def payload_from_text(text: str) -> dict[str, Any] | None:
    """The error payload in an error's text: the whole text, or its outermost JSON object."""
    for candidate in (text, text[text.find("{") : text.rfind("}") + 1] if "{" in text else ""):
        try:
            value = json.loads(candidate)
        except ValueError:
            continue
        if isinstance(value, dict) and isinstance(value.get("code"), str) and isinstance(value.get("retry"), str):
            return value
    return None


def _error_text(error: BaseException) -> str:
    message = getattr(error, "message", None)
    return message if isinstance(message, str) else str(error)


@dataclass
class _State:
    """Shared by the copies Pydantic AI makes of the toolset for each run."""

    # The listing each run's model was last shown, by `RunContext.run_id`: concurrent runs of one
    # toolset plan on their own (one run's `get_tools` must not move another's tokens). The most
    # recent `MAX_RUNS` runs are kept.
    listings: dict[str | None, Listing] = field(default_factory=dict)
    log: list[tuple[str, Recovery]] = field(default_factory=list)

    MAX_RUNS = 256

    def shown(self, run: str | None, listing: Listing) -> None:
        self.listings.pop(run, None)
        self.listings[run] = listing
        while len(self.listings) > self.MAX_RUNS:
            self.listings.pop(next(iter(self.listings)))


class _McpTransport:
    def __init__(self, toolset: Any, state: _State) -> None:
        self.toolset = toolset
        self.state = state

    async def call(self, name: str, args: dict[str, Any], meta: dict[str, Any]) -> Outcome:
        try:
            value = await self.toolset.direct_call_tool(name, args, metadata=meta)
        except (ModelRetry, ToolFailed) as e:
            payload = payload_from_text(_error_text(e))
            if payload is None:
                raise
            return Outcome(ok=False, payload=payload)
        return Outcome(ok=True, value=value)

    async def list(self) -> Listing:
        result = await self.toolset.client.list_tools_mcp()
        meta = result.meta or {}
        tools = {t.name: t.model_dump(by_alias=True, mode="json", exclude_none=True) for t in result.tools}
        version = meta.get("agent-surface/surfaceVersion")
        return Listing(
            tools=tools,
            surface_id=meta.get("agent-surface/surfaceId"),
            surface_version=version if isinstance(version, int) else None,
        )


@dataclass
class RecoveringToolset(WrapperToolset[Any]):
    """Wraps an `MCPToolset`; see the module documentation."""

    host: Host = field(default_factory=Host)
    bounds: Bounds = BOUNDS
    id_prefix: str = field(default_factory=lambda: f"pai-{uuid.uuid4().hex[:12]}")
    state: _State = field(default_factory=_State)

    @property
    def log(self) -> list[tuple[str, Recovery]]:
        """Each tool call's recovery, in order: (tool name, how it ended)."""
        return self.state.log

    def _recoverer(self) -> Recoverer:
        return Recoverer(_McpTransport(self.wrapped, self.state), self.host, self.bounds)

    async def get_tools(self, ctx: RunContext[Any]) -> dict[str, ToolsetTool[Any]]:
        # The listing the model is shown is the one its calls are planned on. A recovery's own
        # re-listing serves that intent's retry only: adopted for every call, it would send a
        # call the model planned alongside, on a tool that changed too, with the new tool
        # version and arguments built for the old definition, and it would run.
        listing = await _McpTransport(self.wrapped, self.state).list()
        self.state.shown(getattr(ctx, "run_id", None), listing)
        tools = await self.wrapped.get_tools(ctx)
        return {name: tool for name, tool in tools.items() if name in listing.tools}

    async def call_tool(self, name: str, tool_args: dict[str, Any], ctx: RunContext[Any], tool: ToolsetTool[Any]) -> Any:
        call_id = ctx.tool_call_id or uuid.uuid4().hex[:12]
        recovery = await self._recoverer().run(
            name,
            tool_args,
            invocation_id=f"{self.id_prefix}-{call_id}",
            planned=self.state.listings.get(getattr(ctx, "run_id", None)),
        )
        self.state.log.append((name, recovery))
        if recovery.stop == "succeeded":
            return recovery.value
        return {
            "error": recovery.payload,
            "recovery": {"stop": recovery.stop, "action": recovery.action, "attempts": recovery.attempts},
        }
