"""The official Python SDK client (`mcp` 2.3.0) against `agent-surface-demo serve --stdio`.

usage: python clients.py DEMO_BINARY CASES_JSON

For every case of cases.json: call the tool through `ClientSession.call_tool` (which checks
structured content against a tool's output schema), parse the result as any consumer would, and
check that an error result carries exactly the expected payload in its text block and no
structured content, and that a success carries its output. Prints one line per check and closes
with "N passed, M failed"; exits non-zero on any failure.
"""

import json
import os
import sys

import anyio
from mcp import ClientSession, StdioServerParameters, types
from mcp.client.stdio import stdio_client

from checks import check, finish, matches

def substitute(meta, surface):
    if meta is None:
        return None
    out = {}
    for k, v in meta.items():
        out[k] = surface["id"] if v == "$surfaceId" else surface["version"] if v == "$firstVersion" else v
    return out


def first_text(result):
    for block in result.content:
        if getattr(block, "type", None) == "text":
            return block.text
    return None


async def run_session(demo, name, session_spec, cases):
    answers = list(session_spec["elicitation"] or [])
    elicited = []
    list_changed = []

    async def on_elicit(context, params):
        elicited.append(params.message)
        return types.ElicitResult(action=answers.pop(0) if answers else "decline")

    async def on_message(message):
        if isinstance(message, types.ToolListChangedNotification) or (
            getattr(getattr(message, "root", None), "method", None) == "notifications/tools/list_changed"
        ):
            list_changed.append(message)

    params = StdioServerParameters(command=demo, args=session_spec["args"])
    with open(os.devnull, "w") as devnull:
        async with stdio_client(params, errlog=devnull) as (read, write):
            async with ClientSession(
                read,
                write,
                elicitation_callback=on_elicit if session_spec["elicitation"] is not None else None,
                message_handler=on_message,
            ) as session:
                await session.initialize()
                listed = await session.list_tools()
                meta = listed.meta or {}
                surface = {"id": meta.get("agent-surface/surfaceId"), "version": meta.get("agent-surface/surfaceVersion")}
                check(
                    f"[{name}] tools/list carries the surface id and version in _meta",
                    isinstance(surface["id"], str) and isinstance(surface["version"], int),
                )
                tools = {t.name: t for t in listed.tools}
                check(f"[{name}] hidden admin tool is absent", "admin-purge_cache" not in tools)
                check(f"[{name}] orders-get declares an output schema", bool(tools["orders-get"].output_schema))
                ann = {n: tools[n].annotations for n in ("orders-cancel", "orders-get", "refunds-issue")}
                check(
                    f"[{name}] annotations follow the effect",
                    ann["orders-cancel"].destructive_hint is True
                    and ann["orders-get"].read_only_hint is True
                    and ann["refunds-issue"].open_world_hint is True,
                )

                for case in cases:
                    label = f"[{name}] {case['tool']}: {case['name']}"
                    if case.get("sleepBeforeMs"):
                        await anyio.sleep(case["sleepBeforeMs"] / 1000)
                    call_meta = substitute(case.get("meta"), surface)
                    if case.get("cancelAfterMs"):
                        with anyio.move_on_after(case["cancelAfterMs"] / 1000) as scope:
                            await session.call_tool(case["tool"], case.get("arguments", {}), meta=call_meta)
                        check(f"{label} (the call was abandoned and cancelled)", scope.cancelled_caught)
                        await anyio.sleep(0.05)
                    try:
                        result = await session.call_tool(case["tool"], case.get("arguments", {}), meta=call_meta)
                    except Exception as e:  # noqa: BLE001 - reported as a failed check
                        check(label, False, f"call_tool raised {type(e).__name__}: {e}")
                        continue
                    text = first_text(result)
                    try:
                        parsed = json.loads(text) if text is not None else None
                    except ValueError:
                        parsed = None
                    if "error" in case:
                        check(f"{label} → is_error", result.is_error is True)
                        check(f"{label} → no structured content on an error", result.structured_content is None)
                        check(f"{label} → exactly one text block", len(result.content) == 1)
                        check(f"{label} → payload {case['error']['code']}", matches(case["error"], parsed), text or "")
                    else:
                        check(f"{label} → success", result.is_error is not True, text or "")
                        output = result.structured_content if result.structured_content is not None else parsed
                        check(f"{label} → output", matches(case["ok"], output), json.dumps(output))
                        if result.structured_content is not None:
                            check(f"{label} → text block is the serialized output", matches(result.structured_content, parsed))
                    if case.get("elicited"):
                        check(f"{label} → the person was asked", case["elicited"] in elicited, json.dumps(elicited))
                if name == "anonymous":
                    check(f"[{name}] the cart checkout announced a tool list change", len(list_changed) >= 1)


async def main():
    if len(sys.argv) != 3:
        print("usage: python clients.py DEMO_BINARY CASES_JSON", file=sys.stderr)
        sys.exit(2)
    demo, cases_path = sys.argv[1], sys.argv[2]
    with open(cases_path) as f:
        spec = json.load(f)
    for name, session_spec in spec["sessions"].items():
        try:
            await run_session(demo, name, session_spec, [c for c in spec["cases"] if c["session"] == name])
        except Exception as e:  # noqa: BLE001 - reported as a failed check
            check(f"[{name}] session", False, f"{type(e).__name__}: {e}")


anyio.run(main)
finish()
