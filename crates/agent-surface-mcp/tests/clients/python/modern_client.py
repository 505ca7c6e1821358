"""Modern-era (MCP 2026-07-28) clients against `agent-surface-demo serve --stdio --conformance`.

usage: python modern_client.py DEMO_BINARY

Stateless MCP has no `initialize` and no server-to-client requests: a call that needs the
person's approval answers `resultType: "input_required"` with an elicitation form under
`agent-surface/confirm` and a sealed `requestState`, and the client repeats the call with the
answer (the multi-round-trip flow, MRTR). This script checks that flow with real clients, each
in its default mode:

- FastMCP 4's `Client` over `StdioTransport` (it must negotiate 2026-07-28): approval accepted,
  approval declined, progress notifications;
- the same session at its lowest public level (`client.session.call_tool(...,
  allow_input_required=True)`): one round driven by hand — the question, a missing answer,
  tampered or foreign states (`-32602`), accept, a replayed state, a declined state answered
  again, and two concurrent retries of one accepted state (exactly one runs);
- the official Python SDK's high-level `mcp.Client` (`mcp` 2.3, default `mode="auto"`):
  accept, decline, progress;
- Pydantic AI 2.66's `MCPToolset` over a FastMCP client with an offline `FunctionModel`: the
  model cancels an order, the client's elicitation handler approves, and the model's next turn
  sees the result. Also the toolset built with `elicitation_handler=` itself, whose warnings are
  printed as notes.

Prints one line per check ("ok NAME" / "FAIL NAME: detail") and closes with
"N passed, M failed"; exits non-zero on any failure.
"""

import json
import os
import sys
import threading
import warnings

import anyio
import mcp_types as mt
from fastmcp.client import Client as FastMCPClient
from fastmcp.client.elicitation import ElicitResult as FastMCPElicitResult
from fastmcp.client.transports import StdioTransport
from mcp import Client as McpClient
from mcp import StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.shared.exceptions import MCPError

from checks import check, finish

MODERN = "2026-07-28"
CONFIRM_KEY = "agent-surface/confirm"
ARGS = ["serve", "--stdio", "--conformance"]
# Each section gets its own demo process (a fresh shop), and at most this long.
SECTION_TIMEOUT = 60
# The whole script, child processes included, never runs longer than this.
WATCHDOG_SECONDS = 420
# Where the demo's stderr (its logs) goes.
DEVNULL = open(os.devnull, "w")  # noqa: SIM115 - open for the whole run


def approval_message(order_id):
    return (
        "The assistant asks for your approval: "
        f"Cancel order {order_id} and refund the customer in full. Approve this action?"
    )


def note(text):
    print(f"note {text}")


def first_text(result):
    for block in result.content or []:
        if getattr(block, "type", None) == "text":
            return block.text
    return None


def payload_of(result):
    text = first_text(result)
    try:
        return json.loads(text) if text is not None else None
    except ValueError:
        return None


def describe(result):
    if result is None:
        return "None"
    if isinstance(result, BaseException):
        return f"{type(result).__name__}: {result}"
    dump = getattr(result, "model_dump", None)
    if dump is not None:
        return json.dumps(dump(by_alias=True, mode="json", exclude_none=True))
    return repr(result)


def check_denied(label, result):
    p = payload_of(result)
    check(f"{label} → isError", getattr(result, "is_error", None) is True, describe(result))
    check(
        f"{label} → CONFIRMATION_INVALID {{reason: denied}}, retry no",
        isinstance(p, dict)
        and p.get("code") == "CONFIRMATION_INVALID"
        and p.get("retry") == "no"
        and p.get("details") == {"reason": "denied"},
        describe(result),
    )


def check_cancelled(label, result, order_id, cents):
    check(f"{label} → success", getattr(result, "is_error", None) is not True, describe(result))
    out = getattr(result, "structured_content", None)
    check(
        f"{label} → the order is cancelled and refunded",
        out == {"orderId": order_id, "refundedCents": cents},
        describe(result),
    )


