"""A real HTTP client (httpx2, installed with the Python MCP SDK) against the plain HTTP binding
of `agent-surface-demo serve --http 127.0.0.1:0`, mounted under `/api`.

usage: python http_client.py DEMO_BINARY CASES_JSON ERROR_MATRIX_JSON

Runs the MCP clients' cases (cases.json; those marked MCP-only are skipped) as
`POST /api/invoke` requests and checks what any HTTP consumer relies on: the status the error
matrix gives the code, `application/problem+json` with `type: urn:agent-surface:error:{CODE}`,
the payload members exactly as expected (the message as a case's `httpMessage` where HTTP words
it otherwise than MCP, and the details with a case's `httpDetails` added: the server signs people
in with tokens, so it serves the approval inbox and a confirmation carries its `approvalUrl`),
`Retry-After` exactly for `after-delay`,
`WWW-Authenticate` on 401, success bodies, an `Idempotency-Key` replay, a client that hangs up
(the call is cancelled and the key then answers `CANCELLED`), and the protocol faults that never
reach the pipeline (no `code` member). The Python SDK's own streamable HTTP client then opens a
session on the same server's `/mcp`, lists the tools and leaves; the SDK must log no failed
termination of the session.

Then, against a second server with `--conformance` (its fixtures report progress and run long):
progress as Server-Sent Events (`Accept: text/event-stream`: the progress events in order, then
one `result` event with the answer's envelope); a long-running call answered `202 Accepted` with
`Prefer: respond-async`, polled at its `Location` until completed, unreadable by another person,
and one cancelled with `DELETE`; and `GET /api/openapi.json`, validated by openapi-spec-validator
(OpenAPI 3.1), with every local `$ref` resolved and every capability of `GET /api/capabilities`
in it.

Prints one line per check and closes with "N passed, M failed"; exits non-zero on any failure.
"""

import json
import math
import re
import subprocess
import sys
import time

import httpx2 as httpx
from openapi_spec_validator import validate as validate_openapi

from checks import check, finish, matches

# The problem members the binding adds around the payload (RFC 9457 and the invocation id).
PROBLEM_MEMBERS = {"type", "title", "status", "detail", "instance", "invocationId"}


def expected_status(matrix, payload):
    rule = matrix[payload["code"]]["httpStatus"]
    details = payload.get("details") or {}
    for when in rule["when"]:
        if details.get(when["field"]) == when["equals"]:
            return when["then"]
    return rule["default"]


def request_body(case, surface):
    """The invoke request for a case: the tool name's first `-` is the capability's `.`."""
    body = {"capability": case["tool"].replace("-", ".", 1), "input": case.get("arguments", {})}
    meta = case.get("meta") or {}
    for key, member in (
        ("agent-surface/target", "target"),
        ("agent-surface/confirmationId", "confirmationId"),
    ):
        if key in meta:
            body[member] = meta[key]
    if "agent-surface/surfaceId" in meta:
        sid = meta["agent-surface/surfaceId"]
        version = meta["agent-surface/surfaceVersion"]
        body["surfaceId"] = surface["surfaceId"] if sid == "$surfaceId" else sid
        body["surfaceVersion"] = surface["version"] if version == "$firstVersion" else version
    return body


def headers_for(case, session):
    headers = {}
    key = (case.get("meta") or {}).get("agent-surface/invocationId")
    if key:
        headers["Idempotency-Key"] = key
    if session == "alice":
        headers["Authorization"] = "Bearer t-alice"
    return headers


