"""Twelve scripted Pydantic AI tasks against the demo over MCP, with and without the recovery
helper (`agent_surface.pydantic_ai.RecoveringToolset`, installed from `clients/python`).

usage: python pydantic_ai_recovery.py DEMO_BINARY

Each task runs twice, each time against a fresh `agent-surface-demo serve --http` (the agent is
alice, signed in with a bearer token; bob and maria, an approver, act through the plain HTTP
binding `/api` as the second channel): once with Pydantic AI's defaults (`MCPToolset`,
`tool_error_behavior='retry'`, a retry budget of 1) and once wrapped in the helper. The model is
an offline `FunctionModel` that plays the same reasonable model in both: it carries out the
task's plan, and on an error it reads the payload and acts on `retry` as a model can (it changes
the input for `with-changes`, stops for `no`, relays a confirmation to the user, and otherwise
repeats the call once: a model cannot wait or re-list).

With the helper every task must end done or with its correct stop; without it, the script checks
what Pydantic AI does by default (so the comparison is measured, not assumed) and prints both
tallies. Closes with "N passed, M failed".
"""

import asyncio
import json
import os
import subprocess
import sys
import time
import urllib.request

from fastmcp.client import Client
from fastmcp.client.transports import StreamableHttpTransport
from pydantic_ai import Agent
from pydantic_ai.mcp import MCPToolset
from pydantic_ai.messages import ModelRequest, ModelResponse, RetryPromptPart, TextPart, ToolCallPart, ToolReturnPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

from agent_surface import ConfirmationPrompt, Host
from agent_surface.pydantic_ai import RecoveringToolset, payload_from_text

from checks import check, finish

TOKENS = {"alice": "agent-token", "bob": "bob-token", "maria": "maria-token"}


class Demo:
    """`agent-surface-demo serve --http 127.0.0.1:0` with three principals."""

    def __init__(self, binary):
        args = [binary, "serve", "--http", "127.0.0.1:0", "--memory"]
        args += ["--token", "agent-token=alice", "--token", "bob-token=bob", "--token", "maria-token=maria:approver"]
        self.process = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        line = self.process.stdout.readline().strip()
        if not line.startswith("listening on "):
            self.process.kill()
            raise RuntimeError(f"the demo did not start: {line!r}")
        self.mcp_url = line.removeprefix("listening on ")
        self.api = self.mcp_url.removesuffix("/mcp") + "/api"

    def close(self):
        self.process.kill()
        self.process.wait()

    def invoke(self, who, capability, input, target=None):
        """A call through the plain HTTP binding as `who`: the second channel."""
        body = {"capability": capability, "input": input}
        if target:
            body["target"] = {"instanceId": target}
        request = urllib.request.Request(
            self.api + "/invoke",
            data=json.dumps(body).encode(),
            headers={"Content-Type": "application/json", "Authorization": f"Bearer {TOKENS[who]}"},
        )
        try:
            with urllib.request.urlopen(request, timeout=10) as response:
                return json.loads(response.read() or b"null")
        except urllib.error.HTTPError as e:
            return json.loads(e.read() or b"null")

    def checkout(self, cart):
        """Bob checks `cart` out through the HTTP binding; returns once it is no longer listed."""
        self.invoke("bob", "cart.checkout", {}, target=cart)
        for _ in range(200):
            snapshot = self.snapshot("bob")
            carts = {i["instanceId"] for c in snapshot["capabilities"] if c["name"] == "cart.view" for i in c["instances"]}
            if cart not in carts:
                return
            time.sleep(0.01)
        raise RuntimeError(f"{cart} is still mounted")

    def snapshot(self, who):
        request = urllib.request.Request(self.api + "/capabilities", headers={"Authorization": f"Bearer {TOKENS[who]}"})
        with urllib.request.urlopen(request, timeout=10) as response:
            return json.loads(response.read())


