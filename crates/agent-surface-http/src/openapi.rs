//! `GET {prefix}/openapi.json`: an OpenAPI 3.1 document of the binding, generated from the live
//! surface on every request.
//!
//! It describes what the caller can do, as `GET {prefix}/capabilities` does (the caller's
//! snapshot: a capability hidden from this caller is not in it), so a mount or an unmount shows
//! in the next document:
//!
//! - the routes: `GET /capabilities`, `POST /invoke`, `GET`/`DELETE /tasks/{id}` when the binding
//!   has a task runtime, and `GET /openapi.json`; `servers` names the path the binding was
//!   reached by (`/api` behind `Serve`);
//! - every capability's request (`components.schemas["capability.{name}.request"]`: `capability`
//!   fixed to its name, `input` its input schema, the other invoke members), its input schema
//!   (`….input`) and, when it declares one, its output schema (`….output`); `InvokeRequest` is
//!   their `oneOf` with a `discriminator` on `capability`. A schema's internal references
//!   (`#/$defs/…`) are rewritten to point into the component that holds it;
//! - the answers: the success (`InvokeOk`), the event stream, the `202` task, and one response
//!   per HTTP status an error can have, each the `oneOf` of the problems (RFC 9457 with our
//!   payload: `Problem` and one `Problem.{CODE}` per code, with its `retry` values, HTTP statuses
//!   and details schema from the error matrix) and protocol faults (`ProtocolFault`) that status
//!   carries.
//!
//! Built with `serde_json` (no OpenAPI crate: the document is data, and the matrix and the
//! snapshot are all it needs).

use std::collections::{BTreeMap, BTreeSet};

use agent_surface_core::{ErrorCode, Retry, matrix};
use agent_surface_registry::Snapshot;
use serde_json::{Map, Value, json};

use crate::wire::{ERROR_TYPE_PREFIX, PROBLEM_JSON, PROTOCOL_TYPE_PREFIX, ProtocolFault};

/// The OpenAPI version the document follows.
pub const OPENAPI_VERSION: &str = "3.1.0";

/// What the document describes beyond the snapshot.
#[derive(Clone, Debug)]
pub(crate) struct Shape<'a> {
    /// The path the binding's routes are reached under (`""`: the root).
    pub base: &'a str,
    /// Whether the task routes are served.
    pub tasks: bool,
    /// Whether the authenticator answers with a bearer challenge.
    pub bearer: bool,
}

fn schema_ref(name: &str) -> Value {
    json!({"$ref": format!("#/components/schemas/{name}")})
}

/// A component name for `capability` (`[A-Za-z0-9._-]`, as OpenAPI requires), unique among
/// `taken`.
fn component_name(capability: &str, taken: &mut BTreeSet<String>) -> String {
    let clean: String = capability
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_') { c } else { '_' })
        .collect();
    let mut name = format!("capability.{clean}");
    let mut n = 1;
    while !taken.insert(name.clone()) {
        n += 1;
        name = format!("capability.{clean}-{n}");
    }
    name
}

/// `schema` made a component at `pointer` (a JSON pointer into the document): its root `$schema`
/// and `$id` dropped, and each reference within it (`#`, `#/…`) rewritten to start at `pointer`.
fn embed(schema: &Value, pointer: &str) -> Value {
    fn rewrite(value: &mut Value, pointer: &str) {
        match value {
            Value::Object(map) => {
                for (key, v) in map.iter_mut() {
                    match v {
                        Value::String(target) if key == "$ref" && (target == "#" || target.starts_with("#/")) => {
                            *target = format!("#{pointer}{}", &target[1..]);
                        }
                        _ => rewrite(v, pointer),
                    }
                }
            }
            Value::Array(items) => items.iter_mut().for_each(|v| rewrite(v, pointer)),
            _ => {}
        }
    }
    let mut schema = schema.clone();
    if let Value::Object(map) = &mut schema {
        map.remove("$schema");
        map.remove("$id");
    }
    rewrite(&mut schema, pointer);
    schema
}

