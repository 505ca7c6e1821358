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
  printed as notes;
- a long-running call as a task (the `io.modelcontextprotocol/tasks` extension, SEP-2663): the
  official SDK's extension API (`mcp.client.extension.ClientExtension` with a `ResultClaim` for
  `resultType: "task"`) declares the extension, `client.session.call_tool(..., allow_claimed=True)`
  returns the CreateTaskResult, and `tasks/get` / `tasks/cancel` go through
  `client.session.send_request`: completion, a failing job, cancellation, an unknown task id, and
  a client without the extension answered synchronously; over stdio and once over HTTP. The same
  extension given to `mcp.Client` and to FastMCP 4's `Client(extensions=...)` resolves the task
  transparently.

Prints one line per check ("ok NAME" / "FAIL NAME: detail") and closes with
"N passed, M failed"; exits non-zero on any failure.
"""

import json
import os
import re
import subprocess
import sys
import threading
import time
import warnings
from typing import Any, Literal

import anyio
import mcp_types as mt
from fastmcp.client import Client as FastMCPClient
from fastmcp.client.elicitation import ElicitResult as FastMCPElicitResult
from fastmcp.client.transports import StdioTransport
from mcp import Client as McpClient
from mcp import StdioServerParameters
from mcp.client.extension import ClaimContext, ClientExtension, ResultClaim
from mcp.client.stdio import stdio_client
from mcp.shared.exceptions import MCPError
from pydantic import TypeAdapter

from checks import check, finish

MODERN = "2026-07-28"
CONFIRM_KEY = "agent-surface/confirm"
ARGS = ["serve", "--stdio", "--memory", "--conformance"]
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


async def outcome_of(awaitable):
    """The result of `awaitable`, or the MCPError it raised (for checks that expect one)."""
    try:
        return await awaitable
    except MCPError as e:
        return e


def check_rpc_error(name, outcome, code):
    """Checks that `outcome` is an MCPError with JSON-RPC error `code`."""
    check(name, isinstance(outcome, MCPError) and outcome.error.code == code, describe(outcome))


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
        f"{label} → CONFIRMATION_INVALID {{reason: denied}}, retry no, notProcessed",
        isinstance(p, dict)
        and p.get("code") == "CONFIRMATION_INVALID"
        and p.get("retry") == "no"
        and p.get("details") == {"reason": "denied"}
        and p.get("notProcessed") is True,
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
            outcome = await outcome_of(call(order_id, request_state=bad, input_responses=accept))
            check_rpc_error(f"{label} {what} → MCP error -32602", outcome, -32602)
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


# --- A long-running call as a task (io.modelcontextprotocol/tasks) ------------------------------
#
# Which library level: FastMCP 4.2.3's own client task support lives in the separate
# `fastmcp-tasks` package (not among this project's pinned client packages; without it a FastMCP
# `Client` never declares the extension), and `mcp` 2.3 ships no tasks extension and no model of
# the 2026 CreateTaskResult (`mcp_types.CreateTaskResult` / `GetTaskRequest` are the 2025-11-25
# shapes: a nested `task`, `ttl`, `pollInterval`). What `mcp` 2.3 does expose publicly is the
# generic client-extension API (SEP-2133): a `ClientExtension` is advertised under the request
# `_meta` clientCapabilities.extensions, and its `ResultClaim` teaches `tools/call` the extra
# `resultType: "task"` shape. That is the lowest public level that declares the extension and
# sees the CreateTaskResult: `client.session.call_tool(..., allow_claimed=True)` returns it as is,
# and `client.session.send_request` (which stamps the same `_meta` and, on HTTP, the `Mcp-Method`
# and `Mcp-Name` headers) sends `tasks/get` and `tasks/cancel`. No raw JSON-RPC is needed.

TASKS_EXTENSION = "io.modelcontextprotocol/tasks"
# A task's terminal states.
TASK_TERMINAL = ("completed", "failed", "cancelled")


class TaskCreated(mt.Result):
    """The extension's CreateTaskResult (2026-07-28), typed here: `mcp` 2.3 has no model of it."""

    result_type: Literal["task"]
    task_id: str
    status: str
    status_message: str | None = None
    created_at: str | None = None
    last_updated_at: str | None = None
    ttl_ms: int | None = None
    poll_interval_ms: int | None = None


class TaskRequest(mt.Request[dict[str, Any], str]):
    """`tasks/get` or `tasks/cancel` {taskId}; the extension names the task in `Mcp-Name`."""

    name_param = "taskId"


# Task states and acks are checked as they come off the wire.
RAW_RESULT = TypeAdapter(dict[str, Any])


async def task_request(session, method, task_id):
    return await session.send_request(TaskRequest(method=method, params={"taskId": task_id}), RAW_RESULT)


