"""The recovery loop over any MCP client: one tool call (an intent) sent and, while the error's
row of the decision table says so, repaired and sent again.

It needs a `Transport` (call a tool with `_meta`; list the tools with the list's `_meta`) and,
optionally, a `Host` (a person who approves confirmations; a check whether a call took effect).
`agent_surface.pydantic_ai` provides both for Pydantic AI's `MCPToolset`.

What goes in `_meta`: `agent-surface/invocationId` on every attempt (the idempotency key: a
fresh one per retry where the row says `fresh`, one derived from the request after
`INVOCATION_CONFLICT`); `agent-surface/surfaceId` and `agent-surface/surfaceVersion` from the
listing the call was planned on (updated after a re-listing, never dropped);
`agent-surface/toolVersion`, the version of the tool as that listing showed it (a call of any
effect planned on a definition that changed since is refused `STALE_CAPABILITY {reason:
tool-version-mismatch}`, and that refusal is re-listed and returned, never retried on its own
(`refresh-then-ask`: the model reads the new definition first; the same arguments may mean
something else now); never dropped, and never swapped for another version under the same
arguments: any other `after-refresh` error whose re-listing shows the tool under another
version is returned the same way);
`agent-surface/confirmationId` once a person approved.

After a re-listing (`refresh`) the call is sent again only if the tool is still listed and
enabled (no `_meta` `agent-surface/unavailableReason`), under the version the call named, and
the instance it names (in
`agent-surface/target` or the `_instance` argument) is still listed, whether or not the listing
changed (a `binding-failed` precondition is retried once, as its row says), with the target
retargeted where a registration was replaced (to the error's `liveRegistrationId`, or the named
instance's live registration).

Interrupted calls follow one rule (spec/error-model.md, "Interrupted calls"): the code says
whether a repeat could double an effect, never the tool's declarations. `TIMEOUT`, `CANCELLED`
and `COMPONENT_UNMOUNTED {phase: mid-flight}` come only from a read or an idempotent call (or,
for `CANCELLED`, from any call stopped before its handler started) and are repeated as their
row says, without asking the host; only `EXECUTION_FAILED {reason:
outcome-unknown}` (a call with an effect, interrupted) is verified first.

The convergence guard compares the code, `details.reason` (or `phase`), the tool, the target and
the surface tokens and tool version sent: a failure met again under newer tokens (the surface moved again after
the re-listing) is progress, not the same failure. A wait is not held to it: a limit or a
dependency met again after its delay is waited for again, until a delay passes the bounds
(`delay-too-long`) or the attempts run out (`budget-exhausted`).
"""

from __future__ import annotations

import asyncio
import copy
import hashlib
import json
from decimal import Decimal
from dataclasses import dataclass, field
from typing import Any, Awaitable, Callable, Mapping, Protocol

from .table import BOUNDS, DENIED, Bounds, Decision, decide

INVOCATION_ID = "agent-surface/invocationId"
SURFACE_ID = "agent-surface/surfaceId"
SURFACE_VERSION = "agent-surface/surfaceVersion"
# The tool version's `_meta` key: the Rust table `agent_surface_core::tool_version::wire::MCP_META`
# (a Rust test checks that this line agrees with it); no field is standardized yet.
TOOL_VERSION = "agent-surface/toolVersion"
CONFIRMATION_ID = "agent-surface/confirmationId"
TARGET = "agent-surface/target"
IDEMPOTENT = "agent-surface/idempotent"
UNAVAILABLE_REASON = "agent-surface/unavailableReason"
INSTANCES = "agent-surface/instances"
TARGET_ARGUMENT = "_instance"