/// The problem of each code, and the statuses each code can have.
fn problems(schemas: &mut Map<String, Value>) -> BTreeMap<u16, Vec<ErrorCode>> {
    let mut by_status: BTreeMap<u16, Vec<ErrorCode>> = BTreeMap::new();
    for spec in &matrix::MATRIX {
        let code = spec.code.as_str();
        let name = format!("Problem.{code}");
        let statuses: BTreeSet<u16> = spec.http_status.values().collect();
        for status in &statuses {
            by_status.entry(*status).or_default().push(spec.code);
        }
        let retries: BTreeSet<&str> = spec.retry.values().map(Retry::as_str).collect();
        let mut properties = Map::new();
        properties.insert("type".into(), json!({"const": format!("{ERROR_TYPE_PREFIX}{code}")}));
        properties.insert("code".into(), json!({"const": code}));
        properties.insert("status".into(), json!({"enum": statuses}));
        properties.insert("retry".into(), json!({"enum": retries}));
        let mut problem = json!({
            "description": spec.meaning,
            "allOf": [schema_ref("Problem")],
            "properties": properties,
        });
        match spec.details.schema_json() {
            Value::Null => {
                problem["not"] = json!({"required": ["details"]});
            }
            details => {
                let pointer = format!("/components/schemas/{name}/properties/details");
                problem["properties"]["details"] = embed(&details, &pointer);
                problem["required"] = json!(["details"]);
            }
        }
        schemas.insert(name, problem);
    }
    by_status
}

/// The schemas every document has.
fn fixed_schemas(schemas: &mut Map<String, Value>) {
    let codes: Vec<&str> = ErrorCode::ALL.iter().map(|c| c.as_str()).collect();
    let retries: Vec<&str> = Retry::ALL.iter().map(|r| r.as_str()).collect();
    schemas.insert("ErrorCode".into(), json!({"type": "string", "enum": codes}));
    schemas.insert(
        "Retry".into(),
        json!({"type": "string", "enum": retries, "description": "What the caller may do next: act on it, not on the status."}),
    );
    schemas.insert(
        "Problem".into(),
        json!({
            "type": "object",
            "description": "A capability error: an RFC 9457 problem whose members after `type`, `title`, `status`, `detail` and `invocationId` are the error payload every transport carries.",
            "required": ["type", "title", "status", "detail", "code", "message", "retry"],
            "properties": {
                "type": {"type": "string", "pattern": format!("^{ERROR_TYPE_PREFIX}")},
                "title": {"type": "string"},
                "status": {"type": "integer"},
                "detail": {"type": "string", "description": "The payload's message."},
                "invocationId": {"type": "string"},
                "code": schema_ref("ErrorCode"),
                "message": {"type": "string"},
                "retry": schema_ref("Retry"),
                "details": {"type": "object"},
                "repair": {"type": "object", "description": "A bounded repair plan, when the error has one."},
            },
        }),
    );
    schemas.insert(
        "ProtocolFault".into(),
        json!({
            "type": "object",
            "description": "The exchange failed before the call reached the pipeline (or the server failed to answer): no `code`, fixed text.",
            "required": ["type", "title", "status", "detail"],
            "properties": {
                "type": {"type": "string", "pattern": format!("^{PROTOCOL_TYPE_PREFIX}")},
                "title": {"type": "string"},
                "status": {"type": "integer"},
                "detail": {"type": "string"},
            },
            "not": {"required": ["code"]},
        }),
    );
    schemas.insert(
        "Envelope".into(),
        json!({
            "type": "object",
            "description": "The answer a call would have had without an event stream or a task: its HTTP status, correlation id, Retry-After seconds and body.",
            "required": ["status", "correlationId", "body"],
            "properties": {
                "status": {"type": "integer"},
                "correlationId": {"type": "string"},
                "retryAfter": {"type": "integer", "minimum": 0},
                "body": {"oneOf": [schema_ref("InvokeOk"), schema_ref("Problem")]},
            },
        }),
    );
    schemas.insert(
        "Task".into(),
        json!({
            "type": "object",
            "required": ["taskId", "status", "createdAt", "updatedAt", "ttlMs", "pollIntervalMs", "cancelRequested"],
            "properties": {
                "taskId": {"type": "string"},
                "status": {"enum": ["working", "input_required", "completed", "failed", "cancelled"]},
                "statusMessage": {"type": "string"},
                "createdAt": {"type": "string", "format": "date-time"},
                "updatedAt": {"type": "string", "format": "date-time"},
                "ttlMs": {"type": "integer", "minimum": 1},
                "pollIntervalMs": {"type": "integer", "minimum": 1},
                "cancelRequested": {"type": "boolean"},
                "result": schema_ref("Envelope"),
            },
        }),
    );
    schemas.insert(
        "Snapshot".into(),
        json!({
            "type": "object",
            "required": ["surfaceId", "version", "capabilities"],
            "properties": {
                "surfaceId": {"type": "string"},
                "version": {"type": "integer", "minimum": 0},
                "capabilities": {"type": "array", "items": {
                    "type": "object",
                    "required": ["name", "description", "inputSchema"],
                    "properties": {
                        "name": {"type": "string"},
                        "toolName": {"type": "string"},
                        "description": {"type": "string"},
                        "inputSchema": {"type": "object"},
                        "outputSchema": {"type": "object"},
                    },
                }},
            },
        }),
    );
}

