//! `tools/list` and `notifications/tools/list_changed`.

use std::sync::atomic::Ordering;

use agent_surface_core::{AgentSurfaceError, Effect};
use agent_surface_mcp::{McpConfig, meta};
use agent_surface_registry::Ctx;
use serde_json::{Value, json};

use crate::support::{connect, eventually, fixture};

#[tokio::test]
async fn tools_come_from_the_snapshot_with_schemas_annotations_and_meta() {
    let f = fixture();
    let c = connect(&f.registry, McpConfig::default(), None).await;
    let listed = c.client.list_tools(None).await.unwrap();
    let names: Vec<&str> = listed.tools.iter().map(|t| t.name.as_ref()).collect();
    assert_eq!(names, ["store-count", "store-delete", "store-echo", "store-send", "store-slow"]);

    let m = listed.meta.as_ref().unwrap();
    assert_eq!(m.get(meta::SURFACE_ID).and_then(Value::as_str), Some(f.registry.surface_id()));
    assert_eq!(m.get(meta::SURFACE_VERSION).and_then(Value::as_u64), Some(f.registry.version()));

    let wire = serde_json::to_value(&listed.tools).unwrap();
    let echo = &wire[2];
    assert_eq!(echo["description"], "Echo a text back.");
    assert_eq!(echo["inputSchema"]["properties"]["text"]["type"], "string");
    assert_eq!(echo["outputSchema"]["properties"]["text"]["type"], "string");
    assert_eq!(
        echo["annotations"],
        json!({"readOnlyHint": true, "destructiveHint": false, "idempotentHint": true, "openWorldHint": false})
    );
    assert_eq!(echo["_meta"]["agent-surface/capability"], "store.echo");
    assert_eq!(echo["_meta"]["agent-surface/effect"], "read");
    let delete = &wire[1];
    assert_eq!(delete["annotations"]["destructiveHint"], true);
    assert_eq!(delete["annotations"]["readOnlyHint"], false);
    assert!(delete.get("outputSchema").is_none(), "no output schema for an untyped output");
    let send = &wire[3];
    assert_eq!(send["annotations"]["openWorldHint"], true);
    c.client.cancel().await.unwrap();
}

#[tokio::test]
async fn a_disabled_capability_stays_listed_with_its_reason() {
    let f = fixture();
    f.registry.disable("store.send", "The mail relay is down for maintenance.");
    let c = connect(&f.registry, McpConfig::default(), None).await;
    let tools = c.client.list_all_tools().await.unwrap();
    let send = tools.iter().find(|t| t.name == "store-send").unwrap();
    assert!(
        send.description
            .as_deref()
            .unwrap()
            .ends_with("(Unavailable right now: The mail relay is down for maintenance.)")
    );
    assert_eq!(
        send.meta.as_ref().unwrap().get(meta::UNAVAILABLE_REASON),
        Some(&json!("The mail relay is down for maintenance."))
    );
    c.client.cancel().await.unwrap();
}

#[tokio::test]
async fn a_surface_change_that_alters_the_list_is_announced() {
    let f = fixture();
    let c = connect(&f.registry, McpConfig::default(), None).await;
    c.client.list_tools(None).await.unwrap();

    f.registry
        .define("extra", |t| {
            t.capability("ping", "Answer pong.").effect(Effect::Read).raw_handler(
                json!({"type": "object"}),
                None,
                |_ctx: Ctx, _i: Value| async move { Ok::<_, AgentSurfaceError>(json!("pong")) },
            );
        })
        .unwrap();
    // Defined but not mounted: not in the list, so nothing to announce.
    tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    assert_eq!(c.list_changed.load(Ordering::SeqCst), 0);

    let mount = f.registry.mount("extra", "one").unwrap();
    assert!(eventually(|| c.list_changed.load(Ordering::SeqCst) == 1).await, "mount announced");
    let tools = c.client.list_all_tools().await.unwrap();
    assert!(tools.iter().any(|t| t.name == "extra-ping"));

    drop(mount);
    assert!(eventually(|| c.list_changed.load(Ordering::SeqCst) == 2).await, "unmount announced");
    f.registry.disable("store.echo", "Echo is resting.");
    assert!(eventually(|| c.list_changed.load(Ordering::SeqCst) == 3).await, "disable announced");
    c.client.cancel().await.unwrap();
}