async def poll_task(session, task_id, *, until, within, interval=None):
    """`tasks/get` until the status is one of `until` or `within` seconds pass; every state seen."""
    states = []
    deadline = time.monotonic() + within
    while True:
        state = await task_request(session, "tasks/get", task_id)
        states.append(state)
        if state.get("status") in until or time.monotonic() >= deadline:
            return states
        hint = state.get("pollIntervalMs")
        await anyio.sleep(interval if interval is not None else min(max((hint or 500) / 1000, 0.05), 1.0))


async def resolve_task(created, ctx: ClaimContext):
    """The claim's resolver: poll the task to its end and hand back the tool's CallToolResult."""
    states = await poll_task(ctx.session, created.task_id, until=TASK_TERMINAL, within=15)
    final = states[-1]
    if final.get("status") != "completed" or not isinstance(final.get("result"), dict):
        raise RuntimeError(f"task {created.task_id} ended {final.get('status')!r}: {json.dumps(final)}")
    return mt.CallToolResult.model_validate(final["result"])


class TasksExtension(ClientExtension):
    identifier = TASKS_EXTENSION

    def __init__(self):
        self.resolved = []  # the CreateTaskResults the resolver was handed

    def claims(self):
        async def resolve(created, ctx):
            self.resolved.append(created)
            return await resolve_task(created, ctx)

        return [ResultClaim(result_type="task", model=TaskCreated, resolve=resolve)]


def task_text(state):
    result = state.get("result") if isinstance(state, dict) else None
    for block in (result or {}).get("content") or []:
        if block.get("type") == "text":
            return block.get("text")
    return None


def statuses(states):
    return [s.get("status") for s in states]


def check_created(label, created):
    wire = created.model_dump(by_alias=True, mode="json", exclude_none=True) if isinstance(created, TaskCreated) else None
    check(f"{label} → a task (resultType task)", wire is not None and wire.get("resultType") == "task", describe(created))
    if wire is None:
        return False
    check(
        f"{label}   CreateTaskResult: taskId, status working, createdAt, lastUpdatedAt, ttlMs, pollIntervalMs",
        bool(wire.get("taskId"))
        and wire.get("status") == "working"
        and all(isinstance(wire.get(k), str) and wire.get(k) for k in ("createdAt", "lastUpdatedAt"))
        and all(isinstance(wire.get(k), int) and wire.get(k) > 0 for k in ("ttlMs", "pollIntervalMs")),
        json.dumps(wire),
    )
    return True


async def check_task_completes(label, session, created, text):
    """(a): `tasks/get` right away shows working, then completed within ~10 s with the result."""
    first = await task_request(session, "tasks/get", created.task_id)
    check(
        f"{label}   tasks/get right away → working, the same task",
        first.get("status") == "working" and first.get("taskId") == created.task_id and "result" not in first,
        json.dumps(first),
    )
    states = await poll_task(session, created.task_id, until=TASK_TERMINAL, within=10)
    final = states[-1]
    check(f"{label}   tasks/get → completed within 10 s", final.get("status") == "completed", repr(statuses(states)))
    check(
        f"{label}   with the result: {text}",
        (final.get("result") or {}).get("isError") is not True and task_text(final) == text,
        json.dumps(final),
    )