@dataclass
class Listing:
    """A `tools/list` result: each tool's definition (as JSON) by name, and the surface tokens of
    the list's `_meta`."""

    tools: dict[str, Any]
    surface_id: str | None = None
    surface_version: int | None = None

    def _meta(self, name: str) -> Mapping[str, Any]:
        tool = self.tools.get(name)
        meta = tool.get("_meta") if isinstance(tool, Mapping) else None
        return meta if isinstance(meta, Mapping) else {}

    def tool_version(self, name: str) -> str | None:
        """The version the tool is listed with (`_meta` `agent-surface/toolVersion`), if any."""
        version = self._meta(name).get(TOOL_VERSION)
        return version if isinstance(version, str) else None

    def enabled(self, name: str) -> bool:
        """Listed and not disabled (no `_meta` `agent-surface/unavailableReason`)."""
        return name in self.tools and UNAVAILABLE_REASON not in self._meta(name)

    def instances(self, name: str) -> list[tuple[str, str]] | None:
        """The live (instanceId, registrationId) pairs the tool lists; `None` when it lists none
        (a tool with at most one instance)."""
        listed = self._meta(name).get(INSTANCES)
        if not isinstance(listed, list):
            return None
        return [(i["instanceId"], i["registrationId"]) for i in listed
                if isinstance(i, Mapping) and isinstance(i.get("instanceId"), str) and isinstance(i.get("registrationId"), str)]

    def instance_listed(self, name: str, instance_id: Any) -> bool:
        """Whether a named instance is still listed (`True` when none is named or the tool lists
        no instances)."""
        listed = self.instances(name)
        if not isinstance(instance_id, str) or listed is None:
            return True
        return any(iid == instance_id for iid, _ in listed)


def retarget(target: Any, payload: Mapping[str, Any], listing: Listing, tool: str) -> dict[str, Any] | None:
    """The target to retry with after a re-listing: a registration no longer listed is replaced
    by the error's `liveRegistrationId` or the named instance's live registration; `None` when
    what the target names is gone.

    A registration is live when the listing shows it. A tool with at most one instance lists
    none, and then only the error can tell: one about the call's target (`COMPONENT_UNMOUNTED`,
    `STALE_CAPABILITY {reason: registration-replaced}`) says the named registration is gone, and
    its `liveRegistrationId` is the server's word for the live one; any other error was not about
    the registration, which stays."""
    if not isinstance(target, Mapping):
        return None
    t = dict(target)
    iid, rid = t.get("instanceId"), t.get("registrationId")
    if not listing.instance_listed(tool, iid):
        return None
    if not isinstance(rid, str):
        return t
    listed = listing.instances(tool)

    def live(r: str) -> bool:
        return listed is not None and any(lr == r for _, lr in listed)

    details = payload.get("details") if isinstance(payload.get("details"), Mapping) else {}
    about_target = payload.get("code") == "COMPONENT_UNMOUNTED" or (
        payload.get("code") == "STALE_CAPABILITY" and details.get("reason") == "registration-replaced"
    )
    replacement = details.get("liveRegistrationId")
    if isinstance(replacement, str) and replacement != rid and (listed is None or live(replacement)):
        t["registrationId"] = replacement
    elif listed is None and not about_target:
        # Not listed, and the error was not about it: nothing says it is gone.
        pass
    elif not live(rid):
        found = [r for i, r in (listed or []) if i == iid]
        if not found:
            return None
        t["registrationId"] = found[0]
    return t


@dataclass
class Outcome:
    """One call's result: the value on success, else the error payload."""

    ok: bool
    value: Any = None
    payload: dict[str, Any] | None = None


class Transport(Protocol):
    async def call(self, name: str, args: dict[str, Any], meta: dict[str, Any]) -> Outcome: ...

    async def list(self) -> Listing: ...


@dataclass(frozen=True)
class ConfirmationPrompt:
    """A confirmation to put before a person (never the model)."""

    tool: str
    args: dict[str, Any]
    confirmation_id: str
    summary: str
    expires_at: str
    effect: str
    approval_url: str | None = None
    """The page where a person approves it (`details.approvalUrl`), when the service serves one."""