/// The members of an invoke request other than `capability` and `input`.
fn request_members() -> Map<String, Value> {
    let id = json!({"type": "string", "minLength": 1, "maxLength": 255});
    let mut m = Map::new();
    m.insert("invocationId".into(), id);
    m.insert(
        "target".into(),
        json!({"type": "string", "description": "The instance, for a capability mounted more than once."}),
    );
    m.insert("surfaceId".into(), json!({"type": "string"}));
    m.insert("surfaceVersion".into(), json!({"type": "integer", "minimum": 0}));
    m.insert("confirmationId".into(), json!({"type": "string"}));
    m.insert(
        agent_surface_core::tool_version::wire::HTTP_MEMBER.into(),
        json!({"type": "string", "description": "The version of the capability the call was planned against (as listed); another than the live one is STALE_CAPABILITY."}),
    );
    m
}

/// Adds each capability's schemas; returns the request component of each (by capability name)
/// and the output components.
fn capabilities(snapshot: &Snapshot, schemas: &mut Map<String, Value>) -> (BTreeMap<String, String>, Vec<String>) {
    let mut taken = BTreeSet::new();
    let mut requests = BTreeMap::new();
    let mut outputs = Vec::new();
    for capability in &snapshot.capabilities {
        let base = component_name(&capability.name, &mut taken);
        let input = format!("{base}.input");
        schemas.insert(input.clone(), embed(&capability.input_schema, &format!("/components/schemas/{input}")));
        let mut properties = Map::new();
        properties.insert("capability".into(), json!({"const": capability.name}));
        properties.insert("input".into(), schema_ref(&input));
        properties.extend(request_members());
        if let Some(version) = &capability.tool_version {
            // The live version, as the capability lists it.
            properties.insert(
                agent_surface_core::tool_version::wire::HTTP_MEMBER.into(),
                json!({"type": "string", "examples": [version], "description": "The version of this capability the call was planned against; another than the live one is STALE_CAPABILITY."}),
            );
        }
        let mut request = json!({
            "type": "object",
            "title": capability.name,
            "description": capability.description,
            "required": ["capability"],
            "properties": properties,
            "additionalProperties": false,
            "x-agent-surface-effect": capability.effect,
            "x-agent-surface-idempotent": capability.idempotent,
            "x-agent-surface-long-running": capability.long_running,
        });
        if let Some(output) = &capability.output_schema {
            let name = format!("{base}.output");
            schemas.insert(name.clone(), embed(output, &format!("/components/schemas/{name}")));
            request["x-agent-surface-output"] = schema_ref(&name);
            outputs.push(name);
        }
        let name = format!("{base}.request");
        schemas.insert(name.clone(), request);
        requests.insert(capability.name.clone(), name);
    }
    (requests, outputs)
}