async def tasks_mcp_sdk(demo):
    label = "[mcp sdk, tasks]"
    tasks = TasksExtension()
    transport = stdio_client(StdioServerParameters(command=demo, args=ARGS), errlog=DEVNULL)
    async with McpClient(transport, extensions=[tasks], read_timeout_seconds=30) as client:
        session = client.session
        check(f"{label} the client negotiates {MODERN}", client.protocol_version == MODERN, repr(client.protocol_version))
        server_ext = (session.discover_result.capabilities.extensions or {}) if session.discover_result else {}
        check(f"{label} server/discover advertises {TASKS_EXTENSION}", TASKS_EXTENSION in server_ext, describe(session.discover_result))

        async def call(name, arguments):
            return await session.call_tool(name, arguments, read_timeout_seconds=30, allow_claimed=True)

        # Both tasks start at once; (a) is watched while (b) runs.
        created_a = await call("slow_compute", {"seconds": 1, "label": "x"})
        created_b = await call("failing_job", {})

        # (a) a task that completes
        if check_created(f"{label} slow_compute {{seconds: 1}}", created_a):
            await check_task_completes(f"{label} slow_compute", session, created_a, '"Computed x"')

        # (b) a capability error ends the task completed, with isError and the payload
        if check_created(f"{label} failing_job", created_b):
            states = await poll_task(session, created_b.task_id, until=TASK_TERMINAL, within=10)
            final = states[-1]
            result = final.get("result") or {}
            check(f"{label} failing_job   tasks/get → completed", final.get("status") == "completed", repr(statuses(states)))
            try:
                payload = json.loads(task_text(final) or "")
            except ValueError:
                payload = None
            check(
                f"{label} failing_job   the result has isError and code EXECUTION_FAILED",
                result.get("isError") is True and isinstance(payload, dict) and payload.get("code") == "EXECUTION_FAILED",
                json.dumps(final),
            )

        # (c) cancel a read-only task: ack, then cancelled within ~5 s
        created_c = await call("slow_compute", {"seconds": 30, "label": "long"})
        if check_created(f"{label} slow_compute {{seconds: 30}}", created_c):
            ack = await task_request(session, "tasks/cancel", created_c.task_id)
            check(f"{label}   tasks/cancel → acknowledged {{resultType: complete}}", ack.get("resultType") == "complete", json.dumps(ack))
            states = await poll_task(session, created_c.task_id, until=TASK_TERMINAL, within=5, interval=0.1)
            check(f"{label}   tasks/get → cancelled within 5 s", statuses(states)[-1] == "cancelled", repr(statuses(states)))
            check(f"{label}   with no result", "result" not in states[-1], json.dumps(states[-1]))

        # A capability that is not long-running answers synchronously even with the extension.
        result = await call("greet", {"name": "Ada"})
        check(
            f"{label} greet (not long-running) → the ordinary result",
            isinstance(result, mt.CallToolResult) and first_text(result) == '"Hello, Ada!"',
            describe(result),
        )

        # (e) an unknown task id
        outcome = await outcome_of(task_request(session, "tasks/get", "t-no-such-task"))
        check_rpc_error(f"{label} tasks/get of an unknown id → MCP error -32602", outcome, -32602)

        # The high-level call resolves the task through the extension's claim.
        result = await client.call_tool("slow_compute", {"seconds": 0, "label": "y"})
        check(
            f"{label} client.call_tool(slow_compute) → the task is resolved to the result",
            len(tasks.resolved) == 1 and result.is_error is not True and first_text(result) == '"Computed y"',
            f"resolved {len(tasks.resolved)} task(s); {describe(result)}",
        )

    # (d) a client without the extension: the same call answers synchronously.
    transport = stdio_client(StdioServerParameters(command=demo, args=ARGS), errlog=DEVNULL)
    async with McpClient(transport, read_timeout_seconds=30) as client:
        try:
            result = await client.session.call_tool(
                "slow_compute", {"seconds": 0, "label": "z"}, read_timeout_seconds=30, allow_claimed=True
            )
        except Exception as e:  # noqa: BLE001 - reported as a failed check
            result = e
        check(
            "[mcp sdk, no tasks extension] slow_compute {seconds: 0} → the ordinary result, no task",
            isinstance(result, mt.CallToolResult) and first_text(result) == '"Computed z"',
            describe(result),
        )


def start_http_demo(demo):
    server = subprocess.Popen([demo, "serve", "--http", "127.0.0.1:0", "--memory", "--conformance"], stdout=subprocess.PIPE, stderr=DEVNULL, text=True)
    line = server.stdout.readline().strip()
    match = re.match(r"listening on (http://[^/]+/mcp)$", line)
    if not match:
        server.kill()
        raise RuntimeError(f"unexpected first line from the server: {line!r}")
    return server, match.group(1)


async def tasks_mcp_sdk_http(demo):
    """(a) over Streamable HTTP, where `tasks/get` must carry `Mcp-Name: <taskId>` (the demo answers
    -32020 without it): `TaskRequest.name_param` has the session send it (`mcp_types.GetTaskRequest`,
    the 2025-11-25 type, declares none)."""
    label = "[mcp sdk, tasks over http]"
    server, url = start_http_demo(demo)
    try:
        async with McpClient(url, extensions=[TasksExtension()], read_timeout_seconds=30) as client:
            check(f"{label} the client negotiates {MODERN}", client.protocol_version == MODERN, repr(client.protocol_version))
            created = await client.session.call_tool(
                "slow_compute", {"seconds": 1, "label": "h"}, read_timeout_seconds=30, allow_claimed=True
            )
            if check_created(f"{label} slow_compute {{seconds: 1}}", created):
                await check_task_completes(f"{label} slow_compute", client.session, created, '"Computed h"')
    finally:
        server.kill()
        server.wait()


async def tasks_fastmcp(demo):
    """FastMCP 4's `Client(extensions=...)` folds the same extension in; `call_tool_mcp` resolves the task."""
    label = "[fastmcp, tasks]"
    tasks = TasksExtension()
    async with FastMCPClient(demo_transport(demo), extensions=[tasks]) as client:
        result = await client.call_tool_mcp("slow_compute", {"seconds": 0, "label": "f"}, timeout=30)
        check(
            f"{label} call_tool_mcp(slow_compute) → the task is resolved to the result",
            len(tasks.resolved) == 1 and result.is_error is not True and first_text(result) == '"Computed f"',
            f"resolved {len(tasks.resolved)} task(s); {describe(result)}",
        )


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
        ("mcp sdk, tasks", tasks_mcp_sdk),
        ("mcp sdk, tasks over http", tasks_mcp_sdk_http),
        ("fastmcp, tasks", tasks_fastmcp),
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
