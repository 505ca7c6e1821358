"""The Python helper's loop (`agent_surface.loop.Recoverer`) on the rows the demo cannot produce
on demand: a scripted transport answers each request with the next result of a script.

usage: python recovery_loop.py

Covers the table rows the twelve Pydantic AI tasks do not reach: an unknown outcome (verified or
not), a conflicting id, an expired confirmation, a delay beyond the bounds, the convergence guard
and the attempt budget; after a re-listing, a tool still disabled, an instance no longer listed, a
replaced registration retargeted. Issue 28: the one rule for interrupted calls (a read that times
out, is cancelled or is unmounted mid-flight is repeated as its row says, the host never asked,
whatever the tool declares; only an unknown outcome is verified); the driver's defects: an
instance named through `_instance` that is gone is not called again, a second stale surface under
newer tokens is followed, a failed binding is retried once whatever the listing, the conflict id
covers the `_meta` target (the Rust helper's pinned test vector). Issue 27: a not-processed
`EXECUTION_FAILED` is repeated once, a processed one never. Closes with "N passed, M failed".
"""

import asyncio

from agent_surface import DECISIONS, Host, Listing, Outcome, Recoverer, decide
from agent_surface.loop import CONFIRMATION_ID, INVOCATION_ID, TARGET, conflict_id

from checks import check, finish


def err(code, retry, **details):
    payload = {"code": code, "message": "m", "retry": retry}
    if details:
        payload["details"] = details
    return Outcome(ok=False, payload=payload)


OK = Outcome(ok=True, value={"done": True})


class Script:
    def __init__(self, *results, listing=None, listings=None):
        self.results = list(results)
        self.sent = []
        self.listing = listing or Listing(tools={"t": {"name": "t"}}, surface_id="s", surface_version=1)
        # Successive re-listings (the surface moving), then `listing` for good.
        self.listings = list(listings or [])
        self.listed = 0

    async def call(self, name, args, meta):
        self.sent.append(dict(meta))
        return self.results.pop(0)

    async def list(self):
        self.listed += 1
        return self.listings.pop(0) if self.listings else self.listing


class Verifier(Host):
    def __init__(self, answer):
        self.answer = answer
        self.asked = 0

    async def verify(self, tool, args, payload):
        self.asked += 1
        return self.answer


async def no_wait(seconds):
    waits.append(seconds)


waits = []


async def run(script, host=None, meta=None):
    return await Recoverer(script, host, sleep=no_wait).run("t", {"a": 1}, invocation_id="i", meta=meta)


