//! Natural idempotency keys (`CapabilityBuilder::idempotency_key`): calls whose typed input gives
//! the same key are one operation, whoever sends them and whether or not they carry an
//! invocation id; the key is admitted after authority, so a refused caller never sees another's
//! result.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use agent_surface_core::{AgentSurfaceError, Effect, ErrorCode, Phase, Retry};
use agent_surface_policy::{
    AuthorityDecision, CallInfo, ConfirmationConfig, ConfirmationEngine, Consumer, FnPolicy, Identity, Policies,
};
use agent_surface_registry::{Ctx, InvokeOptions, Registry, RegistryConfig, Unmet};
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Value, json};

use crate::support::*;

#[derive(Debug, Deserialize, JsonSchema)]
struct IssueRefund {
    order_id: String,
    amount_cents: u64,
}

struct Shop {
    registry: Registry,
    engine: Arc<ConfirmationEngine>,
    runs: Arc<AtomicUsize>,
    _mount: agent_surface_registry::Mount,
}

/// `refunds.issue` (keyed on the order, for everyone), `refunds.note` (keyed per principal),
/// `refunds.big` (keyed, gated); authority refuses `mallory`. Every execution gets a fresh
/// refund id, so a second execution shows.
fn shop() -> Shop {
    let clock = clock();
    let engine = Arc::new(ConfirmationEngine::new(ConfirmationConfig { clock: clock.clone(), ..Default::default() }));
    let deny_mallory = FnPolicy::new("no-mallory", |call: &CallInfo<'_>| {
        Ok(match call.consumer.identity() {
            Some(id) if id.subject == "mallory" => {
                AuthorityDecision::Deny { origin: agent_surface_core::details::Origin::Client }
            }
            _ => AuthorityDecision::Allow,
        })
    });
    let registry = Registry::new(RegistryConfig {
        authority: Some(Arc::new(Policies::default_allow().with_clock(clock.clone()).global(deny_mallory))),
        confirmation: Some(engine.clone()),
        ..config_with(&clock)
    });
    let runs = Arc::new(AtomicUsize::new(0));
    let (a, b, c) = (runs.clone(), runs.clone(), runs.clone());
    // The orders refunded so far: the handler adds to it, the precondition reads it.
    let refunded = Arc::new(std::sync::Mutex::new(std::collections::HashSet::<String>::new()));
    let (checks, records) = (refunded.clone(), refunded.clone());
    registry
        .define("refunds", move |t| {
            t.capability("issue", "Refund an order, once.")
                .effect(Effect::External)
                .idempotency_key(|i: &IssueRefund| i.order_id.clone())
                // Made false by the refund itself: a repeat must be answered before it.
                .precondition(move |_ctx: &Ctx, i: &IssueRefund| {
                    if checks.lock().unwrap().contains(&i.order_id) {
                        return Err(Unmet::new("The order is refunded already."));
                    }
                    Ok(())
                })
                .handler(move |_c: Ctx, i: IssueRefund| {
                    let n = a.fetch_add(1, Ordering::SeqCst) + 1;
                    records.lock().unwrap().insert(i.order_id.clone());
                    async move {
                        // Yield so that concurrent callers overlap with this one.
                        for _ in 0..5 {
                            tokio::task::yield_now().await;
                        }
                        Ok::<_, AgentSurfaceError>(
                            json!({"refundId": format!("R-{}-{n}", i.order_id), "cents": i.amount_cents}),
                        )
                    }
                });
            t.capability("note", "Note an order, once per user.")
                .effect(Effect::Write)
                .idempotency_key_per_principal(|i: &IssueRefund| i.order_id.clone())
                .handler(move |_c: Ctx, i: IssueRefund| {
                    let n = b.fetch_add(1, Ordering::SeqCst) + 1;
                    async move { Ok::<_, AgentSurfaceError>(json!({"noteId": format!("N-{}-{n}", i.order_id)})) }
                });
            t.capability("big", "Refund an order, once, with a person's approval.")
                .effect(Effect::External)
                .idempotency_key(|i: &IssueRefund| i.order_id.clone())
                .confirm(|i: &IssueRefund| format!("Refund {} cents on order {}.", i.amount_cents, i.order_id))
                .handler(move |_c: Ctx, i: IssueRefund| {
                    let n = c.fetch_add(1, Ordering::SeqCst) + 1;
                    async move { Ok::<_, AgentSurfaceError>(json!({"refundId": format!("R-{}-{n}", i.order_id)})) }
                });
        })
        .unwrap();
    let mount = registry.mount("refunds", "main").unwrap();
    Shop { registry, engine, runs, _mount: mount }
}

