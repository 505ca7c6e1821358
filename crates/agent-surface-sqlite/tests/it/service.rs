//! A service wired to the SQLite bundle across a restart, as `ServiceBuilder` wires it.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use agent_surface_core::{AgentSurfaceError, Effect, ErrorCode, InvokeResult};
use agent_surface_policy::{Consumer, Identity, Policies};
use agent_surface_registry::{Ctx, InvokeOptions, InvokeRequest, Mount, Service, ServiceBuilder};
use serde_json::{Value, json};

use crate::restart::open;
use crate::support::Folder;

/// How often each handler ran, over every run of the service.
#[derive(Default)]
struct Runs {
    cancel: AtomicUsize,
    note: AtomicUsize,
}

/// The service on `stores`: `orders.cancel` (destructive, needs an approval) and `orders.note`
/// (a write), each counting its runs.
fn service(stores: &agent_surface_sqlite::SqliteStores, runs: &Arc<Runs>) -> (Service, Mount) {
    let service = ServiceBuilder::new()
        .stores(stores.bundle())
        .audit(Arc::new(stores.audit()))
        .authority(Policies::default_allow())
        .build();
    let (cancel, note) = (runs.clone(), runs.clone());
    service
        .registry
        .define("orders", move |t| {
            let cancel = cancel.clone();
            t.capability("cancel", "Cancel an order.")
                .effect(Effect::Destructive)
                .confirm(|i: &Value| format!("Cancel order {}.", i["order_id"]))
                .handler(move |_c: Ctx, i: Value| {
                    cancel.cancel.fetch_add(1, Ordering::SeqCst);
                    async move { Ok::<_, AgentSurfaceError>(i) }
                });
            let note = note.clone();
            t.capability("note", "Add a note to an order.").effect(Effect::Write).handler(move |_c: Ctx, i: Value| {
                let n = note.note.fetch_add(1, Ordering::SeqCst);
                async move { Ok::<_, AgentSurfaceError>(json!({"noteId": n, "text": i["text"]})) }
            });
        })
        .expect("valid");
    let mount = service.registry.mount("orders", "main").expect("mounted");
    (service, mount)
}

fn alice() -> InvokeOptions {
    InvokeOptions::new(Consumer::anonymous("alice"))
}

fn code(result: &InvokeResult) -> Option<ErrorCode> {
    result.error_payload().map(|p| p.code())
}

/// An approval asked before a restart is used once after it — the instance is mounted again
/// under a new registration id, and the engine binds evidence to the instance because the store
/// outlives the process — and a keyed write's retry after the restart replays its result.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_approval_and_a_result_outlive_a_restart() {
    let folder = Folder::new("service");
    let runs = Arc::new(Runs::default());
    let cancel = json!({"order_id": "A-7"});
    let (id, noted) = {
        let stores = open(&folder).await;
        let (service, _mount) = service(&stores, &runs);
        assert!(service.registry.wiring_warnings().is_empty(), "{:?}", service.registry.wiring_warnings());
        let asked = service
            .registry
            .invoke(InvokeRequest::new("orders.cancel", cancel.clone()).with_invocation_id("inv-1"), alice())
            .await;
        assert_eq!(code(&asked), Some(ErrorCode::ConfirmationRequired), "{asked:?}");
        let id = asked.error_payload().and_then(|p| p.detail("confirmationId")).and_then(Value::as_str).unwrap();
        let note = InvokeRequest::new("orders.note", json!({"text": "fragile"})).with_invocation_id("note-1");
        let noted = service.registry.invoke(note, alice()).await;
        assert!(noted.is_ok(), "{noted:?}");
        service.registry.dispose();
        (id.to_string(), noted)
    };

    let stores = open(&folder).await;
    let (service, _mount) = service(&stores, &runs);
    service.confirmations.approve(&id, &Identity::new("manager")).await.expect("still pending after the restart");
    let with = |invocation: &str| {
        InvokeRequest::new("orders.cancel", cancel.clone()).with_invocation_id(invocation).with_confirmation(&id)
    };
    let used = service.registry.invoke(with("inv-2"), alice()).await;
    assert!(used.is_ok(), "the approval given after the restart is used: {used:?}");
    let again = service.registry.invoke(with("inv-3"), alice()).await;
    assert_eq!(code(&again), Some(ErrorCode::ConfirmationInvalid), "and used once: {again:?}");
    assert_eq!(runs.cancel.load(Ordering::SeqCst), 1);

    let note = InvokeRequest::new("orders.note", json!({"text": "fragile"})).with_invocation_id("note-1");
    let replayed = service.registry.invoke(note, alice()).await;
    assert_eq!(replayed.output(), noted.output(), "the keyed retry replays the result stored before the restart");
    assert_eq!(runs.note.load(Ordering::SeqCst), 1);
}