class SecondChannel(Host):
    """The person behind the app: asked by the helper (never by the model), answers through maria,
    an approver, on the HTTP binding."""

    def __init__(self, demo, approve):
        self.demo = demo
        self.approve = approve
        self.asked = []

    async def confirm(self, prompt: ConfirmationPrompt) -> str:
        self.asked.append(prompt.summary)
        if not self.approve:
            return "denied"
        result = await asyncio.to_thread(
            self.demo.invoke, "maria", "approvals.approve", {"confirmationId": prompt.confirmation_id}
        )
        return "approved" if isinstance(result, dict) and result.get("status") == "ok" else "unavailable"


# ---- The model ------------------------------------------------------------------------------


def feedback(messages, call_id):
    """What the model received for its call `call_id`: ("ok", content), ("error", payload,
    recovery) or None."""
    for message in reversed(messages):
        if not isinstance(message, ModelRequest):
            continue
        for part in message.parts:
            if getattr(part, "tool_call_id", None) != call_id:
                continue
            # Pydantic AI 2.66 puts a retried call's error in a return part with outcome "retried"
            # (older versions used a RetryPromptPart).
            if isinstance(part, RetryPromptPart) or getattr(part, "outcome", "success") != "success":
                text = part.content if isinstance(part.content, str) else json.dumps(part.content)
                return ("error", payload_from_text(text) or {"code": "?", "retry": "?"}, None)
            if isinstance(part, ToolReturnPart):
                content = part.content
                if isinstance(content, dict) and "error" in content and "recovery" in content:
                    return ("error", content["error"] or {}, content["recovery"])
                return ("ok", content)
    return None


def target_argument(info, tool, instances):
    """The reserved target argument a multi-instance tool offers the model, if any: the property
    whose enum lists the instance ids."""
    for t in info.function_tools:
        if t.name != tool:
            continue
        for name, prop in (t.parameters_json_schema.get("properties") or {}).items():
            values = prop.get("enum") if isinstance(prop, dict) else None
            if isinstance(values, list) and set(instances) <= set(values):
                return name
    return None


class ScriptedModel:
    """Plays a model that carries out `task.plan` and acts on each error's payload."""

    def __init__(self, task, demo):
        self.task = task
        self.demo = demo
        self.step = 0
        self.call = None
        self.repeated = False
        self.calls = 0
        self.targeted = False

    def send(self, tool, args):
        self.calls += 1
        self.call = (tool, args, f"call-{self.calls}")
        hook = self.task.get("before")
        if hook and self.calls == 1:
            hook(self.demo)
        return ModelResponse(parts=[ToolCallPart(tool, args, tool_call_id=self.call[2])])

    def __call__(self, messages, info: AgentInfo) -> ModelResponse:
        if self.call is None:
            tool, args = self.task["plan"][0]
            return self.send(tool, args)
        seen = feedback(messages, self.call[2])
        if seen is None:
            return ModelResponse(parts=[TextPart("lost: no feedback")])
        if seen[0] == "ok":
            self.step += 1
            self.repeated = False
            if self.step < len(self.task["plan"]):
                tool, args = self.task["plan"][self.step]
                return self.send(tool, args)
            return ModelResponse(parts=[TextPart("done")])
        _, payload, recovery = seen
        code, retry = payload.get("code"), payload.get("retry")
        tool, args, _ = self.call
        if recovery is not None and recovery.get("action") != "change-input":
            # The helper already did what the category prescribes; this is where it stopped.
            return ModelResponse(parts=[TextPart(f"stop: {recovery['stop']} {code}")])
        if retry == "with-changes":
            changed = self.task.get("fix", lambda *_: None)(payload, tool, args, info)
            self.targeted |= changed is not None and code == "AMBIGUOUS_INSTANCE"
            if changed is None:
                return ModelResponse(parts=[TextPart(f"ask-user: {code}")])
            return self.send(*changed)
        if retry == "no":
            return ModelResponse(parts=[TextPart(f"stop: {code}")])
        if retry == "with-confirmation":
            return ModelResponse(parts=[TextPart(f"ask-user-approval: {code}")])
        if not self.repeated:
            self.repeated = True
            return self.send(tool, args)
        return ModelResponse(parts=[TextPart(f"gave-up: {code}")])