fn user(session: &str, subject: &str) -> InvokeOptions {
    InvokeOptions::new(Consumer::authenticated(session, Identity::new(subject)))
}

fn refund(capability: &str, order: &str, cents: u64) -> agent_surface_registry::InvokeRequest {
    call(capability, json!({"order_id": order, "amount_cents": cents}))
}

fn output(inv: &agent_surface_registry::Invocation) -> Value {
    inv.result.output().unwrap_or_else(|| panic!("expected ok, got {:?}", inv.result)).clone()
}

#[tokio::test]
async fn callers_without_ids_share_one_execution_per_key() {
    let s = shop();
    let first = s.registry.invoke_detailed(refund("refunds.issue", "A-1", 500), user("s-1", "alice")).await;
    let refund_id = output(&first)["refundId"].clone();
    assert_eq!(refund_id, "R-A-1-1");
    // Another session, another user, no invocation id: the same refund, not a second one.
    let again = s.registry.invoke_detailed(refund("refunds.issue", "A-1", 500), user("s-9", "bob")).await;
    assert_eq!(output(&again)["refundId"], refund_id);
    assert!(again.replayed, "answered from the record");
    assert_eq!(s.runs.load(Ordering::SeqCst), 1);
    // Another order is another operation.
    let other = s.registry.invoke_detailed(refund("refunds.issue", "A-2", 500), user("s-1", "alice")).await;
    assert_eq!(output(&other)["refundId"], "R-A-2-2");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_callers_of_one_key_join_one_execution() {
    let s = Arc::new(shop());
    let calls = (0..50).map(|n| {
        let s = s.clone();
        tokio::spawn(async move {
            let who = if n % 2 == 0 { "alice" } else { "bob" };
            let options = user(&format!("s-{n}"), who);
            s.registry.invoke_detailed(refund("refunds.issue", "A-7", 900), options).await
        })
    });
    let results = futures_util::future::join_all(calls).await;
    let ids: std::collections::HashSet<String> = results
        .into_iter()
        .map(|r| output(&r.expect("the call's task"))["refundId"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(ids.len(), 1, "one refund id: {ids:?}");
    assert_eq!(s.runs.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn the_same_key_with_another_input_is_a_conflict() {
    let s = shop();
    output(&s.registry.invoke_detailed(refund("refunds.issue", "A-1", 500), user("s-1", "alice")).await);
    let other = s.registry.invoke_detailed(refund("refunds.issue", "A-1", 700), user("s-1", "alice")).await;
    let p = assert_produced(&other, ErrorCode::InvocationConflict, Phase::Admission);
    // Not a reused id (the caller sent none): nothing it can send makes this run.
    assert_eq!(p.detail("reason"), Some(&json!("natural-key-used-by-different-request")));
    assert_eq!(p.retry(), Retry::No);
    assert!(!p.message().contains("invocationId") && p.message().contains("Do not repeat it"), "{}", p.message());
    assert!(!p.to_json().to_string().contains("500"), "the earlier request is not revealed");
    assert_eq!(s.runs.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn a_refused_caller_gets_its_refusal_never_the_stored_result() {
    let s = shop();
    output(&s.registry.invoke_detailed(refund("refunds.issue", "A-1", 500), user("s-1", "alice")).await);
    let refused = s.registry.invoke_detailed(refund("refunds.issue", "A-1", 500), user("s-6", "mallory")).await;
    let p = assert_produced(&refused, ErrorCode::NotAuthorized, Phase::Authority);
    assert!(!serde_json::to_string(&refused.result).unwrap().contains("R-A-1"), "{p:?}");
    // Also under an invocation id of its own, and joined to nobody: the refusal, every time.
    let keyed = refund("refunds.issue", "A-1", 500).with_invocation_id("m-1");
    let refused = s.registry.invoke_detailed(keyed, user("s-6", "mallory")).await;
    assert_produced(&refused, ErrorCode::NotAuthorized, Phase::Authority);
    assert_eq!(s.runs.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn a_precondition_the_first_run_made_false_does_not_refuse_the_repeat() {
    let s = shop();
    // The precondition holds for an order not refunded yet; the first run refunds it.
    let first = s.registry.invoke_detailed(refund("refunds.issue", "B-1", 100), user("s-1", "alice")).await;
    // Its repeat is answered from the record, before the precondition (now false) is asked.
    let again = s.registry.invoke_detailed(refund("refunds.issue", "B-1", 100), user("s-2", "alice")).await;
    assert_eq!(output(&again), output(&first));
    assert_eq!(s.runs.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn a_key_per_principal_separates_users() {
    let s = shop();
    let alice = output(&s.registry.invoke_detailed(refund("refunds.note", "A-1", 1), user("s-1", "alice")).await);
    let alice_again = output(&s.registry.invoke_detailed(refund("refunds.note", "A-1", 1), user("s-2", "alice")).await);
    let bob = output(&s.registry.invoke_detailed(refund("refunds.note", "A-1", 1), user("s-3", "bob")).await);
    assert_eq!(alice, alice_again, "one operation per user, across sessions");
    assert_ne!(alice, bob, "another user's key is another operation");
    assert_eq!(s.runs.load(Ordering::SeqCst), 2);
}

#[tokio::test]
async fn an_invocation_id_and_a_natural_key_together_run_once() {
    let s = shop();
    let keyed = refund("refunds.issue", "C-1", 300).with_invocation_id("inv-1");
    let first = output(&s.registry.invoke_detailed(keyed.clone(), user("s-1", "alice")).await);
    // The same id replays; another id for the same order is answered from the natural key.
    assert_eq!(output(&s.registry.invoke_detailed(keyed, user("s-1", "alice")).await), first);
    let other_id = refund("refunds.issue", "C-1", 300).with_invocation_id("inv-2");
    assert_eq!(output(&s.registry.invoke_detailed(other_id, user("s-1", "alice")).await), first);
    assert_eq!(s.runs.load(Ordering::SeqCst), 1);
}

/// A repeat of an approved refund that already ran is answered with the refund on record, not
/// asked to be approved again.
#[tokio::test]
async fn a_repeat_after_an_approved_run_is_answered_not_asked_again() {
    let s = shop();
    let asked = s.registry.invoke_detailed(refund("refunds.big", "D-1", 90_000), user("s-1", "alice")).await;
    let p = assert_produced(&asked, ErrorCode::ConfirmationRequired, Phase::Confirmation);
    assert_eq!(p.retry(), Retry::WithConfirmation);
    let id = p.detail("confirmationId").and_then(Value::as_str).unwrap().to_string();
    s.engine.approve(&id, &Identity::new("manager")).await.unwrap();
    // The model repeats the call (it cannot send the id back): the approval is presented, it runs.
    let ran = output(&s.registry.invoke_detailed(refund("refunds.big", "D-1", 90_000), user("s-1", "alice")).await);
    assert_eq!(s.runs.load(Ordering::SeqCst), 1);
    // Any later repeat, from any session: the refund on record.
    let later = s.registry.invoke_detailed(refund("refunds.big", "D-1", 90_000), user("s-2", "alice")).await;
    assert_eq!(output(&later), ran);
    assert_eq!(s.runs.load(Ordering::SeqCst), 1);
}

#[test]
fn the_key_function_must_take_the_handler_input() {
    let registry = Registry::new(RegistryConfig::default());
    let err = registry
        .define("refunds", |t| {
            t.capability("issue", "Refund an order.").idempotency_key(|i: &Value| i["order_id"].to_string()).handler(
                |_c: Ctx, i: IssueRefund| async move { Ok::<_, AgentSurfaceError>(json!({"c": i.amount_cents})) },
            );
        })
        .unwrap_err();
    assert!(err.problem().contains("idempotency key"), "{err}");
}

#[tokio::test]
async fn a_panicking_key_function_fails_closed() {
    let registry = Registry::new(RegistryConfig::default());
    let runs = Arc::new(AtomicUsize::new(0));
    let counted = runs.clone();
    registry
        .define("refunds", move |t| {
            t.capability("issue", "Refund an order.")
                .idempotency_key(|_: &IssueRefund| -> String { panic!("key bug") })
                .handler(move |_c: Ctx, _i: IssueRefund| {
                    counted.fetch_add(1, Ordering::SeqCst);
                    async move { Ok::<_, AgentSurfaceError>(json!({})) }
                });
        })
        .unwrap();
    let _mount = registry.mount("refunds", "main").unwrap();
    let inv = registry.invoke_detailed(refund("refunds.issue", "A-1", 1), consumer("c")).await;
    assert_produced(&inv, ErrorCode::ExecutionFailed, Phase::Admission);
    assert_eq!(runs.load(Ordering::SeqCst), 0);
}

#[derive(Debug, Deserialize, JsonSchema)]
struct Lend {
    copy_id: String,
}

/// `loans.lend`, keyed on the copy: its precondition wants the copy on the shelf, and its handler
/// refuses a copy set aside with the author's own words (after it ran: a result to keep).
fn library() -> (Registry, Arc<std::sync::Mutex<std::collections::HashSet<String>>>, Arc<AtomicUsize>) {
    let shelf = Arc::new(std::sync::Mutex::new(std::collections::HashSet::<String>::new()));
    let runs = Arc::new(AtomicUsize::new(0));
    let r = Registry::new(RegistryConfig::default());
    let (on_shelf, counted) = (shelf.clone(), runs.clone());
    r.define("loans", move |t| {
        t.capability("lend", "Lend a copy, once.")
            .idempotency_key(|i: &Lend| i.copy_id.clone())
            .precondition(move |_: &Ctx, i: &Lend| {
                if on_shelf.lock().unwrap().contains(&i.copy_id) {
                    Ok(())
                } else {
                    Err(Unmet::new("The copy is not on the shelf. List the copies to find one.").reason("not-on-shelf"))
                }
            })
            .handler(move |_: Ctx, i: Lend| {
                let n = counted.fetch_add(1, Ordering::SeqCst) + 1;
                async move {
                    if i.copy_id.starts_with("reserved-") {
                        return Err(AgentSurfaceError::precondition_failed(
                            "This copy is set aside for a reading room.",
                        ));
                    }
                    Ok::<_, AgentSurfaceError>(json!({"loan": format!("L-{}-{n}", i.copy_id)}))
                }
            })
    })
    .unwrap();
    (r, shelf, runs)
}

#[tokio::test]
async fn a_call_refused_before_its_handler_leaves_the_key_free() {
    let (r, shelf, runs) = library();
    let _m = r.mount("loans", "main").unwrap();
    let lend = || call("loans.lend", json!({"copy_id": "C-1"}));
    let refused = r.invoke_detailed(lend(), user("s-1", "alice")).await;
    let p = assert_produced(&refused, ErrorCode::PreconditionFailed, Phase::Input);
    assert!(p.not_processed());
    assert_eq!(p.retry(), Retry::WithChanges);
    // The state changes, as the answer told the agent to bring about: the same input now runs,
    // rather than being answered the refusal from the key's record for the whole window.
    shelf.lock().unwrap().insert("C-1".into());
    let lent = r.invoke_detailed(lend(), user("s-1", "alice")).await;
    assert!(!lent.replayed);
    assert_eq!(output(&lent)["loan"], "L-C-1-1");
    // From then on the key is the loan's.
    let again = r.invoke_detailed(lend(), user("s-2", "alice")).await;
    assert!(again.replayed);
    assert_eq!(output(&again)["loan"], "L-C-1-1");
    assert_eq!(runs.load(Ordering::SeqCst), 1);
}

/// `pay.charge`, keyed on the order, idempotent or not: its first run fails with `first` (a
/// transient failure of its own, or an upstream's refusal met after its effect); later runs
/// succeed. Every run is counted.
fn flaky_charge(
    idempotent: bool,
    first: fn() -> AgentSurfaceError,
) -> (Registry, agent_surface_registry::Mount, Arc<AtomicUsize>) {
    let runs = Arc::new(AtomicUsize::new(0));
    let r = Registry::new(RegistryConfig::default());
    let counted = runs.clone();
    r.define("pay", move |t| {
        let c = t.capability("charge", "Charge an order, once.").effect(Effect::External);
        let c = if idempotent { c.idempotent() } else { c };
        c.idempotency_key(|i: &Lend| i.copy_id.clone()).handler(move |_: Ctx, i: Lend| {
            let n = counted.fetch_add(1, Ordering::SeqCst) + 1;
            async move {
                if n == 1 {
                    return Err(first());
                }
                Ok::<_, AgentSurfaceError>(json!({"charge": format!("{}-{n}", i.copy_id)}))
            }
        })
    })
    .unwrap();
    let mount = r.mount("pay", "main").unwrap();
    (r, mount, runs)
}

/// The card was charged, then the receipt service answered 503, and the handler returned that
/// with `?`.
fn charged_then_refused() -> AgentSurfaceError {
    AgentSurfaceError::internal(agent_surface_registry::host_errors::UpstreamStatus::new(503))
}

/// The handler's own word: nothing took effect, try again in 300 ms.
fn refused_before_any_effect() -> AgentSurfaceError {
    AgentSurfaceError::transient(Duration::from_millis(300))
}

/// A transient failure tells the agent to make the same call again after the delay, and the key
/// is left free for that repeat rather than answering the failure again for the whole window (and
/// telling the agent, falsely, to retry). A write that is not idempotent gets one only on its
/// handler's word; a host error after its effect (here a 503 once the card was charged) is its
/// unknown outcome, kept under the key, so the repeat does not charge the card again.
#[tokio::test]
async fn a_transient_failure_frees_the_key_and_a_write_s_host_error_keeps_it() {
    let charge = || call("pay.charge", json!({"copy_id": "o-3"}));
    for (idempotent, first) in [
        (true, refused_before_any_effect as fn() -> _),
        (true, charged_then_refused),
        (false, refused_before_any_effect),
    ] {
        let (r, _m, runs) = flaky_charge(idempotent, first);
        let failed = r.invoke_detailed(charge(), user("s-1", "alice")).await;
        let p = assert_produced(&failed, ErrorCode::ExecutionFailed, Phase::Execute);
        assert_eq!(p.retry(), Retry::AfterDelay, "idempotent: {idempotent}");
        let charged = r.invoke_detailed(charge(), user("s-1", "alice")).await;
        assert!(!charged.replayed, "run again, not answered the failure: {:?}", charged.result);
        assert_eq!(output(&charged)["charge"], "o-3-2");
        let again = r.invoke_detailed(charge(), user("s-2", "bob")).await;
        assert!(again.replayed);
        assert_eq!(runs.load(Ordering::SeqCst), 2);
    }

    let (r, _m, runs) = flaky_charge(false, charged_then_refused);
    let failed = r.invoke_detailed(charge(), user("s-1", "alice")).await;
    let p = assert_produced(&failed, ErrorCode::ExecutionFailed, Phase::Execute);
    assert_eq!(p.detail("reason").and_then(|r| r.as_str()), Some("outcome-unknown"), "{}", p.message());
    assert_eq!(p.retry(), Retry::No);
    let again = r.invoke_detailed(charge(), user("s-2", "bob")).await;
    assert!(again.replayed, "answered from the key's record: {:?}", again.result);
    assert_eq!(again.result.error_payload().and_then(|p| p.detail("reason").cloned()), Some(json!("outcome-unknown")));
    assert_eq!(runs.load(Ordering::SeqCst), 1, "the card was charged once");
}

/// An idempotent capability unmounted while its handler ran is answered `COMPONENT_UNMOUNTED`
/// (`after-refresh`): refresh, then make the call again. Once it is mounted again that repeat runs;
/// the key does not answer it the unmount for the whole window.
#[tokio::test]
async fn a_call_unmounted_mid_flight_leaves_the_key_free_for_the_repeat() {
    let runs = Arc::new(AtomicUsize::new(0));
    let r = Registry::new(RegistryConfig::default());
    let counted = runs.clone();
    r.define("pay", move |t| {
        t.capability("settle", "Settle an order, once.")
            .effect(Effect::Write)
            .idempotent()
            .idempotency_key(|i: &Lend| i.copy_id.clone())
            .handler(move |_: Ctx, i: Lend| {
                let n = counted.fetch_add(1, Ordering::SeqCst) + 1;
                async move {
                    if n == 1 {
                        std::future::pending::<()>().await;
                    }
                    Ok::<_, AgentSurfaceError>(json!({"settled": format!("{}-{n}", i.copy_id)}))
                }
            })
    })
    .unwrap();
    let m = r.mount("pay", "main").unwrap();
    let settle = || call("pay.settle", json!({"copy_id": "o-5"}));
    let first = r.invoke_detailed(settle(), user("s-1", "alice"));
    let unmount = async {
        until(&runs, 1).await;
        drop(m);
    };
    let (first, ()) = tokio::join!(first, unmount);
    let p = assert_produced(&first, ErrorCode::ComponentUnmounted, Phase::Execute);
    assert_eq!((p.retry(), p.detail("phase")), (Retry::AfterRefresh, Some(&json!("mid-flight"))));
    let _m = r.mount("pay", "main").unwrap();
    let again = r.invoke_detailed(settle(), user("s-1", "alice")).await;
    assert!(!again.replayed, "run again, not answered the unmount: {:?}", again.result);
    assert_eq!(output(&again)["settled"], "o-5-2");
}

#[tokio::test]
async fn a_replay_from_the_key_s_record_keeps_the_author_s_words() {
    let (r, shelf, runs) = library();
    let _m = r.mount("loans", "main").unwrap();
    shelf.lock().unwrap().insert("reserved-7".into());
    let lend = || call("loans.lend", json!({"copy_id": "reserved-7"}));
    let first = r.invoke_detailed(lend(), user("s-1", "alice")).await;
    let p = assert_produced(&first, ErrorCode::PreconditionFailed, Phase::Execute);
    assert!(p.message().starts_with("This copy is set aside for a reading room."), "{}", p.message());
    let again = r.invoke_detailed(lend(), user("s-2", "bob")).await;
    assert!(again.replayed);
    let replayed = again.result.error_payload().unwrap();
    assert_eq!(replayed.message(), p.message());
    assert_eq!(replayed.retry(), p.retry());
    assert_eq!(runs.load(Ordering::SeqCst), 1);
}

/// Waits (yielding) until `count` reaches `n`; panics after two seconds, so that a regression fails
/// rather than hangs.
async fn until(count: &AtomicUsize, n: usize) {
    let waited = tokio::time::timeout(Duration::from_secs(2), async {
        while count.load(Ordering::SeqCst) < n {
            tokio::task::yield_now().await;
        }
    });
    waited.await.unwrap_or_else(|_| panic!("{n} checks never started ({} did)", count.load(Ordering::SeqCst)));
}

/// `loans.hold`, keyed on the copy for everyone: its check waits until `go` is notified, then
/// refuses `alice` and lets anyone else through. `started` counts the checks that began.
fn held_copies(go: Arc<tokio::sync::Notify>, started: Arc<AtomicUsize>, runs: Arc<AtomicUsize>) -> Registry {
    let r = Registry::new(RegistryConfig::default());
    r.define("loans", move |t| {
        t.capability("hold", "Hold a copy, once.")
            .idempotency_key(|i: &Lend| i.copy_id.clone())
            .precondition_async(move |caller: agent_surface_registry::Caller, _: &Lend| {
                started.fetch_add(1, Ordering::SeqCst);
                let go = go.clone();
                async move {
                    go.notified().await;
                    match caller.0.identity() {
                        Some(id) if id.subject == "alice" => Err(Unmet::new("Alice has too many holds.")),
                        _ => Ok(()),
                    }
                }
            })
            .handle(move |i: Lend| {
                let n = runs.fetch_add(1, Ordering::SeqCst) + 1;
                async move { Ok::<_, AgentSurfaceError>(json!({"hold": format!("H-{}-{n}", i.copy_id)})) }
            })
    })
    .unwrap();
    r
}

/// Bob joins Alice's call of the same key while her check runs; her check refuses her. That
/// refusal is hers: Bob is not answered it, he meets his own check (which lets him through).
#[tokio::test]
async fn a_follower_is_not_answered_the_refusal_of_the_call_it_joined() {
    let (go, started, runs) =
        (Arc::new(tokio::sync::Notify::new()), Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let r = held_copies(go.clone(), started.clone(), runs.clone());
    let _m = r.mount("loans", "main").unwrap();
    let hold = || call("loans.hold", json!({"copy_id": "C-7"}));
    let alice = r.invoke_detailed(hold(), user("s-1", "alice"));
    let bob = async {
        // Bob arrives while Alice's check waits: he joins her call.
        until(&started, 1).await;
        let bob = r.invoke_detailed(hold(), user("s-2", "bob"));
        let release = async {
            for _ in 0..20 {
                tokio::task::yield_now().await;
            }
            go.notify_waiters();
            // Bob's own check, once he leads the key.
            until(&started, 2).await;
            go.notify_waiters();
        };
        tokio::join!(bob, release).0
    };
    let (alice, bob) = tokio::join!(alice, bob);
    let p = assert_produced(&alice, ErrorCode::PreconditionFailed, Phase::Input);
    assert!(p.message().starts_with("Alice has too many holds."));
    assert!(!bob.joined && !bob.replayed, "{bob:?}");
    assert_eq!(output(&bob)["hold"], "H-C-7-1");
    assert_eq!(runs.load(Ordering::SeqCst), 1);
}

/// A call dropped before its handler started leaves its key free too (its record is released,
/// not kept as `CANCELLED`).
#[tokio::test]
async fn a_call_dropped_before_its_handler_leaves_the_key_free() {
    let (go, started, runs) =
        (Arc::new(tokio::sync::Notify::new()), Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let r = held_copies(go.clone(), started.clone(), runs.clone());
    let _m = r.mount("loans", "main").unwrap();
    let hold = || call("loans.hold", json!({"copy_id": "C-8"}));
    // Bob's call waits in its check and is dropped there (the client went away).
    let dropped = tokio::time::timeout(Duration::from_millis(30), r.invoke_detailed(hold(), user("s-2", "bob"))).await;
    assert!(dropped.is_err());
    settle().await;
    // The same input again: it runs, rather than being answered `CANCELLED` from the key's record.
    let again = r.invoke_detailed(hold(), user("s-2", "bob"));
    let release = async {
        until(&started, 2).await;
        go.notify_waiters();
    };
    let (again, ()) = tokio::join!(again, release);
    assert!(!again.replayed, "{again:?}");
    assert_eq!(output(&again)["hold"], "H-C-8-1");
}

/// A call with an invocation id and a natural key, refused before its handler: its id's record
/// keeps the refusal (the agent retries with a fresh id, as the answer says), its key is free.
#[tokio::test]
async fn with_an_invocation_id_the_refusal_is_kept_under_the_id_and_the_key_is_freed() {
    let (r, shelf, runs) = library();
    let _m = r.mount("loans", "main").unwrap();
    let lend = || call("loans.lend", json!({"copy_id": "C-5"}));
    let refused = r.invoke_detailed(lend().with_invocation_id("i-1"), user("s-1", "alice")).await;
    assert_produced(&refused, ErrorCode::PreconditionFailed, Phase::Input);
    shelf.lock().unwrap().insert("C-5".into());
    let same_id = r.invoke_detailed(lend().with_invocation_id("i-1"), user("s-1", "alice")).await;
    assert!(same_id.replayed);
    assert_eq!(same_id.result.code(), Some(ErrorCode::PreconditionFailed));
    let fresh = r.invoke_detailed(lend().with_invocation_id("i-2"), user("s-1", "alice")).await;
    assert_eq!(output(&fresh)["loan"], "L-C-5-1");
    assert_eq!(runs.load(Ordering::SeqCst), 1);
}

/// Bob's call carries an invocation id and joins Carol's call of the same key; Bob's caller
/// cancels while he waits. His answer is an unknown outcome, and it is not kept under his id:
/// nothing ran for his id, and the operation his key names may yet succeed. The same id repeated
/// is answered from the key's record, Carol's result, not the unknown outcome for the window.
#[tokio::test]
async fn a_follower_that_stops_waiting_leaves_its_invocation_id_free() {
    let (go, started, runs) =
        (Arc::new(tokio::sync::Notify::new()), Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let r = held_copies(go.clone(), started.clone(), runs.clone());
    let _m = r.mount("loans", "main").unwrap();
    let hold = || call("loans.hold", json!({"copy_id": "C-9"}));
    let carol = r.invoke_detailed(hold(), user("s-3", "carol"));
    let bob = async {
        until(&started, 1).await;
        let token = tokio_util::sync::CancellationToken::new();
        let options = user("s-2", "bob").with_cancellation(token.clone());
        let bob = r.invoke_detailed(hold().with_invocation_id("b-1"), options);
        let leave = async {
            for _ in 0..20 {
                tokio::task::yield_now().await;
            }
            token.cancel();
        };
        let (bob, ()) = tokio::join!(bob, leave);
        go.notify_waiters();
        bob
    };
    let (carol, bob) = tokio::join!(carol, bob);
    assert_eq!(output(&carol)["hold"], "H-C-9-1");
    assert_eq!(bob.result.code(), Some(ErrorCode::ExecutionFailed), "{bob:?}");
    assert_eq!(bob.result.error_payload().unwrap().detail("reason"), Some(&json!("outcome-unknown")));
    let again = r.invoke_detailed(hold().with_invocation_id("b-1"), user("s-2", "bob")).await;
    assert!(again.replayed, "{again:?}");
    assert_eq!(output(&again)["hold"], "H-C-9-1");
    assert_eq!(runs.load(Ordering::SeqCst), 1);
}

/// `loans.return`, keyed on the copy for everyone: its handler waits until `go` is notified (when
/// given one), then refuses anyone but the borrower, `bob`, as a handler that checks ownership does.
fn returns(go: Option<Arc<tokio::sync::Notify>>, runs: Arc<AtomicUsize>) -> Registry {
    let r = Registry::new(RegistryConfig::default());
    r.define("loans", move |t| {
        t.capability("return", "Return a borrowed copy, once.").idempotency_key(|i: &Lend| i.copy_id.clone()).handler(
            move |c: Ctx, i: Lend| {
                let n = runs.fetch_add(1, Ordering::SeqCst) + 1;
                let borrower = c.consumer().identity().is_some_and(|id| id.subject == "bob");
                let go = go.clone();
                async move {
                    if let Some(go) = go {
                        go.notified().await;
                    }
                    if !borrower {
                        return Err(AgentSurfaceError::not_authorized(agent_surface_core::details::Origin::Server));
                    }
                    Ok::<_, AgentSurfaceError>(json!({"returned": i.copy_id, "run": n}))
                }
            },
        )
    })
    .unwrap();
    r
}

/// A handler's refusal of its caller (`NOT_AUTHORIZED`, `NOT_AUTHENTICATED`) is that caller's: it
/// is not kept under a key that spans callers, so the borrower, calling with the same input after
/// someone else was refused, is let through rather than answered the other caller's refusal.
#[tokio::test]
async fn a_handler_s_refusal_of_its_caller_is_not_another_caller_s_answer() {
    let runs = Arc::new(AtomicUsize::new(0));
    let r = returns(None, runs.clone());
    let _m = r.mount("loans", "main").unwrap();
    let give_back = || call("loans.return", json!({"copy_id": "c-7"}));
    let refused = r.invoke_detailed(give_back(), user("s-1", "alice")).await;
    assert_produced(&refused, ErrorCode::NotAuthorized, Phase::Execute);
    let returned = r.invoke_detailed(give_back(), user("s-2", "bob")).await;
    assert!(!returned.replayed, "{:?}", returned.result);
    assert_eq!(output(&returned), json!({"returned": "c-7", "run": 2}));
    // What ran is kept: the repeat, whoever sends it, is answered the borrower's result.
    let repeat = r.invoke_detailed(give_back(), user("s-1", "alice")).await;
    assert!(repeat.replayed);
    assert_eq!(output(&repeat), json!({"returned": "c-7", "run": 2}));
    assert_eq!(runs.load(Ordering::SeqCst), 2);
}

/// A caller that joined a call in flight under the key is not answered the refusal its handler gave
/// that call's caller: it is admitted under the key anew, and its own call runs. (One thread, as
/// the test of a refusal before the handler: Bob's admission, which the memory store answers at
/// once, is made while Alice's handler waits, so he joins her call before it ends.)
#[tokio::test]
async fn a_follower_is_not_answered_the_handler_s_refusal_of_the_caller_it_joined() {
    let (go, runs) = (Arc::new(tokio::sync::Notify::new()), Arc::new(AtomicUsize::new(0)));
    let r = returns(Some(go.clone()), runs.clone());
    let _m = r.mount("loans", "main").unwrap();
    let give_back = || call("loans.return", json!({"copy_id": "c-8"}));
    let alice = r.invoke_detailed(give_back(), user("s-1", "alice"));
    let bob = async {
        // Bob arrives while Alice's handler waits: he joins her call.
        until(&runs, 1).await;
        let bob = r.invoke_detailed(give_back(), user("s-2", "bob"));
        let release = async {
            for _ in 0..20 {
                tokio::task::yield_now().await;
            }
            go.notify_one();
            // Bob's own run, once he leads the key.
            until(&runs, 2).await;
            go.notify_one();
        };
        tokio::join!(bob, release).0
    };
    let (alice, bob) = tokio::join!(alice, bob);
    assert_produced(&alice, ErrorCode::NotAuthorized, Phase::Execute);
    assert_eq!(output(&bob), json!({"returned": "c-8", "run": 2}), "{:?}", bob.result);
    assert!(!bob.joined && !bob.replayed);
}

/// A natural key the store cannot admit, after the call's invocation id was admitted: the answer
/// is `store-unavailable` (the same id again, never a new one), so the id's record is released,
/// not kept with that answer: the same id then runs, rather than replaying "try again".
#[tokio::test]
async fn a_natural_key_the_store_cannot_admit_leaves_the_id_free() {
    let store = Arc::new(crate::leases::LeasingStore::default());
    let clock = clock();
    let registry = Registry::new(RegistryConfig { idempotency: store.clone(), ..config_with(&clock) });
    let runs = Arc::new(AtomicUsize::new(0));
    let counted = runs.clone();
    registry
        .define("refunds", move |t| {
            t.capability("issue", "Refund an order, once.")
                .effect(Effect::External)
                .idempotency_key(|i: &IssueRefund| i.order_id.clone())
                .handler(move |_c: Ctx, _i: IssueRefund| {
                    counted.fetch_add(1, Ordering::SeqCst);
                    async move { Ok::<_, AgentSurfaceError>(json!({"refunded": true})) }
                });
        })
        .unwrap();
    let _mount = registry.mount("refunds", "main").unwrap();
    // The id's admission is the first, the key's the second.
    store.fail_admission.store(2, Ordering::SeqCst);
    let request = refund("refunds.issue", "A-1", 100).with_invocation_id("refund-1");
    let inv = registry.invoke_detailed(request.clone(), consumer("c")).await;
    let p = assert_produced(&inv, ErrorCode::ExecutionFailed, Phase::Admission);
    assert_eq!((p.retry(), p.detail("reason")), (Retry::AfterDelay, Some(&json!("store-unavailable"))));
    assert_eq!(runs.load(Ordering::SeqCst), 0);
    let again = registry.invoke_detailed(request, consumer("c")).await;
    assert!(!again.replayed, "the id's record was released, not kept with the refusal");
    assert_eq!(again.result.output(), Some(&json!({"refunded": true})), "{:?}", again.result);
    assert_eq!(runs.load(Ordering::SeqCst), 1);
}