/// The statuses a protocol fault of the invoke route can have, with their kinds.
fn fault_statuses() -> BTreeMap<u16, Vec<&'static str>> {
    let mut by_status: BTreeMap<u16, Vec<&'static str>> = BTreeMap::new();
    for fault in ProtocolFault::ALL {
        if fault != ProtocolFault::TaskNotFound {
            by_status.entry(fault.status().as_u16()).or_default().push(fault.kind());
        }
    }
    by_status
}

fn fault_response(description: &str) -> Value {
    json!({"description": description, "content": {PROBLEM_JSON: {"schema": schema_ref("ProtocolFault")}}})
}

/// The document for `snapshot`.
pub(crate) fn document(snapshot: &Snapshot, shape: &Shape<'_>) -> Value {
    let mut schemas = Map::new();
    fixed_schemas(&mut schemas);
    let code_statuses = problems(&mut schemas);
    let (requests, outputs) = capabilities(snapshot, &mut schemas);
    let invoke_request = if requests.is_empty() {
        let mut properties = Map::new();
        properties.insert("capability".into(), json!({"type": "string"}));
        properties.insert("input".into(), json!({"type": "object"}));
        properties.extend(request_members());
        json!({"type": "object", "required": ["capability"], "properties": properties, "additionalProperties": false})
    } else {
        let mapping: Map<String, Value> = requests
            .iter()
            .map(|(capability, name)| (capability.clone(), Value::from(format!("#/components/schemas/{name}"))))
            .collect();
        json!({
            "oneOf": requests.values().map(|name| schema_ref(name)).collect::<Vec<_>>(),
            "discriminator": {"propertyName": "capability", "mapping": mapping},
        })
    };
    schemas.insert("InvokeRequest".into(), invoke_request);
    let output = if !outputs.is_empty() && outputs.len() == requests.len() {
        json!({"anyOf": outputs.iter().map(|name| schema_ref(name)).collect::<Vec<_>>()})
    } else {
        json!({"description": "The capability's output (see its request schema's `x-agent-surface-output`, when it declares one)."})
    };
    schemas.insert(
        "InvokeOk".into(),
        json!({
            "type": "object",
            "required": ["status", "output"],
            "properties": {"status": {"const": "ok"}, "output": output, "invocationId": {"type": "string"}},
        }),
    );

    let correlation = json!({"description": "The call's correlation id: quote it to find the call in the operator log.", "schema": {"type": "string"}});
    let retry_after = json!({"description": "Whole seconds to wait (with `retry: after-delay`).", "schema": {"type": "integer", "minimum": 0}});
    let after_delay: BTreeSet<u16> = matrix::MATRIX
        .iter()
        .filter(|s| s.retry.values().any(|r| r == Retry::AfterDelay))
        .flat_map(|s| s.http_status.values())
        .collect();
    let faults = fault_statuses();
    let mut responses = Map::new();
    responses.insert(
        "200".into(),
        json!({
            "description": "The capability ran: its output. With `Accept: text/event-stream`, an event stream instead: `progress` events (data: {\"progress\", \"total\"?, \"message\"?}), then one `result` event whose data is an `Envelope`.",
            "headers": {"Agent-Surface-Correlation-Id": correlation},
            "content": {
                "application/json": {"schema": schema_ref("InvokeOk")},
                "text/event-stream": {"schema": {"type": "string"}},
            },
        }),
    );
    if shape.tasks {
        responses.insert(
            "202".into(),
            json!({
                "description": "A long-running capability asked with `Prefer: respond-async` runs as a task: poll `Location`.",
                "headers": {
                    "Location": {"description": "The task's path.", "schema": {"type": "string"}},
                    "Preference-Applied": {"schema": {"const": "respond-async"}},
                },
                "content": {"application/json": {"schema": schema_ref("Task")}},
            }),
        );
    }
    let statuses: BTreeSet<u16> = code_statuses.keys().chain(faults.keys()).copied().collect();
    for status in statuses {
        let codes = code_statuses.get(&status).map(Vec::as_slice).unwrap_or_default();
        let kinds = faults.get(&status).map(Vec::as_slice).unwrap_or_default();
        let mut one_of: Vec<Value> = codes.iter().map(|c| schema_ref(&format!("Problem.{}", c.as_str()))).collect();
        let mut said = Vec::new();
        if !codes.is_empty() {
            said.push(format!(
                "Capability errors: {}.",
                codes.iter().map(|c| c.as_str()).collect::<Vec<_>>().join(", ")
            ));
        }
        if !kinds.is_empty() {
            one_of.push(schema_ref("ProtocolFault"));
            said.push(format!("Protocol faults: {}.", kinds.join(", ")));
        }
        let mut response = json!({
            "description": said.join(" "),
            "content": {PROBLEM_JSON: {"schema": {"oneOf": one_of}}},
        });
        let mut headers = Map::new();
        if !codes.is_empty() {
            headers.insert("Agent-Surface-Correlation-Id".into(), correlation.clone());
        }
        if after_delay.contains(&status) {
            headers.insert("Retry-After".into(), retry_after.clone());
        }
        if !headers.is_empty() {
            response["headers"] = Value::Object(headers);
        }
        responses.insert(status.to_string(), response);
    }

    let header = |name: &str, description: &str| json!({"name": name, "in": "header", "required": false, "description": description, "schema": {"type": "string"}});
    let consumer = header("Agent-Surface-Consumer", "Names the caller's session: 1 to 64 of [A-Za-z0-9._-].");
    let mut paths = Map::new();
    paths.insert(
        "/capabilities".into(),
        json!({"get": {
            "operationId": "listCapabilities",
            "summary": "The capabilities this caller can invoke.",
            "parameters": [consumer],
            "responses": {
                "200": {"description": "The caller's snapshot.", "content": {"application/json": {"schema": schema_ref("Snapshot")}}},
                "default": fault_response("A protocol fault."),
            },
        }}),
    );
    paths.insert(
        "/invoke".into(),
        json!({"post": {
            "operationId": "invoke",
            "summary": "Invoke one capability.",
            "description": "Errors are RFC 9457 problems carrying the error payload; branch on `code` and act on `retry`. `Accept: text/event-stream` streams progress; `Prefer: respond-async` makes a long-running capability answer 202 with a task.",
            "parameters": [
                header("Idempotency-Key", "The invocation id: a retry under the same key is answered, not run again."),
                header("Prefer", "`respond-async`: answer a long-running capability with 202 and a task (RFC 7240)."),
                consumer,
                header("traceparent", "W3C trace context: the caller's trace becomes the call's parent."),
            ],
            "requestBody": {"required": true, "content": {"application/json": {"schema": schema_ref("InvokeRequest")}}},
            "responses": responses,
        }}),
    );
    if shape.tasks {
        let id = json!({"name": "id", "in": "path", "required": true, "schema": {"type": "string"}});
        let view = |description: &str| json!({"description": description, "content": {"application/json": {"schema": schema_ref("Task")}}});
        paths.insert(
            "/tasks/{id}".into(),
            json!({
                "parameters": [id, consumer],
                "get": {
                    "operationId": "getTask",
                    "summary": "A task: its status and, once completed, its result.",
                    "responses": {"200": view("The task."), "404": fault_response("task-not-found: unknown, expired, or another principal's."), "default": fault_response("A protocol fault.")},
                },
                "delete": {
                    "operationId": "cancelTask",
                    "summary": "Ask for the end of a running task.",
                    "responses": {"202": view("Cancellation asked: the task as it was."), "200": view("The task had already ended."), "404": fault_response("task-not-found: unknown, expired, or another principal's."), "default": fault_response("A protocol fault.")},
                },
            }),
        );
    }
    paths.insert(
        "/openapi.json".into(),
        json!({"get": {
            "operationId": "getOpenApi",
            "summary": "This document, generated from the caller's live surface.",
            "responses": {"200": {"description": "The document.", "content": {"application/json": {"schema": {"type": "object"}}}}},
        }}),
    );

    let mut doc = json!({
        "openapi": OPENAPI_VERSION,
        "info": {
            "title": "agent-surface HTTP binding",
            "version": snapshot.version.to_string(),
            "description": format!("Surface {} version {}: the capabilities this caller can invoke, generated from the live surface.", snapshot.surface_id, snapshot.version),
        },
        "servers": [{"url": if shape.base.is_empty() { "/" } else { shape.base }}],
        "paths": paths,
        "components": {"schemas": schemas},
    });
    if shape.bearer {
        doc["components"]["securitySchemes"] = json!({"bearer": {"type": "http", "scheme": "bearer"}});
        // Signed in, or anonymous where the service allows it.
        doc["security"] = json!([{"bearer": []}, {}]);
    }
    doc
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn references_are_rewritten_to_point_into_their_component() {
        let schema = json!({
            "$schema": "https://json-schema.org/draft/2020-12/schema",
            "$id": "urn:x",
            "type": "object",
            "properties": {"a": {"$ref": "#/$defs/address"}, "self": {"$ref": "#"}, "far": {"$ref": "https://example.org/s"}},
            "$defs": {"address": {"type": "string"}},
        });
        let embedded = embed(&schema, "/components/schemas/c.input");
        assert_eq!(embedded["properties"]["a"]["$ref"], "#/components/schemas/c.input/$defs/address");
        assert_eq!(embedded["properties"]["self"]["$ref"], "#/components/schemas/c.input");
        assert_eq!(embedded["properties"]["far"]["$ref"], "https://example.org/s");
        assert!(embedded.get("$schema").is_none() && embedded.get("$id").is_none());
    }

    #[test]
    fn component_names_are_clean_and_unique() {
        let mut taken = BTreeSet::new();
        assert_eq!(component_name("orders.list", &mut taken), "capability.orders.list");
        assert_eq!(component_name("orders/list", &mut taken), "capability.orders_list");
        assert_eq!(component_name("orders?list", &mut taken), "capability.orders_list-2");
    }

    #[test]
    fn every_code_and_status_of_the_matrix_is_described() {
        let snapshot: Snapshot =
            serde_json::from_value(json!({"surfaceId": "s", "version": 1, "capabilities": []})).unwrap();
        let doc = document(&snapshot, &Shape { base: "/api", tasks: false, bearer: false });
        let responses = &doc["paths"]["/invoke"]["post"]["responses"];
        for spec in &matrix::MATRIX {
            let name = format!("Problem.{}", spec.code.as_str());
            assert!(doc["components"]["schemas"].get(&name).is_some(), "{name}");
            for status in spec.http_status.values() {
                let one_of =
                    responses[status.to_string()]["content"][PROBLEM_JSON]["schema"]["oneOf"].as_array().unwrap();
                assert!(one_of.contains(&schema_ref(&name)), "{name} under {status}");
            }
        }
        for fault in ProtocolFault::ALL.into_iter().filter(|f| *f != ProtocolFault::TaskNotFound) {
            let one_of = &responses[fault.status().as_str()]["content"][PROBLEM_JSON]["schema"]["oneOf"];
            assert!(one_of.as_array().unwrap().contains(&schema_ref("ProtocolFault")), "{}", fault.kind());
        }
        assert!(doc["paths"].get("/tasks/{id}").is_none());
        assert_eq!(doc["servers"][0]["url"], "/api");
    }
}
