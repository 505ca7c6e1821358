"""The conformance suites' tool calls, made by the official Python SDK client (`mcp`) against
`agent-surface-demo serve --stdio --memory --conformance`, with their exact answers asserted
(conformance-calls.json): the suite's own checks pass against a server that answers anything.

usage: python conformance_calls.py DEMO_BINARY CALLS_JSON
"""

import json
import os
import sys

import anyio
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client

from checks import check, finish


async def main(demo, calls):
    params = StdioServerParameters(command=demo, args=["serve", "--stdio", "--memory", "--conformance"])
    with open(os.devnull, "w") as devnull:
        async with stdio_client(params, errlog=devnull) as (read, write):
            async with ClientSession(read, write) as session:
                await session.initialize()
                await session.list_tools()
                for c in calls:
                    label = f"[python sdk] {c['scenario']}: {c['tool']}"
                    progress = []

                    async def on_progress(value, total, message):
                        progress.append(value)

                    try:
                        result = await session.call_tool(
                            c["tool"], c["arguments"], progress_callback=on_progress if c.get("progress") else None
                        )
                    except Exception as e:  # noqa: BLE001 - any failure is the check's
                        check(label, False, f"call_tool raised: {e!r}")
                        continue
                    check(f"{label} → isError {c['isError']}", bool(result.is_error) == c["isError"], repr(result))
                    blocks = result.content
                    one_text = len(blocks) == 1 and getattr(blocks[0], "type", None) == "text"
                    check(f"{label} → exactly one text block", one_text, repr(blocks))
                    try:
                        value = json.loads(blocks[0].text) if one_text else None
                    except ValueError:
                        value = None
                    if c["isError"]:
                        e = c["error"]
                        check(f"{label} → no structured content on the error", result.structured_content is None)
                        ok = isinstance(value, dict) and value.get("code") == e["code"] and value.get("retry") == e["retry"]
                        check(f"{label} → code {e['code']}, retry {e['retry']}", ok, blocks[0].text if one_text else "")
                        message = value.get("message", "") if isinstance(value, dict) else ""
                        check(f"{label} → the fixture's message", message.startswith(e["messageStartsWith"]), message)
                    else:
                        check(f"{label} → the fixture's output", value == c["output"], blocks[0].text if one_text else "")
                        if result.structured_content is not None:
                            check(f"{label} → structured content is the output", result.structured_content == c["output"])
                    if c.get("progress"):
                        increasing = all(a <= b for a, b in zip(progress, progress[1:]))
                        check(
                            f"{label} → {c['progress']} increasing progress notifications",
                            len(progress) >= c["progress"] and increasing,
                            repr(progress),
                        )


if __name__ == "__main__":
    if len(sys.argv) != 3:
        print("usage: python conformance_calls.py DEMO_BINARY CALLS_JSON", file=sys.stderr)
        sys.exit(2)
    with open(sys.argv[2]) as f:
        spec = json.load(f)
    try:
        anyio.run(main, sys.argv[1], spec["calls"])
    except Exception as e:  # noqa: BLE001
        check("session", False, repr(e))
    finish()