class Host:
    """The person and the state behind the client. The defaults hand decisions to the model: no
    one to approve in-process (two-phase), and an unknown outcome is never repeated."""

    async def confirm(self, prompt: ConfirmationPrompt) -> str:
        """`"approved"`, `"denied"` or `"unavailable"` (hand the confirmation to the model)."""
        return "unavailable"

    async def verify(self, tool: str, args: dict[str, Any], payload: dict[str, Any]) -> str:
        """Whether a call that may have run took effect: `"not-applied"`, `"applied"` or
        `"unknown"`."""
        return "unknown"


@dataclass
class Recovery:
    """How one intent ended."""

    stop: str
    """`succeeded`, `returned-to-caller`, `not-converging`, `budget-exhausted`, `delay-too-long`,
    `denied`, `unverified`, `verified-applied`."""
    attempts: int
    value: Any = None
    payload: dict[str, Any] | None = None
    refreshed: bool = False
    action: str | None = None
    """The action of the last error's row (what the model is asked to do for `change-input`)."""
    calls: list[tuple[str, str]] = field(default_factory=list)
    """Each request sent: (invocation id, code or `OK`)."""


def _number(value: float) -> str:
    """ECMAScript's `Number.prototype.toString` of a finite float, as RFC 8785 writes numbers."""
    if value == 0:
        return "0"
    sign = "-" if value < 0 else ""
    # The shortest digits that round-trip (`repr`), and n: where the decimal point goes.
    exact = Decimal(repr(abs(value))).normalize().as_tuple()
    digits = "".join(map(str, exact.digits))
    k = len(digits)
    n = int(exact.exponent) + k
    if k <= n <= 21:
        return sign + digits + "0" * (n - k)
    if 0 < n <= 21:
        return sign + digits[:n] + "." + digits[n:]
    if -6 < n <= 0:
        return sign + "0." + "0" * -n + digits
    e = n - 1
    head = digits[0] + ("." + digits[1:] if k > 1 else "")
    return f"{sign}{head}e{'+' if e > 0 else '-'}{abs(e)}"


def canonical_json(value: Any) -> str:
    """RFC 8785 canonical JSON, as the Rust helpers write it (`agent_surface_core::json`): keys
    sorted by UTF-16 code units, no whitespace, integers exact, other numbers as ECMAScript writes
    them, strings escaped only where JSON requires."""
    if isinstance(value, bool) or value is None:
        return json.dumps(value)
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if value != value or value in (float("inf"), float("-inf")):
            raise ValueError("JSON has no NaN or infinity")
        return _number(value)
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)
    if isinstance(value, Mapping):
        keys = sorted(value, key=lambda k: str(k).encode("utf-16-be"))
        return "{" + ",".join(f"{canonical_json(str(k))}:{canonical_json(value[k])}" for k in keys) + "}"
    if isinstance(value, (list, tuple)):
        return "[" + ",".join(canonical_json(v) for v in value) + "]"
    raise TypeError(f"not JSON: {type(value).__name__}")


_canonical = canonical_json


def conflict_id(
    invocation_id: str, tool: str, args: dict[str, Any], confirmation_id: str | None, target: Any = None
) -> str:
    """The id to retry under after `INVOCATION_CONFLICT`: derived from the conflicting id and the
    request (the tool, the canonical arguments, the canonical `_meta` target — empty without one —
    and the confirmation id), so another request gets another id and a repeat of this one the
    same. The same derivation as the Rust `RecoveringClient`, byte for byte."""
    digest = hashlib.sha256()
    for part in (tool, canonical_json(args), "" if target is None else canonical_json(target), confirmation_id or ""):
        data = part.encode("utf-8")
        digest.update(len(data).to_bytes(8, "big"))
        digest.update(data)
    return f"{invocation_id}#c{digest.hexdigest()[:16]}"


def _failure(payload: dict[str, Any], tool: str, meta: dict[str, Any]) -> tuple[Any, ...]:
    details = payload.get("details") if isinstance(payload.get("details"), Mapping) else {}
    reason = details.get("reason", details.get("phase"))
    # The surface tokens sent: the same failure under newer tokens is progress.
    surface = (meta.get(SURFACE_ID), meta.get(SURFACE_VERSION), meta.get(TOOL_VERSION))
    return (payload.get("code"), reason, tool, _canonical(meta.get(TARGET)), surface)