# ---- The tasks ------------------------------------------------------------------------------


def fix_address(payload, tool, args, info):
    code = payload.get("code")
    if code == "INVALID_INPUT":
        return tool, {**args, "address": {**args["address"], "zip": "12345"}}
    if code == "PRECONDITION_FAILED" and args["orderId"] != "A-1001":
        return tool, {**args, "orderId": "A-1001"}
    return None


def pick_instance(payload, tool, args, info):
    instances = [i["instanceId"] if isinstance(i, dict) else i for i in payload.get("details", {}).get("instances", [])]
    name = target_argument(info, tool, instances)
    if name is None or "cart-alice" not in instances:
        return None
    return tool, {**args, name: "cart-alice"}


# `helper`/`default`: the expected end ("done", "stop: {stop} {code}" after the helper,
# "stop: {code}", "ask-user...", or the type of the exception the run ended with). `targeted`: the
# model must have repaired AMBIGUOUS_INSTANCE through the tool's target argument (the schema
# offers it, with the instance ids as its enum). `log`: the helper's (tool, stop, requests) per
# model tool call.
TASKS = [
    {"name": "look up an order", "plan": [("orders-get", {"orderId": "A-1001"})],
     "helper": "done", "default": "done", "log": [("orders-get", "succeeded", 1)]},
    {"name": "three quotes in a row (rate limited)",
     "plan": [("shipping-quote", {"zip": z}) for z in ("10115", "20095", "80331")],
     "helper": "done", "default": "UnexpectedModelBehavior",
     "log": [("shipping-quote", "succeeded", 1), ("shipping-quote", "succeeded", 1), ("shipping-quote", "succeeded", 2)]},
    {"name": "two consecutive errors from one tool (invalid input, then a shipped order)",
     "plan": [("orders-update_address", {"orderId": "A-1002", "address": {"street": "9 Elm St", "city": "Springfield"}})],
     "fix": fix_address, "helper": "done", "default": "UnexpectedModelBehavior",
     "log": [("orders-update_address", "returned-to-caller", 1)] * 2 + [("orders-update_address", "succeeded", 1)]},
    {"name": "a slow first lookup (TIMEOUT, idempotent)", "plan": [("shipping-track", {"orderId": "A-1003"})],
     "helper": "done", "default": "done", "log": [("shipping-track", "succeeded", 2)]},
    {"name": "an ambiguous instance (two carts)", "plan": [("cart-view", {})], "fix": pick_instance,
     "targeted": True, "helper": "done", "default": "done",
     "log": [("cart-view", "returned-to-caller", 1), ("cart-view", "succeeded", 1)]},
    {"name": "two-phase confirmation approved by a second channel", "plan": [("orders-cancel", {"orderId": "A-1001"})],
     "approve": True, "helper": "done", "default": "ask-user-approval: CONFIRMATION_REQUIRED",
     "log": [("orders-cancel", "succeeded", 2)]},
    {"name": "two-phase confirmation denied", "plan": [("orders-cancel", {"orderId": "A-1003"})],
     "approve": False, "helper": "stop: denied CONFIRMATION_INVALID",
     "default": "ask-user-approval: CONFIRMATION_REQUIRED", "log": [("orders-cancel", "denied", 1)]},
    {"name": "a refund without the support role (NOT_AUTHORIZED)",
     "plan": [("refunds-issue", {"orderId": "A-1001", "amountCents": 500})],
     "helper": "stop: returned-to-caller NOT_AUTHORIZED", "default": "stop: NOT_AUTHORIZED",
     "log": [("refunds-issue", "returned-to-caller", 1)]},
    {"name": "a disabled tool (CAPABILITY_NOT_AVAILABLE)", "plan": [("loyalty-redeem", {})],
     "helper": "stop: returned-to-caller CAPABILITY_NOT_AVAILABLE", "default": "UnexpectedModelBehavior",
     "log": [("loyalty-redeem", "returned-to-caller", 1)]},
    {"name": "a failing handler (EXECUTION_FAILED)", "plan": [("reports-export", {})],
     "helper": "stop: returned-to-caller EXECUTION_FAILED", "default": "stop: EXECUTION_FAILED",
     "log": [("reports-export", "returned-to-caller", 1)]},
    {"name": "a stale tool list: the surface changed since listing (STALE_CAPABILITY)",
     "plan": [("cart-clear", {})], "before": lambda demo: demo.checkout("cart-bob"),
     "helper": "done", "default": "done", "log": [("cart-clear", "succeeded", 2)]},
    {"name": "a stale tool list: the tool is gone",
     "plan": [("cart-view", {})], "before": lambda demo: (demo.checkout("cart-bob"), demo.checkout("cart-alice")),
     "helper": "stop: returned-to-caller", "default": "UnexpectedModelBehavior",
     "log": [("cart-view", "returned-to-caller", 1)]},
]


