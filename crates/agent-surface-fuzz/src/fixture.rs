//! The surface every driver fuzzes: one capability type, `fuzz`, whose capabilities cover
//! recursive and nested schemas, a typed handler, handler errors, a precondition and a
//! confirmation gate; and the per-thread runtime that runs them.

use std::cell::Cell;
use std::sync::Arc;
use std::time::Duration;

use agent_surface_core::details::RateLimitReason;
use agent_surface_core::{AgentSurfaceError, Effect};
use agent_surface_mcp::McpConfig;
use agent_surface_policy::{MemoryIdempotencyStore, MemoryStoreConfig};
use agent_surface_registry::{Ctx, Mount, Registry, RegistryConfig, Unmet};
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Value, json};

/// The capabilities of the fixture, by registry name.
pub(crate) const CAPABILITIES: [&str; 6] =
    ["fuzz.tree", "fuzz.echo", "fuzz.fail", "fuzz.gated", "fuzz.checked", "fuzz.typed"];

/// The capability whose output is its input (its results may quote the input).
pub(crate) const ECHO: &str = "fuzz.echo";

/// What the drivers share on one thread. Leaked on purpose: it lives as long as the thread, and
/// a runtime dropped during thread-local destruction could not reach its own thread-locals.
pub(crate) struct Fixture {
    /// A current-thread runtime with time and I/O enabled.
    pub(crate) runtime: tokio::runtime::Runtime,
    /// The registry with the `fuzz` type mounted (instance `main`).
    pub(crate) registry: Registry,
    /// The MCP configuration, built once (its default draws a sealing key).
    pub(crate) mcp: Arc<McpConfig>,
    _mount: Mount,
    ids: Cell<u64>,
}

thread_local! {
    static FIXTURE: &'static Fixture = Box::leak(Box::new(Fixture::new()));
}