def check_progress(label, events):
    """`events`: ("progress", progress, total) tuples and one ("result",) marker, in arrival order."""
    reports = [e for e in events if e[0] == "progress"]
    check(f"{label} → 3 progress reports", len(reports) == 3, repr(events))
    values = [r[1] for r in reports]
    check(
        f"{label} → progress increases (0, 50, 100 of 100)",
        values == [0, 50, 100] and all(r[2] == 100 for r in reports),
        repr(reports),
    )
    check(
        f"{label} → every report arrives before the result",
        bool(events) and events[-1] == ("result",) and len(events) == len(reports) + 1,
        repr(events),
    )


def demo_transport(demo):
    return StdioTransport(command=demo, args=ARGS, log_file=DEVNULL)


def check_modern(label, protocol_version, initialize_result, discover_result):
    note(f"{label} negotiated protocol version {protocol_version}")
    check(f"{label} negotiates {MODERN}", protocol_version == MODERN, repr(protocol_version))
    check(
        f"{label} connected with server/discover, not initialize",
        initialize_result is None and discover_result is not None and MODERN in discover_result.supported_versions,
        describe(discover_result),
    )


async def get_status(session, order_id):
    result = await session.call_tool("orders-get", {"orderId": order_id})
    return (result.structured_content or {}).get("status")


# --- FastMCP 4 ---------------------------------------------------------------------------------


async def fastmcp_high_level(demo):
    answers = ["accept", "decline"]
    asked = []

    async def on_elicit(message, response_type, params, context):
        asked.append((message, response_type, getattr(params, "requested_schema", None)))
        return FastMCPElicitResult(action=answers.pop(0) if answers else "cancel")

    async with FastMCPClient(demo_transport(demo), elicitation_handler=on_elicit) as client:
        session = client.session
        check_modern("[fastmcp] the client", client.protocol_version, client.initialize_result, session.discover_result)

        # (a) accept
        result = await client.call_tool_mcp("orders-cancel", {"orderId": "A-1001"}, timeout=30)
        check_cancelled("[fastmcp] orders-cancel A-1001, approved", result, "A-1001", 4200)
        check(
            "[fastmcp]   the elicitation handler was called once, with the approval message",
            [a[0] for a in asked] == [approval_message("A-1001")],
            repr(asked),
        )
        check(
            "[fastmcp]   as a form without fields (no response type)",
            len(asked) == 1 and asked[0][1] is None and asked[0][2] == {"type": "object", "properties": {}},
            repr(asked),
        )

        # (b) decline
        asked.clear()
        result = await client.call_tool_mcp("orders-cancel", {"orderId": "A-1003"}, timeout=30)
        check_denied("[fastmcp] orders-cancel A-1003, declined", result)
        check("[fastmcp]   the person was asked once", [a[0] for a in asked] == [approval_message("A-1003")], repr(asked))
        check("[fastmcp]   nothing ran: A-1003 is still placed", await get_status(session, "A-1003") == "placed")

        # (c) progress
        events = []

        async def on_progress(progress, total, message):
            events.append(("progress", progress, total))

        result = await client.call_tool_mcp("test_tool_with_progress", {}, progress_handler=on_progress, timeout=30)
        events.append(("result",))
        await anyio.sleep(0.3)  # a report arriving late would land after the marker
        check("[fastmcp] test_tool_with_progress → success", result.is_error is not True, describe(result))
        check_progress("[fastmcp] test_tool_with_progress", events)