async def main():
    # Every code has a row, the default last.
    codes = {d.code for d in DECISIONS}
    check("the table has a row for each of the 16 codes", len(codes) == 16, repr(sorted(codes)))
    check("an unknown code has no row", decide({"code": "NOPE", "retry": "no"}) is None)

    s = Script(err("EXECUTION_FAILED", "no", reason="outcome-unknown"))
    r = await run(s, Verifier("unknown"))
    check("an unknown outcome stops unverified when no one can tell", (r.stop, r.attempts) == ("unverified", 1), repr(r))
    s = Script(err("EXECUTION_FAILED", "no", reason="outcome-unknown"), OK)
    r = await run(s, Verifier("not-applied"))
    check("an unknown outcome verified as not applied is repeated under a fresh id",
          (r.stop, [m[INVOCATION_ID] for m in s.sent]) == ("succeeded", ["i", "i#r2"]), repr(s.sent))
    s = Script(err("EXECUTION_FAILED", "no", reason="outcome-unknown"))
    r = await run(s, Verifier("applied"))
    check("an outcome verified as applied is never repeated", (r.stop, r.attempts) == ("verified-applied", 1), repr(r))
    s = Script(err("TIMEOUT", "yes", timeoutMs=5, idempotent=True), OK)
    r = await run(s)
    check("an idempotent TIMEOUT is retried under a fresh id", (r.stop, s.sent[1][INVOCATION_ID]) == ("succeeded", "i#r2"))

    # Issue 27: "not processed", stated by the runtime. A failure of a non-idempotent call that
    # the runtime says stopped before the handler is repeated once; a processed one never.
    def not_processed(outcome):
        outcome.payload["notProcessed"] = True
        return outcome
    s = Script(not_processed(err("EXECUTION_FAILED", "no", reason="handler-error")), OK)
    r = await run(s)
    check("a not-processed EXECUTION_FAILED is repeated once under a fresh id",
          (r.stop, [m[INVOCATION_ID] for m in s.sent]) == ("succeeded", ["i", "i#r2"]), repr(s.sent))
    s = Script(not_processed(err("EXECUTION_FAILED", "no", reason="handler-error")),
               not_processed(err("EXECUTION_FAILED", "no", reason="output-invalid")), OK)
    r = await run(s)
    check("  and only once, whatever the second failure", (r.stop, r.attempts) == ("not-converging", 2), repr(r))
    s = Script(err("EXECUTION_FAILED", "no", reason="handler-error"), OK)
    r = await run(s)
    check("a processed EXECUTION_FAILED is never repeated", (r.stop, r.attempts) == ("returned-to-caller", 1), repr(r))

    s = Script(err("INVOCATION_CONFLICT", "with-changes", reason="input-mismatch"), OK)
    r = await run(s)
    second = s.sent[1][INVOCATION_ID]
    check("a conflicting id becomes one derived from the request", r.stop == "succeeded" and second.startswith("i#c"), second)
    s2 = Script(err("INVOCATION_CONFLICT", "with-changes", reason="input-mismatch"), OK)
    await run(s2)
    check("  the same request derives the same id (a repeat replays)", s2.sent[1][INVOCATION_ID] == second)

    s = Script(err("CONFIRMATION_INVALID", "with-confirmation", reason="expired"), OK)
    r = await run(s, meta={CONFIRMATION_ID: "c-old"})
    check("an expired confirmation restarts the cycle without the stale id",
          r.stop == "succeeded" and CONFIRMATION_ID not in s.sent[1], repr(s.sent))

    waits.clear()
    s = Script(err("RATE_LIMITED", "after-delay", reason="rate", retryAfterMs=120_000))
    r = await run(s)
    check("a delay beyond the bounds is not waited", (r.stop, waits) == ("delay-too-long", []), repr((r, waits)))
    s = Script(err("EXECUTION_FAILED", "after-delay", reason="transport", transient=True), OK)
    r = await run(s)
    check("a transient failure without a delay waits the default second", (r.stop, waits) == ("succeeded", [1.0]), repr(waits))
    def limited(ms):
        return err("RATE_LIMITED", "after-delay", reason="rate", retryAfterMs=ms)
    waits.clear()
    r = await run(Script(limited(2000), limited(2000), OK))
    check("a limit met again after its wait is waited for again (not the convergence guard)",
          (r.stop, r.attempts, waits) == ("succeeded", 3, [2.0, 2.0]), repr((r, waits)))
    waits.clear()
    r = await run(Script(limited(-5000), OK))
    check("  a negative delay is no delay: the default wait", (r.stop, waits) == ("succeeded", [1.0]), repr((r, waits)))
    r = await run(Script(*[limited(10) for _ in range(4)]))
    check("  until the attempt budget", (r.stop, r.attempts) == ("budget-exhausted", 4), repr(r))
    waits.clear()
    r = await run(Script(*[limited(25_000) for _ in range(3)]))
    check("  or the bound on the delays in all", (r.stop, r.attempts, waits) == ("delay-too-long", 3, [25.0, 25.0]),
          repr((r, waits)))

    s = Script(err("CANCELLED", "yes"), err("CANCELLED", "yes"))
    r = await run(s)
    check("the same failure after its action ends the loop", (r.stop, r.attempts) == ("not-converging", 2), repr(r))
    s = Script(err("CANCELLED", "yes"), err("TIMEOUT", "yes", timeoutMs=1, idempotent=True), err("CANCELLED", "yes"),
               err("TIMEOUT", "yes", timeoutMs=1, idempotent=True))
    r = await run(s)
    check("the attempt budget bounds alternating failures", (r.stop, r.attempts) == ("budget-exhausted", 4), repr(r))

    s = Script(err("STALE_CAPABILITY", "after-refresh", reason="surface-reloaded"), OK,
               listing=Listing(tools={"t": {"name": "t"}}, surface_id="s2", surface_version=7))
    r = await Recoverer(s, sleep=no_wait).run("t", {}, invocation_id="i",
                                              planned=Listing(tools={"t": {"name": "t"}}, surface_id="s", surface_version=1))
    check("a stale surface is re-listed and the tokens updated",
          r.stop == "succeeded" and (s.sent[1]["agent-surface/surfaceId"], s.sent[1]["agent-surface/surfaceVersion"]) == ("s2", 7),
          repr(s.sent))

    # Refresh: the tool must still be enabled, the named instance listed; a replaced
    # registration is retargeted.
    planned = Listing(tools={"t": {"name": "t"}}, surface_id="s", surface_version=1)
    disabled = Listing(tools={"t": {"name": "t", "_meta": {"agent-surface/unavailableReason": "Maintenance."}}},
                       surface_id="s", surface_version=2)
    s = Script(err("CAPABILITY_NOT_AVAILABLE", "after-refresh"), OK, listing=disabled)
    r = await Recoverer(s, sleep=no_wait).run("t", {}, invocation_id="i", planned=planned)
    check("a tool still disabled after the re-listing is not called again", (r.stop, r.attempts) == ("returned-to-caller", 1), repr(r))
    board = {"name": "t", "_meta": {"agent-surface/instances": [
        {"instanceId": "a", "registrationId": "r-a2"}, {"instanceId": "b", "registrationId": "r-b"}]}}
    relisted = Listing(tools={"t": board}, surface_id="s", surface_version=2)
    s = Script(err("STALE_CAPABILITY", "after-refresh", reason="registration-replaced", liveRegistrationId="r-a2"), OK,
               listing=relisted)
    r = await Recoverer(s, sleep=no_wait).run("t", {}, invocation_id="i", planned=planned,
                                              meta={TARGET: {"registrationId": "r-a1"}})
    check("a replaced registration is retargeted to liveRegistrationId",
          r.stop == "succeeded" and s.sent[1][TARGET] == {"registrationId": "r-a2"}, repr(s.sent))
    for how, args, meta in (("the target", {}, {TARGET: {"instanceId": "c"}}), ("the _instance argument", {"_instance": "c"}, {})):
        s = Script(err("COMPONENT_UNMOUNTED", "after-refresh", phase="resolve"), OK, listing=relisted)
        r = await Recoverer(s, sleep=no_wait).run("t", args, invocation_id="i", planned=planned, meta=meta)
        check(f"an instance no longer listed ({how}) is not called again", (r.stop, r.attempts) == ("returned-to-caller", 1), repr(r))

    # Issue 28, the one rule for interrupted calls: only a read or an idempotent call gets TIMEOUT,
    # CANCELLED or a mid-flight unmount once its handler started, so each is repeated as its row
    # says, under a fresh id, and the host is never asked (it could only answer "unknown" here),
    # whatever the tool declares; only an unknown outcome is verified (above).
    read_only = Listing(tools={"t": {"name": "t", "annotations": {"readOnlyHint": True},
                                     "_meta": {"agent-surface/idempotent": False}}})
    for what, first in (("times out", err("TIMEOUT", "yes", timeoutMs=5, idempotent=False)),
                        ("is cancelled", err("CANCELLED", "yes")),
                        ("is unmounted mid-flight", err("COMPONENT_UNMOUNTED", "after-refresh", phase="mid-flight"))):
        s = Script(first, OK, listing=read_only)
        v = Verifier("unknown")
        r = await run(s, v)
        check(f"a read not declared idempotent that {what} is repeated under a fresh id, the host not asked",
              (r.stop, v.asked, [m[INVOCATION_ID] for m in s.sent]) == ("succeeded", 0, ["i", "i#r2"]), repr((r, v.asked)))
    check("only the unknown outcome's row verifies",
          [(d.code, d.when) for d in DECISIONS if d.action == "verify"] == [("EXECUTION_FAILED", ("reason", "outcome-unknown"))])


    # Issue 28. A second STALE_CAPABILITY under the newer tokens of the re-listing is progress.
    t = {"t": {"name": "t"}}
    stale = err("STALE_CAPABILITY", "after-refresh", reason="surface-version-mismatch")
    s = Script(stale, stale, OK, listings=[Listing(tools=t, surface_id="s", surface_version=2),
                                           Listing(tools=t, surface_id="s", surface_version=3)])
    r = await Recoverer(s, sleep=no_wait).run("t", {}, invocation_id="i",
                                              planned=Listing(tools=t, surface_id="s", surface_version=1))
    check("a surface that moves again after the re-listing is followed (newer tokens are progress)",
          (r.stop, [m["agent-surface/surfaceVersion"] for m in s.sent]) == ("succeeded", [1, 2, 3]), repr((r, s.sent)))
    s = Script(stale, stale, stale)
    r = await Recoverer(s, sleep=no_wait).run("t", {}, invocation_id="i",
                                              planned=Listing(tools=t, surface_id="s", surface_version=0))
    check("  stale again under the same tokens ends the loop",
          (r.stop, [m["agent-surface/surfaceVersion"] for m in s.sent]) == ("not-converging", [0, 1, 1]), repr((r, s.sent)))

    # Issue 27. The tool's listed version goes with the call; a changed definition is refused with
    # the live version, re-listed and handed back (refresh-then-ask): the model reads the new
    # definition before the tool is called again, never the same arguments sent on their own.
    def tool(version):
        return {"t": {"name": "t", "_meta": {"agent-surface/toolVersion": version}}}
    changed = err("STALE_CAPABILITY", "after-refresh", reason="tool-version-mismatch", liveToolVersion="v2")
    check("a changed tool definition is refresh-then-ask in the table", decide(changed.payload).action == "refresh-then-ask")
    s = Script(changed, OK, listing=Listing(tools=tool("v2")))
    r = await Recoverer(s, sleep=no_wait).run("t", {}, invocation_id="i", planned=Listing(tools=tool("v1")))
    check("a call planned on a changed tool definition is re-listed and returned, not sent again",
          (r.stop, r.refreshed, r.action, [m.get("agent-surface/toolVersion") for m in s.sent], s.listed)
          == ("returned-to-caller", True, "refresh-then-ask", ["v1"], 1), repr((r, s.sent)))

    # binding-failed is retried once after the re-listing, whether or not the listing changed.
    unchanged = Listing(tools=t, surface_id="s", surface_version=1)
    binding = err("PRECONDITION_FAILED", "after-refresh", reason="binding-failed")
    check("binding-failed is after-refresh, refresh in the table",
          (decide(binding.payload).action, decide(binding.payload).stop) == ("refresh", "not-converging"))
    s = Script(binding, OK, listing=unchanged)
    r = await Recoverer(s, sleep=no_wait).run("t", {}, invocation_id="i", planned=unchanged)
    check("a failed binding is retried once under a fresh id though the listing did not change",
          (r.stop, [m[INVOCATION_ID] for m in s.sent]) == ("succeeded", ["i", "i#r2"]), repr((r, s.sent)))
    s = Script(binding, binding, listing=unchanged)
    r = await Recoverer(s, sleep=no_wait).run("t", {}, invocation_id="i", planned=unchanged)
    check("  the same failed binding again ends the loop", (r.stop, r.attempts) == ("not-converging", 2), repr(r))

    class Unlisted(Script):
        async def list(self):
            raise ConnectionError("the server went away")

    s = Unlisted(binding, OK, listing=unchanged)
    r = await Recoverer(s, sleep=no_wait).run("t", {}, invocation_id="i", planned=unchanged)
    check("a re-listing that fails hands back the error, not an exception",
          (r.stop, r.attempts, r.refreshed, (r.payload or {}).get("code")) == ("returned-to-caller", 1, False, "PRECONDITION_FAILED"),
          repr(r))

    # The conflict id: the Rust helper's pinned vector (agent-surface-client, lib.rs), byte for byte.
    args = {"zip": "10115", "n": 2.50, "b": [True, None], "\u20ac": "x"}
    target = {"instanceId": "cart-bob"}
    ids = [conflict_id("i-1", "shipping-quote", args, None), conflict_id("i-1", "shipping-quote", args, None, target),
           conflict_id("i-1", "shipping-quote", args, "c-1", target)]
    check("the conflict id is the Rust helper's (its pinned test vector)",
          ids == ["i-1#c8d329d79907829d8", "i-1#cc0a7be0dcedf7e98", "i-1#c9cacb8ec606c0d8f"], repr(ids))
    derived = []
    for instance in ("a", "b"):
        s = Script(err("INVOCATION_CONFLICT", "with-changes", reason="input-mismatch"), OK)
        await run(s, meta={TARGET: {"instanceId": instance}})
        derived.append(s.sent[1][INVOCATION_ID])
    check("two intents that differ only in their _meta target derive two ids", derived[0] != derived[1], repr(derived))

    # The Pydantic AI helper plans each run's calls on the listing that run's model was shown:
    # concurrent runs of one toolset do not move each other's tokens, and old runs are let go.
    from agent_surface.pydantic_ai import _State

    state, v1, v2 = _State(), Listing(tools=t, surface_id="s", surface_version=1), Listing(tools=t, surface_id="s", surface_version=2)
    state.shown("run-1", v1)
    state.shown("run-2", v2)
    check("pydantic-ai: each run plans on the listing its model was shown",
          (state.listings.get("run-1"), state.listings.get("run-2")) == (v1, v2), repr(state.listings))
    for n in range(_State.MAX_RUNS + 10):
        state.shown(f"r-{n}", v1)
    check("  the listings of the latest runs only are kept",
          len(state.listings) == _State.MAX_RUNS and "run-1" not in state.listings, len(state.listings))


asyncio.run(main())
finish()