def check_error(label, response, expected, matrix):
    content_type = response.headers.get("content-type", "")
    check(f"{label} → application/problem+json", content_type.startswith("application/problem+json"), content_type)
    try:
        problem = response.json()
    except ValueError:
        check(f"{label} → a JSON body", False, response.text[:200])
        return None
    payload = {k: v for k, v in problem.items() if k not in PROBLEM_MEMBERS}
    code = payload.get("code")
    check(f"{label} → payload {expected['code']}", matches(expected, payload), json.dumps(payload))
    check(
        f"{label} → type urn:agent-surface:error:{expected['code']}",
        problem.get("type") == f"urn:agent-surface:error:{expected['code']}",
        str(problem.get("type")),
    )
    if code in matrix:
        want = expected_status(matrix, payload)
        check(f"{label} → status {want}", response.status_code == want and problem.get("status") == want,
              f"{response.status_code} / {problem.get('status')}")
    retry_after = response.headers.get("retry-after")
    if payload.get("retry") == "after-delay":
        ms = (payload.get("details") or {}).get("retryAfterMs")
        want = str(max(1, math.ceil(ms / 1000))) if isinstance(ms, int) else None
        check(f"{label} → Retry-After {want}", retry_after == want, str(retry_after))
    else:
        check(f"{label} → no Retry-After", retry_after is None, str(retry_after))
    if response.status_code == 401:
        check(f"{label} → WWW-Authenticate", "www-authenticate" in response.headers)
    correlation = response.headers.get("agent-surface-correlation-id", "")
    check(f"{label} → Agent-Surface-Correlation-Id", len(correlation) > 0, str(correlation))
    return payload


def check_fault(label, response, status, kind):
    content_type = response.headers.get("content-type", "")
    try:
        problem = response.json()
    except ValueError:
        problem = {}
    check(
        f"protocol fault: {label} → {status} urn:agent-surface:protocol:{kind}, no code",
        response.status_code == status
        and content_type.startswith("application/problem+json")
        and problem.get("type") == f"urn:agent-surface:protocol:{kind}"
        and "code" not in problem,
        f"{response.status_code} {content_type} {response.text[:300]}",
    )
    return problem