/// Runs `f` with this thread's fixture.
pub(crate) fn with<R>(f: impl FnOnce(&'static Fixture) -> R) -> R {
    FIXTURE.with(|fixture| f(fixture))
}

impl Fixture {
    fn new() -> Fixture {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap_or_else(|e| panic!("the fuzz runtime could not start: {e}"));
        let (registry, mount) = registry();
        Fixture { runtime, registry, mcp: Arc::new(McpConfig::default()), _mount: mount, ids: Cell::new(0) }
    }

    /// A fresh invocation id (never used before on this thread), so that every call with an id
    /// starts its own idempotency record and outcomes do not depend on earlier inputs.
    pub(crate) fn next_invocation_id(&self) -> String {
        format!("fuzz-{}", self.next())
    }

    /// The next number of a per-thread sequence.
    pub(crate) fn next(&self) -> u64 {
        let n = self.ids.get() + 1;
        self.ids.set(n);
        n
    }
}

/// A registry with the `fuzz` type defined and mounted, and the mount that keeps it live. Its
/// idempotency store is small (memory stays flat over millions of runs, and eviction and
/// withheld results are reachable).
fn registry() -> (Registry, Mount) {
    let store = MemoryStoreConfig::with_capacity(512).with_bytes(4 << 20, 4 << 20).with_max_result_bytes(16 << 10);
    let config =
        RegistryConfig { idempotency: Arc::new(MemoryIdempotencyStore::new(store)), ..RegistryConfig::default() };
    let registry = Registry::new(config);
    registry.define("fuzz", define).unwrap_or_else(|e| panic!("the fuzz fixture does not define: {e}"));
    let mount = registry.mount("fuzz", "main").unwrap_or_else(|e| panic!("the fuzz fixture does not mount: {e}"));
    (registry, mount)
}

fn define(t: &mut agent_surface_registry::TypeBuilder<'_>) {
    t.capability("tree", "Count the nodes of a labelled tree.").effect(Effect::Read).idempotent().raw_handler(
        tree_schema(),
        Some(json!({
            "type": "object",
            "properties": {"nodes": {"type": "integer", "minimum": 0}},
            "required": ["nodes"],
            "additionalProperties": false
        })),
        |_ctx: Ctx, input: Value| async move { Ok::<_, AgentSurfaceError>(json!({"nodes": count_nodes(&input)})) },
    );

    t.capability("echo", "Return the input unchanged.").effect(Effect::Write).raw_handler(
        json!({
            "type": "object",
            "properties": {
                "text": {"type": "string", "maxLength": 100000},
                "data": {}
            },
            "additionalProperties": true
        }),
        Some(json!({"type": "object", "properties": {"echo": {"type": "object"}}, "required": ["echo"]})),
        |_ctx: Ctx, input: Value| async move { Ok::<_, AgentSurfaceError>(json!({"echo": input})) },
    );

    t.capability("fail", "Fail in the way the input asks.").effect(Effect::Read).raw_handler(
        json!({
            "type": "object",
            "properties": {
                "kind": {"type": "string", "enum": [
                    "precondition", "rate", "transient", "internal", "auth", "unknown", "timeout", "other"
                ]},
                "text": {"type": "string"}
            },
            "required": ["kind"],
            "additionalProperties": false
        }),
        None,
        |_ctx: Ctx, input: Value| async move {
            let text = input["text"].as_str().unwrap_or_default().to_owned();
            Err::<Value, _>(match input["kind"].as_str() {
                Some("precondition") => AgentSurfaceError::precondition_failed("The order is locked."),
                Some("rate") => AgentSurfaceError::rate_limited(RateLimitReason::Rate, Duration::from_millis(1200)),
                Some("transient") => AgentSurfaceError::transient(Duration::from_millis(250)),
                // The cause quotes the input: it must stay on the operator channel.
                Some("internal") => AgentSurfaceError::internal(std::io::Error::other(format!(
                    "SELECT * FROM orders WHERE note = '{text}'"
                ))),
                Some("auth") => AgentSurfaceError::not_authenticated(),
                Some("unknown") => AgentSurfaceError::outcome_unknown(),
                Some("timeout") => AgentSurfaceError::timeout(Duration::from_secs(5), false),
                _ => AgentSurfaceError::handler_failed("The operation failed. Do not retry it."),
            })
        },
    );

    t.capability("gated", "Delete items, with a person's approval.")
        .effect(Effect::Destructive)
        .confirm(|_: &Value| "Delete the selected items.")
        .raw_handler(
            json!({
                "type": "object",
                "properties": {
                    "items": {
                        "type": "array",
                        "items": {"type": "string", "pattern": "^[A-Z]{2}-[0-9]{1,6}$"},
                        "minItems": 1,
                        "maxItems": 5,
                        "uniqueItems": true
                    }
                },
                "required": ["items"],
                "additionalProperties": false
            }),
            None,
            |_ctx: Ctx, _input: Value| async move { Ok::<_, AgentSurfaceError>(json!({"deleted": true})) },
        );

    t.capability("checked", "Reserve stock for an item.")
        .effect(Effect::Write)
        .precondition(|_: &Ctx, input: &Value| {
            if input["count"].as_i64().is_some_and(|count| count > 10) {
                return Err(Unmet::new("At most ten items can be reserved at once.")
                    .reason("too-many")
                    .detail("limit", 10));
            }
            Ok(())
        })
        .raw_handler(
            json!({
                "type": "object",
                "properties": {
                    "count": {"type": "integer", "minimum": 0, "maximum": 1000000},
                    "sku": {"type": "string", "minLength": 1, "maxLength": 32, "pattern": "^[a-z0-9-]+$"},
                    "when": {"type": "string", "format": "date"}
                },
                "required": ["count", "sku"],
                "additionalProperties": false
            }),
            None,
            |_ctx: Ctx, input: Value| async move { Ok::<_, AgentSurfaceError>(json!({"reserved": input["count"]})) },
        );

    t.capability("typed", "Place an order, possibly amending an earlier one.")
        .effect(Effect::Write)
        .idempotent()
        .handler(|_ctx: Ctx, order: Order| async move { Ok::<_, AgentSurfaceError>(order.line_count()) });
}

/// A labelled tree: `$defs` with a recursive `$ref`, a self-reference to the root, arrays,
/// `oneOf`, `anyOf`, patterns and formats, and a write-only (sensitive) field.
fn tree_schema() -> Value {
    json!({
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "type": "object",
        "$defs": {
            "node": {
                "type": "object",
                "properties": {
                    "label": {"type": "string", "pattern": "^[a-z][a-z0-9-]{0,31}$"},
                    "value": {"oneOf": [
                        {"type": "integer", "minimum": -1000, "maximum": 1000},
                        {"type": "string", "format": "email"},
                        {"type": "string", "format": "date-time", "maxLength": 40},
                        {"type": "null"}
                    ]},
                    "weight": {"type": "number", "exclusiveMinimum": 0, "multipleOf": 0.5},
                    "kind": {"enum": ["leaf", "branch"]},
                    "children": {"type": "array", "items": {"$ref": "#/$defs/node"}, "maxItems": 8}
                },
                "required": ["label"],
                "additionalProperties": false
            },
            "contact": {
                "anyOf": [
                    {
                        "type": "object",
                        "properties": {"email": {"type": "string", "format": "email"}},
                        "required": ["email"],
                        "additionalProperties": false
                    },
                    {
                        "type": "object",
                        "properties": {
                            "uri": {"type": "string", "format": "uri"},
                            "host": {"type": "string", "format": "ipv4"}
                        },
                        "required": ["uri"],
                        "additionalProperties": false
                    }
                ]
            }
        },
        "properties": {
            "root": {"$ref": "#/$defs/node"},
            "contacts": {"type": "array", "items": {"$ref": "#/$defs/contact"}, "uniqueItems": true, "minItems": 1},
            "id": {"type": "string", "format": "uuid"},
            "password": {"type": "string", "writeOnly": true, "minLength": 8, "pattern": "[0-9]"},
            "note": {"type": "string", "maxLength": 64},
            "tags": {"type": "object", "additionalProperties": {"type": "string"}, "maxProperties": 4},
            "previous": {"$ref": "#"}
        },
        "required": ["root"],
        "additionalProperties": false
    })
}

/// The nodes of every `root` tree in the input (following `previous`), without recursion.
fn count_nodes(input: &Value) -> u64 {
    let mut count = 0;
    let mut stack: Vec<&Value> = Vec::new();
    let mut document = Some(input);
    while let Some(d) = document {
        stack.extend(d.get("root"));
        document = d.get("previous");
    }
    while let Some(node) = stack.pop() {
        count += 1;
        if let Some(children) = node.get("children").and_then(Value::as_array) {
            stack.extend(children);
        }
    }
    count
}

/// The typed capability's input: recursive through `amends`, with a tagged enum.
#[derive(Deserialize, JsonSchema)]
struct Order {
    /// The order id.
    #[schemars(regex(pattern = r"^[A-Z]-[0-9]+$"))]
    id: String,
    /// The lines, at least one.
    #[schemars(length(min = 1, max = 20))]
    lines: Vec<Line>,
    /// How urgent it is.
    priority: Priority,
    /// The earlier order this one amends.
    amends: Option<Box<Order>>,
}

#[derive(Deserialize, JsonSchema)]
struct Line {
    sku: String,
    #[schemars(range(min = 1, max = 99))]
    quantity: u32,
}

#[derive(Deserialize, JsonSchema)]
#[serde(tag = "level", rename_all = "snake_case")]
enum Priority {
    Low,
    High { reason: String },
}

impl Order {
    /// What the handler answers: counts over this order and every order it amends (nothing
    /// of the input is quoted).
    fn line_count(&self) -> Value {
        let (mut orders, mut lines, mut units, mut urgent, mut id_chars) = (0u64, 0u64, 0u64, 0u64, 0u64);
        let mut order = Some(self);
        while let Some(o) = order {
            orders += 1;
            id_chars += o.id.chars().count() as u64;
            lines += o.lines.len() as u64;
            units += o.lines.iter().map(|l| u64::from(l.quantity) + u64::from(l.sku.is_empty())).sum::<u64>();
            if let Priority::High { reason } = &o.priority {
                urgent += 1 + u64::from(reason.is_empty());
            }
            order = o.amends.as_deref();
        }
        json!({"orders": orders, "lines": lines, "units": units, "urgent": urgent, "idChars": id_chars})
    }
}
