"""An agent framework consuming the demo: Pydantic AI (`pydantic-ai-slim[mcp]` 2.66) with its
`MCPToolset` over a FastMCP stdio client and an offline `FunctionModel` that plays the model.

usage: python pydantic_ai_client.py DEMO_BINARY

The scripted model calls a tool that fails, then reads what Pydantic AI put in front of it on the
next turn and checks that it is the payload with code, retry and details intact; it then acts on
`retry` (fixes the input for `with-changes`, stops for `no`). Closes with "N passed, M failed".
"""

import json
import os
import sys

from fastmcp.client import Client
from fastmcp.client.transports import StdioTransport
from pydantic_ai import Agent
from pydantic_ai.mcp import MCPToolset
from pydantic_ai.messages import ModelRequest, ModelResponse, RetryPromptPart, TextPart, ToolCallPart, ToolReturnPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

from checks import check, finish

def last_tool_feedback(messages, tool_name):
    """The content the model receives about its last call of `tool_name` (a retry prompt or a return)."""
    for message in reversed(messages):
        if not isinstance(message, ModelRequest):
            continue
        for part in message.parts:
            if isinstance(part, (RetryPromptPart, ToolReturnPart)) and part.tool_name == tool_name:
                return part
    return None


def payload_of(part):
    """The error payload inside what the model sees: the content is the payload's JSON text."""
    content = part.content
    if isinstance(content, dict):
        return content
    if isinstance(content, str):
        try:
            return json.loads(content)
        except ValueError:
            start = content.find("{")
            end = content.rfind("}")
            if start >= 0 and end > start:
                try:
                    return json.loads(content[start : end + 1])
                except ValueError:
                    return None
    return None


seen = {}


def scripted_model(messages, info: AgentInfo) -> ModelResponse:
    step = sum(1 for m in messages if isinstance(m, ModelResponse))
    if step == 0:
        names = {t.name for t in info.function_tools}
        seen["tools"] = names
        return ModelResponse(parts=[ToolCallPart("orders-get", {"orderId": "A-9999"}, tool_call_id="c1")])
    if step == 1:
        part = last_tool_feedback(messages, "orders-get")
        seen["unknown-order"] = part
        p = payload_of(part) if part else None
        # retry is with-changes: fix the input.
        if p and p.get("retry") == "with-changes":
            return ModelResponse(parts=[ToolCallPart("orders-get", {"orderId": "A-1001"}, tool_call_id="c2")])
        return ModelResponse(parts=[TextPart("could not act on the error")])
    if step == 2:
        seen["order"] = last_tool_feedback(messages, "orders-get")
        return ModelResponse(parts=[ToolCallPart("refunds-issue", {"orderId": "A-1001", "amountCents": 500}, tool_call_id="c3")])
    if step == 3:
        part = last_tool_feedback(messages, "refunds-issue")
        seen["refund"] = part
        p = payload_of(part) if part else None
        # retry is no: stop and tell the user.
        if p and p.get("retry") == "no":
            return ModelResponse(parts=[TextPart("Please sign in to issue refunds.")])
        return ModelResponse(parts=[TextPart("unexpected")])
    return ModelResponse(parts=[TextPart("done")])


def main():
    if len(sys.argv) != 2:
        print("usage: python pydantic_ai_client.py DEMO_BINARY", file=sys.stderr)
        sys.exit(2)
    demo = sys.argv[1]
    transport = StdioTransport(command=demo, args=["serve", "--stdio", "--memory"], log_file=open(os.devnull, "w"))
    toolset = MCPToolset(Client(transport))
    agent = Agent(FunctionModel(scripted_model), toolsets=[toolset])
    result = agent.run_sync("Look up order A-9999, then refund 5 dollars on A-1001.")

    check("the model sees the demo's tools", {"orders-get", "refunds-issue", "orders-cancel"} <= seen.get("tools", set()))
    part = seen.get("unknown-order")
    p = payload_of(part) if part else None
    check(
        "after an error from a tool with an output schema, the model receives the payload",
        p is not None,
        repr(part.content if part else None),
    )
    if p is not None:
        check("  code is intact", p.get("code") == "PRECONDITION_FAILED", json.dumps(p))
        check("  retry is intact", p.get("retry") == "with-changes", json.dumps(p))
        check("  details are intact", p.get("details") == {"reason": "unknown-order"}, json.dumps(p))
        check(
            "  the message is intact",
            p.get("message")
            == "No order with that id exists. List the orders to find it. Change the input or the state it depends on, then retry.",
            json.dumps(p),
        )
        check(
            "  the correlation id is intact",
            isinstance(p.get("correlationId"), str) and p["correlationId"].startswith("c-"),
            json.dumps(p),
        )
        check(
            "  nothing else was added to the payload",
            set(p) - {"notProcessed"} == {"code", "message", "retry", "details", "correlationId"},
            json.dumps(p),
        )
    order = seen.get("order")
    content = order.content if isinstance(order, ToolReturnPart) else None
    check(
        "after fixing the input, the model receives the order",
        isinstance(content, dict) and content.get("orderId") == "A-1001",
        repr(content),
    )
    part = seen.get("refund")
    p = payload_of(part) if part else None
    check("a NOT_AUTHENTICATED payload reaches the model", p is not None and p.get("code") == "NOT_AUTHENTICATED", repr(part))
    if p is not None:
        check("  with retry no and no details", p.get("retry") == "no" and "details" not in p, json.dumps(p))
    check("the run ends with the model's answer", result.output == "Please sign in to issue refunds.", repr(result.output))


main()
finish()