def start_server(demo, *extra):
    server = subprocess.Popen(
        [demo, "serve", "--http", "127.0.0.1:0", "--memory", "--token", "t-alice=alice", *extra],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    line = server.stdout.readline().strip()
    match = re.match(r"listening on http://([^/]+)/mcp$", line)
    if not match:
        server.kill()
        raise RuntimeError(f"unexpected first line from the server: {line!r}")
    return server, f"http://{match.group(1)}"


def run_cases(client, cases, matrix, surface):
    for case in cases:
        if "mcp" == case.get("only"):
            continue
        session = case["session"]
        label = f"[{session}] {case['tool']}: {case['name']}"
        if case.get("sleepBeforeMs"):
            time.sleep(case["sleepBeforeMs"] / 1000)
        body = request_body(case, surface)
        headers = headers_for(case, session)
        if case.get("cancelAfterMs"):
            # The client gives up and closes its connection; the server cancels the call.
            try:
                client.post("/api/invoke", json=body, headers=headers, timeout=case["cancelAfterMs"] / 1000)
                check(f"{label} (the client hung up)", False, "the call answered before the client gave up")
            except httpx.TimeoutException:
                check(f"{label} (the client hung up)", True)
            time.sleep(0.05)
        try:
            response = client.post("/api/invoke", json=body, headers=headers)
        except httpx.HTTPError as e:
            check(label, False, f"{type(e).__name__}: {e}")
            continue
        if "error" in case:
            # HTTP carries the message as built; `message` is the wording for a model over MCP.
            expected = case["error"] if "httpMessage" not in case else {**case["error"], "message": case["httpMessage"]}
            if "httpDetails" in case:
                expected = {**expected, "details": {**expected.get("details", {}), **case["httpDetails"]}}
            check_error(label, response, expected, matrix)
        else:
            ok = response.status_code == 200 and response.headers.get("content-type", "").startswith(
                "application/json"
            )
            check(f"{label} → 200 application/json", ok, f"{response.status_code} {response.text[:300]}")
            answer = response.json() if ok else {}
            check(f"{label} → output", answer.get("status") == "ok" and matches(case["ok"], answer.get("output")),
                  json.dumps(answer))
            if "Idempotency-Key" in headers:
                again = client.post("/api/invoke", json=body, headers=headers)
                check(f"{label} → the same Idempotency-Key replays the answer byte for byte",
                      again.status_code == 200 and again.content == response.content, again.text[:300])


def protocol_faults(client):
    call = {"capability": "orders.list", "input": {}}
    check_fault("malformed JSON", client.post("/api/invoke", content=b'{"capability": "orders.list",',
                                              headers={"Content-Type": "application/json"}), 400, "malformed-json")
    check_fault("text/plain body", client.post("/api/invoke", content=json.dumps(call).encode(),
                                               headers={"Content-Type": "text/plain"}), 415, "unsupported-media-type")
    big = json.dumps({"capability": "orders.list", "input": {"pad": "x" * (1024 * 1024 + 1)}}).encode()
    check_fault("a body over the limit", client.post("/api/invoke", content=big,
                                                     headers={"Content-Type": "application/json"}), 413, "body-too-large")

    def chunks():
        yield b'{"capability": "orders.list", "input": {"pad": "'
        for _ in range(1100):
            yield b"y" * 1024
        yield b'"}}'

    check_fault("a chunked body over the limit", client.post("/api/invoke", content=chunks(),
                                                             headers={"Content-Type": "application/json"}),
                413, "body-too-large")
    check_fault("an unknown route", client.get("/api/nothing"), 404, "not-found")
    response = client.get("/api/invoke")
    check_fault("GET on the invoke route", response, 405, "method-not-allowed")
    check("protocol fault: 405 names the allowed method", response.headers.get("allow") == "POST",
          str(response.headers.get("allow")))
    check_fault("an Idempotency-Key that differs from the body's invocationId",
                client.post("/api/invoke", json={**call, "invocationId": "a"}, headers={"Idempotency-Key": "b"}),
                400, "invocation-id-mismatch")
    check_fault("a Host that is not loopback",
                client.post("/api/invoke", json=call, headers={"Host": "attacker.example"}), 403, "host-not-allowed")


def sse_events(response):
    """The (event, data) pairs of an event stream, comments skipped, in order."""
    events, name, data = [], None, []
    for line in response.iter_lines():
        if line == "":
            if name is not None or data:
                events.append((name, json.loads("\n".join(data))))
            name, data = None, []
        elif line.startswith(":"):
            continue
        elif line.startswith("event:"):
            name = line[len("event:"):].strip()
        elif line.startswith("data:"):
            data.append(line[len("data:"):].strip())
    return events


def event_stream(client):
    call = {"capability": "conformance.tool_with_progress", "input": {}}
    headers = {"Accept": "text/event-stream", "Idempotency-Key": "sse-1"}
    with client.stream("POST", "/api/invoke", json=call, headers=headers) as response:
        content_type = response.headers.get("content-type", "")
        check("SSE: 200 text/event-stream", response.status_code == 200 and content_type.startswith("text/event-stream"),
              f"{response.status_code} {content_type}")
        events = sse_events(response)
    names = [name for name, _ in events]
    progress = [data for name, data in events if name == "progress"]
    check("SSE: progress events, then exactly one result event last",
          len(progress) >= 1 and names.count("result") == 1 and names[-1] == "result", json.dumps(names))
    done = [p.get("progress") for p in progress]
    check("SSE: progress grows to its total, with the handler's messages",
          done == sorted(done) and done[-1] == 100 and all(p.get("total") == 100 for p in progress)
          and progress[-1].get("message") == "Completed step 100 of 100", json.dumps(progress))
    result = events[-1][1] if events else {}
    check("SSE: the result event is the answer's envelope",
          result.get("status") == 200 and str(result.get("correlationId", "")).startswith("c-")
          and result.get("body") == {"status": "ok", "output": "Progress complete.", "invocationId": "sse-1"},
          json.dumps(result))
    # Refused before any handler runs: the plain answer, whatever the client accepts.
    refused = client.post("/api/invoke", json={"capability": "conformance.nothing_here"},
                          headers={"Accept": "text/event-stream"})
    check("SSE: a call refused before its handler keeps its plain status and problem",
          refused.status_code == 404 and refused.headers.get("content-type", "").startswith("application/problem+json")
          and refused.json().get("code") == "CAPABILITY_NOT_FOUND", f"{refused.status_code} {refused.text[:200]}")


def poll(client, location, headers, seconds=20):
    deadline = time.monotonic() + seconds
    while True:
        view = client.get(location, headers=headers).json()
        if view.get("status") != "working" or time.monotonic() > deadline:
            return view
        time.sleep(max(view.get("pollIntervalMs", 100), 50) / 1000)


def tasks(client):
    alice = {"Authorization": "Bearer t-alice"}
    call = {"capability": "conformance.slow_compute", "input": {"seconds": 1, "label": "pi"}}
    response = client.post("/api/invoke", json=call, headers={**alice, "Prefer": "respond-async"})
    location = response.headers.get("location", "")
    view = response.json() if response.status_code == 202 else {}
    check("202: a long-running call preferring respond-async is a working task",
          response.status_code == 202 and response.headers.get("preference-applied") == "respond-async"
          and view.get("status") == "working" and location == f"/api/tasks/{view.get('taskId')}",
          f"{response.status_code} {response.headers} {response.text[:300]}")
    if not location:
        return
    for who, headers in (("another person", {"Authorization": "Bearer t-bob"}), ("an anonymous caller", {})):
        other = client.get(location, headers=headers)
        check(f"202: {who} gets task-not-found, never the task",
              other.status_code == 404 and other.json().get("type") == "urn:agent-surface:protocol:task-not-found"
              and "taskId" not in other.json(), f"{other.status_code} {other.text[:200]}")
    done = poll(client, location, alice)
    check("202: polled to completed, with the result's envelope",
          done.get("status") == "completed" and done.get("result", {}).get("status") == 200
          and done.get("result", {}).get("body") == {"status": "ok", "output": "Computed pi"}, json.dumps(done))
    long = {"capability": "conformance.slow_compute", "input": {"seconds": 60}}
    response = client.post("/api/invoke", json=long, headers={**alice, "Prefer": "respond-async"})
    location = response.headers.get("location", "")
    cancelled = client.delete(location, headers=alice) if location else None
    check("202: DELETE asks for the end of a running task",
          cancelled is not None and cancelled.status_code == 202 and cancelled.json().get("cancelRequested") is True,
          "" if cancelled is None else f"{cancelled.status_code} {cancelled.text[:200]}")
    if location:
        ended = poll(client, location, alice)
        check("202: the cancelled read ends cancelled", ended.get("status") == "cancelled", json.dumps(ended))
    # Not long-running: the preference is ignored.
    quick = client.post("/api/invoke", json={"capability": "conformance.greet", "input": {"name": "Ada"}},
                        headers={**alice, "Prefer": "respond-async"})
    check("202: another capability answers when it ends", quick.status_code == 200
          and quick.json().get("output") == "Hello, Ada!", f"{quick.status_code} {quick.text[:200]}")


def resolve(document, ref):
    node = document
    for part in ref[2:].split("/") if ref != "#" else []:
        part = part.replace("~1", "/").replace("~0", "~")
        if not isinstance(node, dict) or part not in node:
            return False
        node = node[part]
    return True


def local_refs(node):
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "$ref" and isinstance(value, str) and value.startswith("#"):
                yield value
            else:
                yield from local_refs(value)
    elif isinstance(node, list):
        for value in node:
            yield from local_refs(value)


def openapi(client):
    alice = {"Authorization": "Bearer t-alice"}
    response = client.get("/api/openapi.json", headers=alice)
    check("OpenAPI: GET /api/openapi.json → 200 application/json",
          response.status_code == 200 and response.headers.get("content-type", "").startswith("application/json"),
          f"{response.status_code} {response.text[:200]}")
    document = response.json()
    try:
        validate_openapi(document)
        check("OpenAPI: the document is valid OpenAPI 3.1 (openapi-spec-validator)",
              document.get("openapi", "").startswith("3.1"), str(document.get("openapi")))
    except Exception as e:  # noqa: BLE001 - reported as a failed check
        check("OpenAPI: the document is valid OpenAPI 3.1 (openapi-spec-validator)", False, str(e)[:500])
    broken = sorted({ref for ref in local_refs(document) if not resolve(document, ref)})
    check("OpenAPI: every local $ref resolves", not broken, json.dumps(broken[:10]))
    listed = client.get("/api/capabilities", headers=alice).json()
    names = sorted(c["name"] for c in listed.get("capabilities", []))
    mapping = document.get("components", {}).get("schemas", {}).get("InvokeRequest", {}) \
        .get("discriminator", {}).get("mapping", {})
    check("OpenAPI: every capability of GET /api/capabilities is in the document",
          len(names) > 0 and sorted(mapping) == names, json.dumps(sorted(set(names) ^ set(mapping))))
    paths = document.get("paths", {})
    check("OpenAPI: the invoke, discovery and task routes", {"/invoke", "/capabilities", "/tasks/{id}"} <= set(paths),
          json.dumps(sorted(paths)))
    with open(sys.argv[3]) as f:
        matrix = json.load(f)["codes"]
    responses = paths.get("/invoke", {}).get("post", {}).get("responses", {})
    missing = [
        f"{c['code']}@{status}"
        for c in matrix
        for status in {c["httpStatus"]["default"], *(w["then"] for w in c["httpStatus"]["when"])}
        if {"$ref": f"#/components/schemas/Problem.{c['code']}"}
        not in responses.get(str(status), {}).get("content", {}).get("application/problem+json", {})
        .get("schema", {}).get("oneOf", [])
    ]
    check("OpenAPI: every code under every HTTP status the matrix gives it", not missing, json.dumps(missing))


def async_session(demo):
    server, base = start_server(demo, "--token", "t-bob=bob", "--conformance")
    try:
        with httpx.Client(base_url=base, timeout=30) as client:
            event_stream(client)
            tasks(client)
            openapi(client)
    except Exception as e:  # noqa: BLE001 - reported as a failed check
        check("the HTTP session (SSE, tasks, OpenAPI)", False, f"{type(e).__name__}: {e}")
    finally:
        server.kill()
        server.wait()


def mcp_session_ends(base):
    """The Python SDK's own streamable HTTP client on the same server's `/mcp`: a session lists the
    tools and, left, is ended with `DELETE`. The SDK logs any answer but `200`, `204` (or `405`)
    as a failed termination."""
    import logging

    import anyio
    from mcp import ClientSession
    from mcp.client.streamable_http import streamable_http_client

    warned = []
    ended = []

    class Kept(logging.Handler):
        def emit(self, record):
            warned.append(record.getMessage())

    kept = Kept(level=logging.WARNING)
    logger = logging.getLogger("mcp.client.streamable_http")
    logger.addHandler(kept)

    async def session():
        headers = {"Authorization": "Bearer t-alice"}
        async def seen(response):
            if response.request.method == "DELETE":
                ended.append(response.status_code)

        hooks = {"response": [seen]}
        async with httpx.AsyncClient(headers=headers, timeout=10, event_hooks=hooks) as client:
            async with streamable_http_client(f"{base}/mcp", http_client=client) as (read, write):
                async with ClientSession(read, write) as mcp:
                    await mcp.initialize()
                    return [t.name for t in (await mcp.list_tools()).tools]

    try:
        names = anyio.run(session)
        check("MCP over HTTP, the Python SDK's client: a session lists the tools", "orders-list" in names,
              json.dumps(names))
        check("MCP over HTTP, the Python SDK's client: its session is ended with DELETE, answered 204",
              ended == [204], json.dumps(ended))
        check("MCP over HTTP, the Python SDK's client: its session ends without a failed termination",
              not any("termination" in w for w in warned), json.dumps(warned))
    except Exception as e:  # noqa: BLE001 - reported as a failed check
        check("MCP over HTTP, the Python SDK's client", False, f"{type(e).__name__}: {e}")
    finally:
        logger.removeHandler(kept)


def main():
    if len(sys.argv) != 4:
        print("usage: python http_client.py DEMO_BINARY CASES_JSON ERROR_MATRIX_JSON", file=sys.stderr)
        sys.exit(2)
    demo, cases_path, matrix_path = sys.argv[1:]
    with open(cases_path) as f:
        spec = json.load(f)
    with open(matrix_path) as f:
        matrix = {c["code"]: c for c in json.load(f)["codes"]}
    server, base = start_server(demo)
    try:
        with httpx.Client(base_url=base, timeout=10) as client:
            listed = client.get("/api/capabilities")
            snapshot = listed.json() if listed.status_code == 200 else {}
            names = [c.get("name") for c in snapshot.get("capabilities", [])]
            check("GET /api/capabilities → 200 with the surface id and version",
                  isinstance(snapshot.get("surfaceId"), str) and isinstance(snapshot.get("version"), int),
                  listed.text[:300])
            check("GET /api/capabilities → the hidden admin capability is absent",
                  "admin.purge_cache" not in names and "orders.list" in names, json.dumps(names))
            run_cases(client, spec["cases"], matrix, snapshot)
            protocol_faults(client)
        mcp_session_ends(base)
    except Exception as e:  # noqa: BLE001 - reported as a failed check
        check("the HTTP session", False, f"{type(e).__name__}: {e}")
    finally:
        server.kill()
        server.wait()
    async_session(demo)
    finish()


main()