async def run_task(binary, task, helper):
    demo = Demo(binary)
    try:
        transport = StreamableHttpTransport(demo.mcp_url, headers={"Authorization": f"Bearer {TOKENS['alice']}"})
        toolset = MCPToolset(Client(transport), cache_tools=False)
        host = SecondChannel(demo, task.get("approve", False))
        if helper:
            toolset = RecoveringToolset(toolset, host=host)
        model = ScriptedModel(task, demo)
        agent = Agent(FunctionModel(model), toolsets=[toolset])
        try:
            result = await agent.run(task["name"])
            end = result.output
        except Exception as e:  # what the framework does by default is what we record
            end = type(e).__name__
        log = [(name, r.stop, r.attempts) for name, r in toolset.log] if helper else []
        return {"end": end, "calls": model.calls, "log": log, "asked": host.asked, "targeted": model.targeted}
    finally:
        demo.close()


def ends_as(end, expected):
    if expected in ("done", "UnexpectedModelBehavior") or expected.startswith("ask-user"):
        return end == expected
    return end.startswith(expected)


async def main():
    if len(sys.argv) != 2:
        print("usage: python pydantic_ai_recovery.py DEMO_BINARY", file=sys.stderr)
        sys.exit(2)
    binary = sys.argv[1]
    tallies = {"helper": {}, "default": {}}
    for task in TASKS:
        for which in ("default", "helper"):
            outcome = await run_task(binary, task, which == "helper")
            end = outcome["end"]
            expected = task[which]
            ok = ends_as(end, expected)
            check(f"[{which}] {task['name']}: ends {expected}", ok, f"ended {end!r} after {outcome['calls']} model calls")
            if task.get("targeted"):
                check(f"[{which}]   the model named the instance through the target argument", outcome["targeted"])
            kind = "done" if end == "done" else end if end.endswith("Error") or end.endswith("Behavior") else "stopped"
            tallies[which][kind] = tallies[which].get(kind, 0) + 1
            if which == "helper":
                log = task["log"]
                check(f"[helper]   tool calls ended {log}", outcome["log"] == log, repr(outcome["log"]))
                if task.get("approve") is not None:
                    check(f"[helper]   the person was asked once, not the model", len(outcome["asked"]) == 1, repr(outcome["asked"]))
    for which in ("helper", "default"):
        counts = ", ".join(f"{n} {kind}" for kind, n in sorted(tallies[which].items()))
        print(f"recovery tasks [{which}] of {len(TASKS)}: {counts}")


asyncio.run(main())
finish()