class Recoverer:
    """Runs intents against a transport, acting on the decision table."""

    def __init__(
        self,
        transport: Transport,
        host: Host | None = None,
        bounds: Bounds = BOUNDS,
        sleep: Callable[[float], Awaitable[Any]] = asyncio.sleep,
    ) -> None:
        self.transport = transport
        self.host = host or Host()
        self.bounds = bounds
        self.sleep = sleep

    async def run(
        self,
        tool: str,
        args: dict[str, Any],
        *,
        invocation_id: str,
        planned: Listing | None = None,
        meta: Mapping[str, Any] | None = None,
    ) -> Recovery:
        """Sends `tool(args)` under `invocation_id`, planned on the `planned` listing (its surface
        tokens go with the call), and recovers as the table says. Never raises for an error
        result; a transport failure propagates."""
        request_meta: dict[str, Any] = dict(meta or {})
        request_meta[INVOCATION_ID] = invocation_id
        if planned is not None and planned.surface_id is not None:
            request_meta[SURFACE_ID] = planned.surface_id
        if planned is not None and planned.surface_version is not None:
            request_meta[SURFACE_VERSION] = planned.surface_version
        if planned is not None and planned.tool_version(tool) is not None:
            request_meta[TOOL_VERSION] = planned.tool_version(tool)
        base_id = invocation_id
        attempts = 0
        waited_ms = 0
        refreshed = False
        last_failure: tuple[Any, ...] | None = None
        # Whether a `retry-once` row (a not-processed failure) was already followed.
        retried_once = False
        prompted: set[str] = set()
        calls: list[tuple[str, str]] = []

        def end(stop: str, outcome: Outcome, row: Decision | None = None) -> Recovery:
            return Recovery(
                stop=stop,
                attempts=attempts,
                value=outcome.value,
                payload=outcome.payload,
                refreshed=refreshed,
                action=row.action if row else None,
                calls=calls,
            )

        while True:
            attempts += 1
            outcome = await self.transport.call(tool, args, dict(request_meta))
            calls.append((request_meta[INVOCATION_ID], "OK" if outcome.ok else str((outcome.payload or {}).get("code"))))
            if outcome.ok:
                return end("succeeded", outcome)
            payload = outcome.payload or {}
            row = decide(payload)
            if row is None or row.action in ("stop", "change-input"):
                return end("returned-to-caller", outcome, row)
            if row.action == "refresh-then-ask":
                # The tool's definition changed: re-listed (`refreshed`: the caller shows the model
                # the new definition), never sent again with the same arguments on its own.
                # A failed re-listing does not replace the answer: `refreshed` says which it was.
                try:
                    await self.transport.list()
                    refreshed = True
                except Exception:  # noqa: BLE001 - any failure of the courtesy re-listing
                    refreshed = False
                return end("returned-to-caller", outcome, row)
            # The convergence guard: the last attempt already followed this failure's row. A wait
            # is not held to it: the limit may lift after the next delay, and the bounds on the
            # delays and the attempts end the waiting.
            failure = _failure(payload, tool, request_meta)
            if row.action != "wait" and failure == last_failure:
                return end("not-converging", outcome, row)
            last_failure = failure
            if attempts >= self.bounds.max_attempts:
                return end("budget-exhausted", outcome, row)
            # Only an unknown outcome (a call with an effect, interrupted) is verified first.
            if row.action == "verify":
                found = await self.host.verify(tool, args, payload)
                if found == "applied":
                    return end("verified-applied", outcome, row)
                if found != "not-applied":
                    return end("unverified", outcome, row)
            fresh = row.invocation_id == "fresh"
            details = payload.get("details") if isinstance(payload.get("details"), Mapping) else {}
            if row.action == "new-id":
                base_id = conflict_id(
                    request_meta[INVOCATION_ID], tool, args, request_meta.get(CONFIRMATION_ID), request_meta.get(TARGET)
                )
                request_meta[INVOCATION_ID] = base_id
                fresh = False
            elif row.action == "wait":
                delay = details.get(row.wait_field) if row.wait_field else None
                # A delay that is no count of milliseconds (negative, fractional, not a number)
                # is absent, as for the Rust helpers: the default wait.
                usable = isinstance(delay, int) and not isinstance(delay, bool) and delay >= 0
                delay_ms = delay if usable else self.bounds.default_delay_ms
                if delay_ms > self.bounds.max_delay_ms or waited_ms + delay_ms > self.bounds.max_total_delay_ms:
                    return end("delay-too-long", outcome, row)
                await self.sleep(delay_ms / 1000)
                waited_ms += delay_ms
            elif row.action == "refresh":
                try:
                    listing = await self.transport.list()
                except Exception:  # noqa: BLE001 - a failed re-listing does not replace the answer
                    return end("returned-to-caller", outcome, row)
                refreshed = True
                # Still listed and enabled, and what the call names still there.
                if not listing.enabled(tool) or not listing.instance_listed(tool, args.get(TARGET_ARGUMENT)):
                    return end("returned-to-caller", outcome, row)
                # The tool's definition changed since the call was planned: the arguments were
                # built for the old one and may mean something else now. As after
                # `tool-version-mismatch`, the model reads the new definition first.
                if TOOL_VERSION in request_meta and listing.tool_version(tool) != request_meta[TOOL_VERSION]:
                    return end("returned-to-caller", outcome, row)
                target = request_meta.get(TARGET)
                if target is not None:
                    new_target = retarget(target, payload, listing, tool)
                    if new_target is None:
                        return end("returned-to-caller", outcome, row)
                    request_meta[TARGET] = new_target
                # Retried whether or not the listing changed, as the row says: a `binding-failed`
                # precondition moves with state no listing shows, and the same failure again ends
                # the loop (the convergence guard).
                # Tokens are updated, never dropped (the tool version is the re-listed one
                # already: a different one returned above).
                if SURFACE_ID in request_meta and listing.surface_id is not None:
                    request_meta[SURFACE_ID] = listing.surface_id
                if SURFACE_VERSION in request_meta and listing.surface_version is not None:
                    request_meta[SURFACE_VERSION] = listing.surface_version
            elif row.action == "reconfirm":
                request_meta.pop(CONFIRMATION_ID, None)
            elif row.action == "confirm":
                confirmation_id = details.get("confirmationId")
                if not isinstance(confirmation_id, str) or confirmation_id in prompted:
                    return end("returned-to-caller", outcome, row)
                prompted.add(confirmation_id)
                prompt = ConfirmationPrompt(
                    tool=tool,
                    args=args,
                    confirmation_id=confirmation_id,
                    summary=str(details.get("summary", "")),
                    expires_at=str(details.get("expiresAt", "")),
                    effect=str(details.get("effect", "")),
                    approval_url=details.get("approvalUrl") if isinstance(details.get("approvalUrl"), str) else None,
                )
                answer = await self.host.confirm(prompt)
                if answer == "denied":
                    # The model is told the decision, not the request for approval it answered.
                    return end("denied", Outcome(ok=False, payload=copy.deepcopy(DENIED)), row)
                if answer != "approved":
                    return end("returned-to-caller", outcome, row)
                request_meta[CONFIRMATION_ID] = confirmation_id
            elif row.action == "retry-once":
                # Nothing ran: one repeat, and only one, whatever the next failure says.
                if retried_once:
                    return end("not-converging", outcome, row)
                retried_once = True
            elif row.action not in ("retry", "verify"):
                # A row this version does not know: the model decides.
                return end("returned-to-caller", outcome, row)
            if fresh:
                request_meta[INVOCATION_ID] = f"{base_id}#r{attempts + 1}"