async def fastmcp_low_level(demo):
    """One approval round driven by hand through the session FastMCP exposes (`client.session`)."""
    asked = []

    async def on_elicit(message, response_type, params, context):
        asked.append(message)
        return FastMCPElicitResult(action="decline")

    accept = {CONFIRM_KEY: mt.ElicitResult(action="accept")}
    decline = {CONFIRM_KEY: mt.ElicitResult(action="decline")}

    async with FastMCPClient(demo_transport(demo), elicitation_handler=on_elicit) as client:
        session = client.session
        label = "[fastmcp session]"

        async def call(order_id, **kw):
            return await session.call_tool(
                "orders-cancel", {"orderId": order_id}, read_timeout_seconds=30, allow_input_required=True, **kw
            )

        first = await call("A-1001")
        check(f"{label} orders-cancel → input_required", isinstance(first, mt.InputRequiredResult), describe(first))
        if not isinstance(first, mt.InputRequiredResult):
            return
        wire = first.model_dump(by_alias=True, mode="json", exclude_none=True)
        question = (wire.get("inputRequests") or {}).get(CONFIRM_KEY) or {}
        check(f"{label}   resultType is input_required", wire.get("resultType") == "input_required", json.dumps(wire))
        check(f"{label}   one question, under {CONFIRM_KEY}", list(wire.get("inputRequests") or {}) == [CONFIRM_KEY], json.dumps(wire))
        check(
            f"{label}   an elicitation/create form without fields and the approval message",
            question.get("method") == "elicitation/create"
            and question.get("params", {}).get("message") == approval_message("A-1001")
            and question.get("params", {}).get("requestedSchema", {}).get("properties") == {}
            and question.get("params", {}).get("mode", "form") == "form",
            json.dumps(question),
        )
        state = first.request_state
        check(f"{label}   with a requestState", isinstance(state, str) and len(state) > 0, repr(state))

        # A retry with the state but no answer asks again.
        again = await call("A-1001", request_state=state)
        check(
            f"{label} a retry without an answer → asked again",
            isinstance(again, mt.InputRequiredResult) and CONFIRM_KEY in (again.input_requests or {}),
            describe(again),
        )

        # States that do not open: -32602, and nothing runs.
        def flip(s, i):
            return s[:i] + ("A" if s[i] != "A" else "B") + s[i + 1 :]

        for what, bad, order_id in (
            ("a tampered requestState (payload)", flip(state, len(state) // 2), "A-1001"),
            ("a tampered requestState (signature)", flip(state, len(state) - 3), "A-1001"),
            ("the requestState of another call (other arguments)", state, "A-1003"),
        ):
            try:
                outcome = await call(order_id, request_state=bad, input_responses=accept)
            except MCPError as e:
                outcome = e
            check(
                f"{label} {what} → MCP error -32602",
                isinstance(outcome, MCPError) and outcome.error.code == -32602,
                describe(outcome),
            )
        check(f"{label}   nothing ran: A-1001 and A-1003 are still placed",
              await get_status(session, "A-1001") == "placed" and await get_status(session, "A-1003") == "placed")

        # Accept: runs once.
        done = await call("A-1001", request_state=state, input_responses=accept)
        check_cancelled(f"{label} the retry with accept", done, "A-1001", 4200)

        # The same retry again: refused, nothing runs. The precondition phase (order not
        # shipped) runs before the confirmation phase, so on the now cancelled order the replay
        # is refused there, before the spent approval is looked at.
        replay = await call("A-1001", request_state=state, input_responses=accept)
        p = payload_of(replay) if isinstance(replay, mt.CallToolResult) else None
        check(f"{label} the same accepted retry again → isError", getattr(replay, "is_error", None) is True, describe(replay))
        check(
            f"{label}   refused by the precondition (order-not-cancellable, status cancelled)",
            isinstance(p, dict)
            and p.get("code") == "PRECONDITION_FAILED"
            and p.get("details") == {"reason": "order-not-cancellable", "status": "cancelled"},
            describe(replay),
        )

        # Decline, then the same state answered accept: still denied, nothing runs.
        first = await call("A-1003")
        state3 = getattr(first, "request_state", None)
        declined = await call("A-1003", request_state=state3, input_responses=decline)
        check_denied(f"{label} the retry with decline", declined)
        flipped = await call("A-1003", request_state=state3, input_responses=accept)
        check_denied(f"{label} the declined state answered accept afterwards", flipped)
        check(f"{label}   nothing ran: A-1003 is still placed", await get_status(session, "A-1003") == "placed")

        # Two retries of one accepted state at once: exactly one runs, the other is refused
        # (consumed when it reaches the confirmation phase while the order is still placed).
        first = await call("A-1003")
        state4 = getattr(first, "request_state", None)
        outcomes = []

        async def retry():
            outcomes.append(await call("A-1003", request_state=state4, input_responses=accept))

        async with anyio.create_task_group() as tg:
            tg.start_soon(retry)
            tg.start_soon(retry)
        ran = [o for o in outcomes if getattr(o, "is_error", None) is not True]
        refused = [payload_of(o) for o in outcomes if getattr(o, "is_error", None) is True]
        check(
            f"{label} two concurrent accepted retries → exactly one runs",
            len(ran) == 1 and len(refused) == 1 and ran[0].structured_content == {"orderId": "A-1003", "refundedCents": 9900},
            " | ".join(describe(o) for o in outcomes),
        )
        reasons = [(r or {}).get("details", {}).get("reason") for r in refused]
        check(
            f"{label}   the other is refused as consumed (or, had it come late, by the precondition)",
            len(refused) == 1
            and (
                (refused[0] or {}).get("code") == "CONFIRMATION_INVALID" and reasons == ["consumed"]
                or (refused[0] or {}).get("code") == "PRECONDITION_FAILED" and reasons == ["order-not-cancellable"]
            ),
            json.dumps(refused),
        )
        if refused:
            note(f"{label} the concurrent loser was refused with {json.dumps(refused[0])}")
        check(f"{label} the client's elicitation handler was never called (rounds driven by hand)", asked == [], repr(asked))


# --- The official Python SDK (mcp 2.3) -----------------------------------------------------------


async def mcp_sdk(demo):
    answers = ["accept", "decline"]
    asked = []

    async def on_elicit(context, params):
        asked.append(params.message)
        return mt.ElicitResult(action=answers.pop(0) if answers else "cancel")

    label = "[mcp sdk]"
    transport = stdio_client(StdioServerParameters(command=demo, args=ARGS), errlog=DEVNULL)
    async with McpClient(transport, elicitation_callback=on_elicit, read_timeout_seconds=30) as client:
        check_modern(f"{label} the client (mode=auto)", client.protocol_version, client.session.initialize_result, client.session.discover_result)

        result = await client.call_tool("orders-cancel", {"orderId": "A-1001"})
        check_cancelled(f"{label} orders-cancel A-1001, approved", result, "A-1001", 4200)
        check(f"{label}   the elicitation callback was called once, with the approval message",
              asked == [approval_message("A-1001")], repr(asked))

        asked.clear()
        result = await client.call_tool("orders-cancel", {"orderId": "A-1003"})
        check_denied(f"{label} orders-cancel A-1003, declined", result)
        check(f"{label}   the person was asked once", asked == [approval_message("A-1003")], repr(asked))
        check(f"{label}   nothing ran: A-1003 is still placed", await get_status(client, "A-1003") == "placed")

        events = []

        async def on_progress(progress, total, message):
            events.append(("progress", progress, total))

        result = await client.call_tool("test_tool_with_progress", {}, progress_callback=on_progress)
        events.append(("result",))
        await anyio.sleep(0.3)
        check(f"{label} test_tool_with_progress → success", result.is_error is not True, describe(result))
        check_progress(f"{label} test_tool_with_progress", events)


# --- Pydantic AI 2.66 ----------------------------------------------------------------------------


async def pydantic_ai(demo):
    from pydantic_ai import Agent
    from pydantic_ai.mcp import MCPToolset
    from pydantic_ai.messages import ModelRequest, ModelResponse, RetryPromptPart, TextPart, ToolCallPart, ToolReturnPart
    from pydantic_ai.models.function import FunctionModel

    def last_feedback(messages, tool_name):
        for message in reversed(messages):
            if isinstance(message, ModelRequest):
                for part in message.parts:
                    if isinstance(part, (RetryPromptPart, ToolReturnPart)) and part.tool_name == tool_name:
                        return part
        return None

    async def run(label, make_toolset):
        asked = []
        seen = {}

        async def on_elicit(message, response_type, params, context):
            asked.append(message)
            return FastMCPElicitResult(action="accept")

        toolset = make_toolset(on_elicit)

        def model(messages, info):
            step = sum(1 for m in messages if isinstance(m, ModelResponse))
            if step == 0:
                seen["tools"] = {t.name for t in info.function_tools}
                seen["protocol"] = toolset.client.protocol_version
                return ModelResponse(parts=[ToolCallPart("orders-cancel", {"orderId": "A-1001"}, tool_call_id="c1")])
            if step == 1:
                seen["feedback"] = last_feedback(messages, "orders-cancel")
                return ModelResponse(parts=[TextPart("Order A-1001 is cancelled.")])
            return ModelResponse(parts=[TextPart("unexpected turn")])

        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            agent = Agent(FunctionModel(model), toolsets=[toolset])
            result = await agent.run("Cancel order A-1001.")
        for w in caught:
            note(f"{label} warning: {w.category.__name__}: {w.message}")
        if not caught:
            note(f"{label} no warnings")

        note(f"{label} negotiated protocol version {seen.get('protocol')}")
        check(f"{label} the toolset's client negotiates {MODERN}", seen.get("protocol") == MODERN, repr(seen.get("protocol")))
        check(f"{label} the model sees orders-cancel", "orders-cancel" in seen.get("tools", set()), repr(seen.get("tools")))
        check(f"{label} the elicitation handler was called once, with the approval message",
              asked == [approval_message("A-1001")], repr(asked))
        part = seen.get("feedback")
        check(
            f"{label} the model's next turn sees the successful result",
            isinstance(part, ToolReturnPart) and part.content == {"orderId": "A-1001", "refundedCents": 4200},
            repr(part),
        )
        check(f"{label} the run ends with the model's answer", result.output == "Order A-1001 is cancelled.", repr(result.output))
        return caught

    # The handler on the FastMCP client the toolset is given.
    await run(
        "[pydantic-ai, handler on the fastmcp Client]",
        lambda on_elicit: MCPToolset(FastMCPClient(demo_transport(demo), elicitation_handler=on_elicit)),
    )
    # The handler given to the toolset, which builds the FastMCP client itself.
    await run(
        "[pydantic-ai, handler on MCPToolset]",
        lambda on_elicit: MCPToolset(demo_transport(demo), elicitation_handler=on_elicit),
    )


# --- main --------------------------------------------------------------------------------------


async def main():
    if len(sys.argv) != 2:
        print("usage: python modern_client.py DEMO_BINARY", file=sys.stderr)
        sys.exit(2)
    demo = sys.argv[1]
    sections = [
        ("fastmcp", fastmcp_high_level),
        ("fastmcp session", fastmcp_low_level),
        ("mcp sdk", mcp_sdk),
        ("pydantic-ai", pydantic_ai),
    ]
    for name, section in sections:
        try:
            with anyio.fail_after(SECTION_TIMEOUT * (2 if name == "pydantic-ai" else 1)):
                await section(demo)
        except BaseException as e:  # noqa: BLE001 - reported as a failed check
            if isinstance(e, (KeyboardInterrupt, SystemExit)):
                raise
            check(f"[{name}] section", False, f"{type(e).__name__}: {e}")


def watchdog():
    print(f"FAIL watchdog: still running after {WATCHDOG_SECONDS}s", flush=True)
    os._exit(1)


timer = threading.Timer(WATCHDOG_SECONDS, watchdog)
timer.daemon = True
timer.start()
anyio.run(main)
timer.cancel()
DEVNULL.close()
finish()