/// `notifications/initialized` said again and again starts one list watcher a session, not one
/// a notification (`rmcp` hands every repeat to the handler; each watcher lived until the
/// session ended): the runtime's live tasks do not grow with the repeats, and a change is still
/// announced once.
#[tokio::test]
async fn repeating_initialized_starts_no_more_watchers() {
    let f = fixture();
    let c = connect(&f.registry, McpConfig::default(), None).await;
    c.client.list_tools(None).await.unwrap();
    let metrics = tokio::runtime::Handle::current().metrics();
    let before = metrics.num_alive_tasks();
    for _ in 0..200 {
        c.client.notify_initialized().await.unwrap();
    }
    // A request after them: its answer comes once the notifications before it were handled.
    c.client.list_tools(None).await.unwrap();
    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    let after = metrics.num_alive_tasks();
    assert!(after < before + 20, "live tasks grew from {before} to {after} with 200 notifications");

    let _mount = f.registry.mount("store", "second").unwrap();
    assert!(eventually(|| c.list_changed.load(Ordering::SeqCst) == 1).await, "the change announced");
    tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    assert_eq!(c.list_changed.load(Ordering::SeqCst), 1, "announced once");
    c.client.cancel().await.unwrap();
}

#[tokio::test]
async fn a_tool_whose_output_is_not_an_object_has_no_output_schema() {
    let f = fixture();
    f.registry
        .define("tags", |t| {
            t.capability("list", "List the tags.").effect(Effect::Read).handler(|_c: Ctx, _i: Value| async move {
                Ok::<_, AgentSurfaceError>(vec!["a".to_string(), "b".to_string()])
            })
        })
        .unwrap();
    let _m = f.registry.mount("tags", "main").unwrap();
    let c = connect(&f.registry, McpConfig::default(), None).await;
    let tools = c.client.list_all_tools().await.unwrap();
    let listed = tools.iter().find(|t| t.name == "tags-list").unwrap();
    // MCP output schemas describe structuredContent, which is an object; clients reject others.
    assert!(listed.output_schema.is_none(), "{:?}", listed.output_schema);
    let result = c.client.call_tool(crate::support::params("tags-list", json!({}), json!({}))).await.unwrap();
    assert_ne!(result.is_error, Some(true));
    assert!(result.structured_content.is_none());
    let wire = serde_json::to_value(&result).unwrap();
    assert_eq!(wire["content"][0]["text"], r#"["a","b"]"#);
    c.client.cancel().await.unwrap();
}

/// The proof of per-tool versions on the legacy era: list, change the definition (remount with a
/// new schema), the old version is stale with the live one, the new one runs.
#[tokio::test]
async fn a_call_planned_on_a_changed_tool_definition_is_stale_and_names_the_live_version() {
    use agent_surface_core::{ErrorCode, Retry};
    use agent_surface_registry::{Registry, RegistryConfig};

    use crate::support::{call, call_raw, notes, tool_version};

    let registry = Registry::new(RegistryConfig::default());
    registry.define("notes", notes("string")).unwrap();
    let mounted = registry.mount("notes", "main").unwrap();
    let c = connect(&registry, McpConfig::default(), None).await;
    let tools = c.client.list_all_tools().await.unwrap();
    let (read_v1, erase_v1) = (tool_version(&tools, "notes-read"), tool_version(&tools, "notes-erase"));
    let ok = call(&c.client, "notes-erase", json!({"id": "a"}), json!({meta::TOOL_VERSION: erase_v1})).await;
    assert!(ok.is_ok(), "{ok:?}");

    drop(mounted);
    registry.redefine("notes", notes("integer")).unwrap();
    let _mounted = registry.mount("notes", "main").unwrap();
    let tools = c.client.list_all_tools().await.unwrap();
    let erase_v2 = tool_version(&tools, "notes-erase");
    assert_ne!(erase_v2, erase_v1);
    assert_eq!(tool_version(&tools, "notes-read"), read_v1, "an unchanged definition keeps its version");

    let stale = call(&c.client, "notes-erase", json!({"id": 7}), json!({meta::TOOL_VERSION: erase_v1})).await;
    let p = stale.error_payload().expect("stale");
    assert_eq!((p.code(), p.retry()), (ErrorCode::StaleCapability, Retry::AfterRefresh));
    assert_eq!(p.details().unwrap()["reason"], "tool-version-mismatch");
    assert_eq!(p.details().unwrap()["liveToolVersion"], json!(erase_v2));
    let ok = call(&c.client, "notes-erase", json!({"id": 7}), json!({meta::TOOL_VERSION: erase_v2})).await;
    assert!(ok.is_ok(), "{ok:?}");
    // A read named by an old version is stale too; a call naming none runs.
    let stale = call(&c.client, "notes-read", json!({}), json!({meta::TOOL_VERSION: "0000000000"})).await;
    assert_eq!(stale.error_payload().unwrap().code(), ErrorCode::StaleCapability);
    assert!(call(&c.client, "notes-read", json!({}), json!({})).await.is_ok());
    // A version that is not a string does not fit the documented shape: a protocol fault.
    let fault = call_raw(&c.client, "notes-read", json!({}), json!({meta::TOOL_VERSION: 7})).await;
    assert!(matches!(fault, Err(rmcp::service::ServiceError::McpError(ref e)) if e.code.0 == -32602), "{fault:?}");
    c.client.cancel().await.unwrap();
}
