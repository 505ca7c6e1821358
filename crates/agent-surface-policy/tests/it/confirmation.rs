//! The confirmation store and engine: the order of the consume checks, retention, eviction,
//! withdrawal, single use under contention, the canonical input hash, and a model check of the
//! engine over random interleavings.

use std::sync::Arc;
use std::time::Duration;

use agent_surface_core::details::{ConfirmationInvalidReason, Origin};
use agent_surface_core::{Effect, SafeText, Timestamp};
use agent_surface_policy::{
    ApprovalError, CallInfo, Clock, ConfirmationConfig, ConfirmationDecision, ConfirmationEngine, ConfirmationGate,
    ConfirmationRecord, ConfirmationStore, Consumer, Identity, ManualClock, MemoryConfirmationStore,
    MemoryConfirmationStoreConfig, Quorum, Scope,
    confirmation::{
        ApprovalVerdict, ConfirmationBinding, ConfirmationState, Consumed, Decided, Mismatch, Rejection, RelayKey,
    },
    idempotency::Fingerprint,
};
use futures_util::FutureExt;
use proptest::prelude::*;
use serde_json::{Value, json};

fn at(ms: u64) -> Timestamp {
    Timestamp::from_unix_millis(1_000_000 + ms)
}

fn binding(consumer: &str, input: Value) -> ConfirmationBinding {
    ConfirmationBinding {
        consumer_key: consumer.into(),
        capability: "orders.refund".into(),
        registration_id: "r-1".into(),
        instance_id: "main".into(),
        input_hash: Fingerprint::of(&input),
    }
}

fn record(id: &str, binding: ConfirmationBinding, created: u64, ttl: u64) -> ConfirmationRecord {
    ConfirmationRecord::pending(
        id.into(),
        binding,
        Some("alice".into()),
        "Refund 42 EUR.".into(),
        Effect::External,
        Origin::Client,
        at(created),
        at(created + ttl),
    )
}

fn sync<T>(f: futures_util::future::BoxFuture<'_, T>) -> T {
    f.now_or_never().expect("the memory store answers at once")
}

fn store(capacity: usize, retention_ms: u64) -> MemoryConfirmationStore {
    MemoryConfirmationStore::new(MemoryConfirmationStoreConfig {
        capacity,
        retention: Duration::from_millis(retention_ms),
        ..Default::default()
    })
}

#[test]
fn consume_checks_the_binding_before_the_state() {
    let s = store(10, 0);
    let b = binding("session-1", json!({"amount": 42}));
    sync(s.insert(record("c-1", b.clone(), 0, 100), at(0))).unwrap();
    assert!(sync(s.insert(record("c-1", b.clone(), 0, 100), at(0))).is_err(), "ids are never reused");

    // Pending: the record comes back, to repeat the request.
    let Ok(Err(Rejection::Pending(pending))) = sync(s.consume("c-1", &b, at(1))) else { panic!() };
    assert_eq!(pending.id, "c-1");

    assert_eq!(sync(s.decide("c-1", ApprovalVerdict::Approve, "alice", at(1))).unwrap(), Decided::SelfApproval);
    assert_eq!(sync(s.decide("c-1", ApprovalVerdict::Approve, "session-1", at(1))).unwrap(), Decided::SelfApproval);
    assert_eq!(sync(s.decide("c-1", ApprovalVerdict::Approve, "bob", at(1))).unwrap(), Decided::Done);

    let other = binding("session-2", json!({"amount": 43}));
    let Ok(Err(Rejection::Mismatch(m))) = sync(s.consume("c-1", &other, at(2))) else { panic!() };
    assert_eq!(m, Mismatch { consumer: true, input: true, ..Mismatch::default() });
    assert_eq!(m.to_string(), "consumer, input");

    assert_eq!(sync(s.consume("c-1", &b, at(2))).unwrap().map(|c| c.approved_by), Ok("bob".to_string()));
    let state = sync(s.get("c-1", at(2))).unwrap().unwrap().state;
    assert_eq!(state, ConfirmationState::Consumed { approved_by: "bob".into() });
    assert_eq!(sync(s.consume("c-1", &b, at(3))).unwrap(), Err(Rejection::Consumed));
    // Another call's evidence reveals nothing about its state: still a mismatch.
    assert!(matches!(sync(s.consume("c-1", &other, at(3))).unwrap(), Err(Rejection::Mismatch(_))));
    assert_eq!(sync(s.consume("c-404", &b, at(3))).unwrap(), Err(Rejection::Unknown));
}

#[test]
fn expiry_retention_and_withdrawal() {
    let s = store(10, 1_000);
    let b = binding("session-1", json!(1));
    for (id, created) in [("approved", 0), ("denied", 0), ("consumed", 0), ("withdrawn", 0), ("pending", 0)] {
        sync(s.insert(record(id, b.clone(), created, 100), at(created))).unwrap();
    }
    sync(s.decide("approved", ApprovalVerdict::Approve, "bob", at(1))).unwrap();
    sync(s.decide("denied", ApprovalVerdict::Deny, "alice", at(1))).unwrap();
    sync(s.decide("consumed", ApprovalVerdict::Approve, "bob", at(1))).unwrap();
    sync(s.consume("consumed", &b, at(2))).unwrap().unwrap();
    assert_eq!(sync(s.withdraw("withdrawn", at(2))).unwrap(), Some(ConfirmationState::Withdrawn));
    assert_eq!(sync(s.withdraw("denied", at(2))).unwrap(), Some(ConfirmationState::Denied { by: "alice".into() }));
    assert_eq!(sync(s.withdraw("nothing", at(2))).unwrap(), None);

    // Past expiry, within retention: final states are still reported as they are.
    let check = |id: &str, now| sync(s.consume(id, &b, now)).unwrap().err();
    assert_eq!(check("approved", at(100)), Some(Rejection::Expired));
    assert_eq!(check("pending", at(100)), Some(Rejection::Expired));
    assert_eq!(check("withdrawn", at(100)), Some(Rejection::Expired));
    assert_eq!(check("denied", at(100)), Some(Rejection::Denied));
    assert_eq!(check("consumed", at(100)), Some(Rejection::Consumed));
    assert_eq!(sync(s.decide("pending", ApprovalVerdict::Approve, "bob", at(100))).unwrap(), Decided::Expired);
    // Past retention: gone.
    assert_eq!(check("consumed", at(1_100)), Some(Rejection::Unknown));
    assert!(s.is_empty());
}

#[test]
fn eviction_drops_the_oldest_record_and_never_admits_a_call() {
    let s = store(3, 0);
    let b = binding("session-1", json!(1));
    for (i, id) in ["a", "b", "c", "d"].into_iter().enumerate() {
        sync(s.insert(record(id, b.clone(), i as u64, 1_000), at(i as u64))).unwrap();
        sync(s.decide(id, ApprovalVerdict::Approve, "bob", at(i as u64))).unwrap();
    }
    assert_eq!(s.len(), 3);
    assert_eq!(sync(s.consume("a", &b, at(5))).unwrap(), Err(Rejection::Unknown));
    assert!(sync(s.consume("d", &b, at(5))).unwrap().is_ok());
    assert!(sync(store(0, 0).insert(record("x", b, 0, 1), at(0))).is_err());
}

/// Ten thousand requests by anyone (invented consumer keys cost nothing) do not evict another
/// consumer's approved evidence: a full store drops requests nobody approved first.
#[test]
fn a_flood_does_not_evict_approved_evidence() {
    let s = store(100, 0);
    let victim = binding("session-victim", json!({"orderId": "A-1"}));
    sync(s.insert(record("approved", victim.clone(), 0, 1_000_000), at(0))).unwrap();
    sync(s.decide("approved", ApprovalVerdict::Approve, "manager", at(0))).unwrap();
    for i in 0..10_000u64 {
        let flood = binding(&format!("http-anonymous:s{i}"), json!(i));
        sync(s.insert(record(&format!("flood-{i}"), flood, 1, 1_000_000), at(1))).unwrap();
        assert!(s.len() <= 100);
    }
    assert!(sync(s.consume("approved", &victim, at(2))).unwrap().is_ok(), "the approved evidence survived the flood");
}

/// A consumer at its quota drops its own oldest record, never another consumer's.
#[test]
fn one_consumer_cannot_push_out_anothers_requests() {
    let s = MemoryConfirmationStore::new(MemoryConfirmationStoreConfig {
        capacity: 1_000,
        per_consumer: 5,
        retention: Duration::ZERO,
    });
    let victim = binding("session-victim", json!(1));
    sync(s.insert(record("pending", victim.clone(), 0, 1_000_000), at(0))).unwrap();
    let flood = binding("session-flood", json!(2));
    for i in 0..50u64 {
        sync(s.insert(record(&format!("f-{i}"), flood.clone(), 1, 1_000_000), at(1))).unwrap();
    }
    assert_eq!(s.len(), 6, "the flood holds its quota of 5, the victim its 1");
    assert!(sync(s.get("pending", at(2))).unwrap().is_some(), "the victim's request is still there");
    assert!(sync(s.get("f-49", at(2))).unwrap().is_some());
    assert!(sync(s.get("f-44", at(2))).unwrap().is_none(), "the flood's oldest went first");
}

/// The relays of a memory store live and die with their records: eviction (the store full, a
/// consumer at its quota) and retention drop a record's relay too, so the memory never
/// outgrows the records; an approved record outlives a flood, and so does its relay.
#[test]
fn relays_are_dropped_with_their_records() {
    let config =
        |capacity, per_consumer| MemoryConfirmationStoreConfig { capacity, per_consumer, retention: Duration::ZERO };
    let relay = |s: &MemoryConfirmationStore, id: &str, b: &ConfirmationBinding| {
        sync(s.insert(record(id, b.clone(), 0, 1_000), at(0))).unwrap();
        sync(s.remember_relayed(&RelayKey::of(b), id, at(0))).unwrap();
    };
    let relayed =
        |s: &MemoryConfirmationStore, b: &ConfirmationBinding, now| sync(s.relayed(&RelayKey::of(b), at(now))).unwrap();

    let s = MemoryConfirmationStore::new(config(3, 1_000));
    let approved = binding("session-a", json!("approved"));
    relay(&s, "approved", &approved);
    sync(s.decide("approved", ApprovalVerdict::Approve, "bob", at(0))).unwrap();
    // A flood from other consumers fills the store, one relay per record.
    let flood: Vec<ConfirmationBinding> = (0..6).map(|i| binding(&format!("session-{i}"), json!(i))).collect();
    for (i, b) in flood.iter().enumerate() {
        relay(&s, &format!("f-{i}"), b);
    }
    assert_eq!((s.len(), s.relays()), (3, 3), "one relay per held record, none for a dropped one");
    assert_eq!(relayed(&s, &approved, 1).as_deref(), Some("approved"), "approved evidence and its relay stay");
    assert_eq!(relayed(&s, &flood[5], 1).as_deref(), Some("f-5"));
    for b in &flood[..4] {
        assert_eq!(relayed(&s, b, 1), None, "an evicted record's relay is gone with it");
    }
    // Past expiry plus retention nothing is relayed, and the relays are dropped with the records.
    assert_eq!(relayed(&s, &approved, 1_000), None);
    assert_eq!(relayed(&s, &flood[5], 1_000), None);
    assert_eq!((s.len(), s.relays()), (0, 0));

    // A consumer at its quota drops its own oldest record, and that record's relay.
    let s = MemoryConfirmationStore::new(config(100, 1));
    let own = |i: u64| binding("session-1", json!({"own": i}));
    relay(&s, "own-1", &own(1));
    relay(&s, "own-2", &own(2));
    assert_eq!(relayed(&s, &own(1), 1), None, "the consumer's oldest record went, with its relay");
    assert_eq!(relayed(&s, &own(2), 1).as_deref(), Some("own-2"));
    assert_eq!((s.len(), s.relays()), (1, 1));
    // A newer confirmation for the same call replaces the older one's relay.
    relay(&s, "own-2b", &own(2));
    assert_eq!(s.relays(), 1);
}

#[test]
fn single_use_under_contention() {
    let s = Arc::new(store(10, 0));
    let b = binding("session-1", json!({"amount": 42}));
    sync(s.insert(record("c-1", b.clone(), 0, 1_000), at(0))).unwrap();
    sync(s.decide("c-1", ApprovalVerdict::Approve, "bob", at(0))).unwrap();
    let threads: Vec<_> = (0..16)
        .map(|_| {
            let (s, b) = (s.clone(), b.clone());
            std::thread::spawn(move || (0..25).filter(|_| sync(s.consume("c-1", &b, at(1))).unwrap().is_ok()).count())
        })
        .collect();
    let wins: usize = threads.into_iter().map(|t| t.join().unwrap()).sum();
    assert_eq!(wins, 1);
}

/// The claim behind "every validated input has a canonical form": a `serde_json::Value` cannot
/// hold what the canonical form cannot write. If serde_json's `arbitrary_precision` feature were
/// ever unified into the build, numbers outside `f64` would become representable and these
/// tests would fail, pointing at `spec/authority-and-confirmation.md`.
#[test]
fn every_value_has_a_canonical_form() {
    assert!(serde_json::from_str::<Value>("1e400").is_err(), "out-of-range numbers are rejected when parsed");
    assert!(serde_json::from_str::<Value>(r#""\ud800""#).is_err(), "lone surrogates are rejected when parsed");
    assert_eq!(serde_json::to_value(f64::NAN).unwrap(), Value::Null, "non-finite floats become null");
    assert_eq!(json!(f64::INFINITY), Value::Null);
    let big: Value = serde_json::from_str("123456789012345678901234567890").unwrap();
    assert!(big.as_f64().is_some_and(f64::is_finite), "big integers are doubles");
}

#[test]
fn the_input_hash_is_over_the_meaning_of_the_json() {
    let h = |v: Value| Fingerprint::of(&v);
    assert_eq!(h(json!({"a": 1, "b": [true, null]})), h(json!({"b": [true, null], "a": 1})));
    assert_eq!(h(json!({"n": 1})), h(json!({"n": 1.0})), "1 and 1.0 are the same JSON number");
    assert_ne!(h(json!(9_007_199_254_740_993_u64)), h(json!(9_007_199_254_740_992_u64)), "integers stay exact");
    assert_ne!(h(json!({"a": "1"})), h(json!({"a": 1})));
}

// ---- The engine ------------------------------------------------------------------------------

/// An engine whose callers present every id themselves: a repeat without evidence asks anew
/// (presenting on repeat has tests of its own).
fn engine(clock: &Arc<ManualClock>, ttl_ms: u64) -> ConfirmationEngine {
    ConfirmationEngine::new(ConfirmationConfig {
        clock: clock.clone(),
        ttl: Duration::from_millis(ttl_ms),
        present_on_repeat: false,
        ..Default::default()
    })
}

struct Call {
    consumer: Consumer,
    input: Value,
    summary: SafeText,
}

impl Call {
    fn new(consumer: Consumer, amount: u64) -> Call {
        Call { consumer, input: json!({"amount": amount}), summary: SafeText::from("Refund.") }
    }

    fn info(&self) -> CallInfo<'_> {
        CallInfo::new(&self.consumer, "orders.refund", "orders", Effect::External, false)
            .with_instance("main")
            .with_registration("r-1")
            .with_input(&self.input)
            .with_declared_gate(Some(&self.summary))
    }
}

#[tokio::test]
async fn ids_are_fresh_and_unguessable_looking() {
    let clock = Arc::new(ManualClock::default());
    let (a, b) = (engine(&clock, 1000), engine(&clock, 1000));
    let call = Call::new(Consumer::anonymous("c"), 1);
    let mut ids = std::collections::HashSet::new();
    for e in [&a, &b] {
        for _ in 0..50 {
            let ConfirmationDecision::Required { confirmation_id, expires_at, origin, .. } =
                e.check(call.info(), None, clock.now()).await
            else {
                panic!()
            };
            assert!(confirmation_id.starts_with("c-") && confirmation_id.len() == 34);
            assert!(confirmation_id[2..].bytes().all(|b| b.is_ascii_hexdigit()));
            assert_eq!(expires_at, clock.now().saturating_add(Duration::from_secs(1)));
            assert_eq!(origin, Origin::Client);
            assert!(ids.insert(confirmation_id));
        }
    }
    // An anonymous requester's request can be approved by anyone signed in, but not by a subject
    // equal to its consumer key.
    let ConfirmationDecision::Required { confirmation_id, .. } = a.check(call.info(), None, clock.now()).await else {
        panic!()
    };
    assert_eq!(a.approve(&confirmation_id, &Identity::new("c")).await, Err(ApprovalError::SelfApproval));
    a.approve(&confirmation_id, &Identity::new("someone")).await.unwrap();
    let record = a.get(&confirmation_id).await.unwrap().unwrap();
    assert_eq!(record.requester, None);
    assert_eq!(record.state, ConfirmationState::Approved { by: "someone".into() });
}

/// What a caller learns through `CallDetails`: the evidence the engine consumed for it.
#[derive(Debug, Default)]
struct Told(std::sync::Mutex<Vec<agent_surface_policy::hooks::ConsumedEvidence>>);

impl agent_surface_policy::hooks::CallDetails for Told {
    fn input_preview(&self) -> Option<String> {
        None
    }

    fn consumed(&self, evidence: agent_surface_policy::hooks::ConsumedEvidence) {
        self.0.lock().unwrap().push(evidence);
    }
}

/// The engine tells the call which evidence it consumed, with the store's consumption token, and
/// gives it back through the gate for that call only, once per consumption, before the deadline.
#[tokio::test]
async fn consumed_evidence_is_given_back_to_its_call_only() {
    let clock = Arc::new(ManualClock::new(at(0)));
    let e = engine(&clock, 10_000);
    let call = Call::new(Consumer::authenticated("session-1", Identity::new("alice")), 42);
    let ConfirmationDecision::Required { confirmation_id: id, .. } = e.check(call.info(), None, clock.now()).await
    else {
        panic!()
    };
    e.approve(&id, &Identity::new("manager")).await.unwrap();
    let told = Told::default();
    assert_eq!(e.check(call.info().with_details(&told), Some(&id), clock.now()).await, ConfirmationDecision::Proceed);
    let evidence = told.0.lock().unwrap().pop().expect("the engine tells the call what it consumed");
    assert_eq!(evidence.confirmation_id, id);
    assert!(!format!("{evidence:?}").contains(&evidence.token), "Debug never shows the token");

    // Another consumer, another input, a forged token: nothing is given back.
    let stranger = Call::new(Consumer::authenticated("session-2", Identity::new("mallory")), 42);
    assert!(!e.reinstate(stranger.info(), &evidence, clock.now()).await);
    let other_input = Call::new(Consumer::authenticated("session-1", Identity::new("alice")), 43);
    assert!(!e.reinstate(other_input.info(), &evidence, clock.now()).await);
    let forged = agent_surface_policy::hooks::ConsumedEvidence::new(id.clone(), "k-0");
    assert!(!e.reinstate(call.info(), &forged, clock.now()).await);
    assert_eq!(e.get(&id).await.unwrap().unwrap().state, ConfirmationState::Consumed { approved_by: "manager".into() });

    // The call that consumed it: approved again, once; usable once more.
    assert!(ConfirmationGate::reinstate(&e, call.info(), &evidence, clock.now()).await);
    assert!(!e.reinstate(call.info(), &evidence, clock.now()).await, "once per consumption");
    assert_eq!(e.check(call.info().with_details(&told), Some(&id), clock.now()).await, ConfirmationDecision::Proceed);
    let again = told.0.lock().unwrap().pop().unwrap();
    assert_ne!(again.token, evidence.token, "each consumption has its own token");
    assert!(!e.reinstate(call.info(), &evidence, clock.now()).await, "an old token cannot undo a new consumption");
    assert_eq!(
        e.check(call.info(), Some(&id), clock.now()).await,
        ConfirmationDecision::Invalid(ConfirmationInvalidReason::Consumed)
    );
    // Not after the deadline.
    clock.advance(Duration::from_secs(10));
    assert!(!e.reinstate(call.info(), &again, clock.now()).await);
    // A store that hands out no token cannot reinstate: `Consumed::new` carries none.
    assert_eq!(Consumed::new("manager").token, None);
}

/// The requester cannot approve through `approve`, but can in person (a prompt the host put in
/// front of them); the evidence then works once, like any approval.
#[tokio::test]
async fn the_requester_approves_in_person_only() {
    let clock = Arc::new(ManualClock::default());
    let e = engine(&clock, 1000);
    let call = Call::new(Consumer::authenticated("session-1", Identity::new("alice")), 5);
    let ConfirmationDecision::Required { confirmation_id: id, .. } = e.check(call.info(), None, clock.now()).await
    else {
        panic!()
    };
    assert_eq!(e.approve(&id, &Identity::new("alice")).await, Err(ApprovalError::SelfApproval));
    assert_eq!(e.approve_in_person(&id, "  ").await, Err(ApprovalError::NoApprover));
    e.approve_in_person(&id, "mcp-elicitation").await.unwrap();
    let record = e.get(&id).await.unwrap().unwrap();
    assert_eq!(record.state, ConfirmationState::Approved { by: "in-person:mcp-elicitation".into() });
    // Decided once: a second decision of either kind is refused.
    assert!(matches!(e.approve_in_person(&id, "mcp-elicitation").await, Err(ApprovalError::AlreadyDecided(_))));
    assert_eq!(e.check(call.info(), Some(&id), clock.now()).await, ConfirmationDecision::Proceed);
    assert!(matches!(e.check(call.info(), Some(&id), clock.now()).await, ConfirmationDecision::Invalid(_)));
    // Expired is expired, in person or not.
    let ConfirmationDecision::Required { confirmation_id: late, .. } = e.check(call.info(), None, clock.now()).await
    else {
        panic!()
    };
    clock.advance(Duration::from_millis(1000));
    assert_eq!(e.approve_in_person(&late, "mcp-elicitation").await, Err(ApprovalError::Expired));
}

/// A quorum of two managers: the quorum comes from the configuration by scope; an approver without
/// the role (and the in-person channel, which has none) is refused, the same manager counts once,
/// the evidence is pending until the second manager approves, `pending_for` leaves out whom the
/// record does not wait for, and an expired quorum is final: the same call starts a new request.
#[tokio::test]
async fn a_quorum_counts_distinct_approvers_with_the_role() {
    let clock = Arc::new(ManualClock::default());
    let e = ConfirmationEngine::new(ConfirmationConfig {
        clock: clock.clone(),
        ttl: Duration::from_millis(1000),
        quorums: vec![
            (Scope::capability("orders.other"), Quorum::of(5)),
            (Scope::capability_type("orders"), Quorum::of(2).with_role("manager")),
        ],
        ..Default::default()
    });
    assert_eq!(e.quorum_for("orders.refund", "orders"), Quorum::of(2).with_role("manager"));
    assert_eq!(e.quorum_for("users.delete", "users"), Quorum::default());
    assert!(e.scopes().contains(&Scope::capability_type("orders")), "the registry checks quorum scopes exist");
    let call = Call::new(Consumer::authenticated("session-1", Identity::new("alice")), 5);
    let ConfirmationDecision::Required { confirmation_id: id, .. } = e.check(call.info(), None, clock.now()).await
    else {
        panic!()
    };
    let (bob, carol) = (Identity::new("bob").with_role("manager"), Identity::new("carol").with_role("manager"));
    let intern = Identity::new("intern");
    assert_eq!(e.get(&id).await.unwrap().unwrap().quorum, Quorum::of(2).with_role("manager"));
    assert_eq!(e.approve(&id, &intern).await, Err(ApprovalError::NotEligible));
    assert_eq!(e.approve_in_person(&id, "mcp-elicitation").await, Err(ApprovalError::NotEligible));
    assert_eq!(e.approve(&id, &Identity::new("alice").with_role("manager")).await, Err(ApprovalError::SelfApproval));
    assert_eq!(e.pending_for(&bob, 10).await.unwrap().len(), 1);
    assert!(e.pending_for(&intern, 10).await.unwrap().is_empty(), "the intern's approval would not count");
    e.approve(&id, &bob).await.unwrap();
    assert_eq!(e.approve(&id, &bob).await, Err(ApprovalError::DecidedBefore));
    assert_eq!(e.deny(&id, &Identity::new("BOB")).await, Err(ApprovalError::DecidedBefore));
    assert!(e.pending_for(&bob, 10).await.unwrap().is_empty(), "bob decided already");
    let record = e.get(&id).await.unwrap().unwrap();
    assert_eq!((record.state.clone(), record.approvals()), (ConfirmationState::Pending, 1));
    assert!(matches!(e.check(call.info(), Some(&id), clock.now()).await, ConfirmationDecision::Required { .. }));
    e.approve(&id, &carol).await.unwrap();
    assert_eq!(e.get(&id).await.unwrap().unwrap().state, ConfirmationState::Approved { by: "bob, carol".into() });
    assert_eq!(e.check(call.info(), Some(&id), clock.now()).await, ConfirmationDecision::Proceed);

    // Expired is final: one approval of two, then the deadline; the evidence is expired, nobody
    // can decide, and the same call without evidence is a new request that starts at 0 of 2.
    let ConfirmationDecision::Required { confirmation_id: old, .. } = e.check(call.info(), None, clock.now()).await
    else {
        panic!()
    };
    e.approve(&old, &bob).await.unwrap();
    clock.advance(Duration::from_millis(1000));
    assert_eq!(e.approve(&old, &carol).await, Err(ApprovalError::Expired));
    assert_eq!(
        e.check(call.info(), Some(&old), clock.now()).await,
        ConfirmationDecision::Invalid(ConfirmationInvalidReason::Expired)
    );
    let ConfirmationDecision::Required { confirmation_id: new, .. } = e.check(call.info(), None, clock.now()).await
    else {
        panic!()
    };
    assert_ne!(new, old, "a new request starts a new confirmation");
    assert_eq!(e.get(&new).await.unwrap().unwrap().approvals(), 0);
    assert_eq!(e.approve(&old, &carol).await, Err(ApprovalError::Expired), "the old one stays expired");
}

/// An engine whose `orders` calls need `quorum`, and a pending confirmation requested by alice.
async fn quorum_request(quorum: Quorum) -> (ConfirmationEngine, Call, String) {
    let e = ConfirmationEngine::new(ConfirmationConfig {
        clock: Arc::new(ManualClock::default()),
        quorums: vec![(Scope::capability_type("orders"), quorum)],
        ..Default::default()
    });
    let call = Call::new(Consumer::authenticated("session-1", Identity::new("alice")), 5);
    let ConfirmationDecision::Required { confirmation_id, .. } =
        e.check(call.info(), None, e.config().clock.now()).await
    else {
        panic!("a gated call without evidence is a request")
    };
    (e, call, confirmation_id)
}

/// "2 of bob, carol and dave": an outsider is refused (and not listed), so is a look-alike of a
/// member (a subject is an identity: compared exactly) and the requester; the quorum is met by
/// the second member.
#[tokio::test]
async fn n_of_m_counts_only_the_named_approvers() {
    let quorum = Quorum::of(2).with_approver("bob").with_approver("carol").with_approver("dave");
    let (e, call, id) = quorum_request(quorum.clone()).await;
    let now = || e.config().clock.now();
    let outsider = Identity::new("mallory").with_role("manager");
    assert_eq!(e.approve(&id, &outsider).await, Err(ApprovalError::NotEligible));
    assert!(e.pending_for(&outsider, 10).await.unwrap().is_empty(), "not listed for an outsider");
    for look_alike in ["b\u{043e}b", "Bob", "bob "] {
        assert_eq!(e.approve(&id, &Identity::new(look_alike)).await, Err(ApprovalError::NotEligible), "{look_alike:?}");
    }
    assert_eq!(e.approve_in_person(&id, "host-ui").await, Err(ApprovalError::NotEligible), "no named approver");
    assert_eq!(e.approve(&id, &Identity::new("alice")).await, Err(ApprovalError::NotEligible), "not named either");
    assert_eq!(e.get(&id).await.unwrap().unwrap().approvals(), 0, "nothing counted");
    assert_eq!(e.pending_for(&Identity::new("bob"), 10).await.unwrap().len(), 1);
    e.approve(&id, &Identity::new("bob")).await.unwrap();
    assert!(matches!(e.check(call.info(), Some(&id), now()).await, ConfirmationDecision::Required { .. }));
    e.approve(&id, &Identity::new("dave")).await.unwrap();
    assert_eq!(e.get(&id).await.unwrap().unwrap().state, ConfirmationState::Approved { by: "bob, dave".into() });
    assert_eq!(e.check(call.info(), Some(&id), now()).await, ConfirmationDecision::Proceed);

    // A named requester still cannot approve their own request, and a member decides once.
    let (e, _call, id) =
        quorum_request(Quorum::of(2).with_approver("alice").with_approver("bob").with_approver("carol")).await;
    assert_eq!(e.approve(&id, &Identity::new("alice")).await, Err(ApprovalError::SelfApproval));
    e.approve(&id, &Identity::new("bob")).await.unwrap();
    assert_eq!(e.approve(&id, &Identity::new("bob")).await, Err(ApprovalError::DecidedBefore));
}

/// "One manager and one security officer": dana holds both roles and fills one slot only; a
/// second manager-only approver is refused while the security slot is open (`SlotsTaken`, not
/// listed), and a security officer completes the quorum — dana moves to the manager slot if
/// needed, whoever came first.
#[tokio::test]
async fn role_slots_need_one_approver_per_slot() {
    let quorum = Quorum::default().with_slot("manager").with_slot("security");
    let dana = Identity::new("dana").with_role("manager").with_role("security");
    let max = Identity::new("max").with_role("manager");
    let sam = Identity::new("sam").with_role("security");
    let nobody = Identity::new("nina").with_role("intern");

    // dana first, then max (manager only): dana must move to security, max takes manager.
    let (e, call, id) = quorum_request(quorum.clone()).await;
    assert_eq!(e.approve(&id, &nobody).await, Err(ApprovalError::NotEligible));
    assert_eq!(e.approve_in_person(&id, "host-ui").await, Err(ApprovalError::NotEligible), "no role");
    e.approve(&id, &dana).await.unwrap();
    assert_eq!(e.get(&id).await.unwrap().unwrap().state, ConfirmationState::Pending, "dana fills one slot");
    assert_eq!(e.pending_for(&max, 10).await.unwrap().len(), 1, "max can still count");
    e.approve(&id, &max).await.unwrap();
    let record = e.get(&id).await.unwrap().unwrap();
    assert_eq!(record.state, ConfirmationState::Approved { by: "dana, max".into() });
    assert_eq!(record.slot_assignment(), vec![Some(1), Some(0)], "dana on security, max on manager");
    assert_eq!(e.check(call.info(), Some(&id), e.config().clock.now()).await, ConfirmationDecision::Proceed);

    // max first, then another manager-only approver: refused while security is open; then sam.
    let (e, _call, id) = quorum_request(quorum.clone()).await;
    e.approve(&id, &max).await.unwrap();
    let moe = Identity::new("moe").with_role("manager");
    assert!(e.pending_for(&moe, 10).await.unwrap().is_empty(), "no slot left for moe");
    assert_eq!(e.approve(&id, &moe).await, Err(ApprovalError::SlotsTaken));
    assert_eq!(e.get(&id).await.unwrap().unwrap().approvals(), 1, "moe's approval is not recorded");
    assert_eq!(e.pending_for(&dana, 10).await.unwrap().len(), 1, "dana can fill security");
    e.approve(&id, &sam).await.unwrap();
    assert_eq!(e.get(&id).await.unwrap().unwrap().state, ConfirmationState::Approved { by: "max, sam".into() });

    // Three approvers, one of them security: an in-person approval fills a free slot (once).
    let (e, _call, id) = quorum_request(Quorum::of(3).with_slot("security")).await;
    e.approve_in_person(&id, "host-ui").await.unwrap();
    e.approve(&id, &max).await.unwrap();
    assert_eq!(e.approve(&id, &moe).await, Err(ApprovalError::SlotsTaken), "the last slot is security's");
    e.approve(&id, &sam).await.unwrap();
    let record = e.get(&id).await.unwrap().unwrap();
    assert_eq!(record.state, ConfirmationState::Approved { by: "in-person:host-ui, max, sam".into() });
}

/// In-person approvals are the requester's: on two channels they count once.
#[tokio::test]
async fn an_in_person_approval_counts_once_whatever_the_channel() {
    let (e, call, id) = quorum_request(Quorum::of(2)).await;
    e.approve_in_person(&id, "mcp-elicitation").await.unwrap();
    assert_eq!(e.approve_in_person(&id, "host-ui").await, Err(ApprovalError::DecidedBefore));
    assert_eq!(e.approve_in_person(&id, "mcp-elicitation").await, Err(ApprovalError::DecidedBefore));
    let record = e.get(&id).await.unwrap().unwrap();
    assert_eq!((record.state.clone(), record.approvals()), (ConfirmationState::Pending, 1));
    assert!(matches!(
        e.check(call.info(), Some(&id), e.config().clock.now()).await,
        ConfirmationDecision::Required { .. }
    ));
    e.approve(&id, &Identity::new("bob")).await.unwrap();
    assert_eq!(e.check(call.info(), Some(&id), e.config().clock.now()).await, ConfirmationDecision::Proceed);
}

#[tokio::test]
async fn ungated_calls_proceed_whatever_they_carry() {
    let clock = Arc::new(ManualClock::default());
    let e = engine(&clock, 1000);
    let consumer = Consumer::anonymous("c");
    let input = json!({});
    let call = CallInfo::new(&consumer, "orders.list", "orders", Effect::Read, true).with_input(&input);
    assert_eq!(e.check(call, None, clock.now()).await, ConfirmationDecision::Proceed);
    assert_eq!(e.check(call, Some("c-forged"), clock.now()).await, ConfirmationDecision::Proceed);
}

#[derive(Clone, Debug)]
enum Op {
    Request { requester: usize, amount: u64 },
    Approve { n: usize, approver: usize },
    Deny { n: usize, approver: usize },
    Advance { ms: u64 },
    Retry { n: usize, as_consumer: usize, amount: u64 },
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        2 => (0..3usize, 1..3u64).prop_map(|(requester, amount)| Op::Request { requester, amount }),
        2 => (0..6usize, 0..3usize).prop_map(|(n, approver)| Op::Approve { n, approver }),
        1 => (0..6usize, 0..3usize).prop_map(|(n, approver)| Op::Deny { n, approver }),
        1 => (0..400u64).prop_map(|ms| Op::Advance { ms }),
        4 => (0..6usize, 0..3usize, 1..3u64).prop_map(|(n, as_consumer, amount)| Op::Retry { n, as_consumer, amount }),
    ]
}

/// Three people; each is both a consumer (key `session-i`, subject `user-i`) and an approver.
fn person(i: usize) -> Consumer {
    Consumer::authenticated(format!("session-{i}"), Identity::new(format!("user-{i}")))
}

#[derive(Debug)]
struct Issued {
    id: String,
    requester: usize,
    amount: u64,
    expires_at: Timestamp,
    approved_by: Option<usize>,
    denied: bool,
    uses: usize,
}

proptest! {
    /// Against random interleavings of request, approve, deny, expire and retry: evidence is
    /// accepted at most once per approval, only for the call it was issued for, only after an
    /// approval by someone other than the requester, and never after expiry or denial.
    #[test]
    fn the_engine_admits_at_most_once_per_approval(ops in proptest::collection::vec(op(), 1..60)) {
        let clock = Arc::new(ManualClock::default());
        let e = engine(&clock, 1000);
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        let mut issued: Vec<Issued> = Vec::new();
        for op in ops {
            let now = clock.now();
            match op {
                Op::Request { requester, amount } => {
                    let call = Call::new(person(requester), amount);
                    let ConfirmationDecision::Required { confirmation_id, expires_at, .. } =
                        rt.block_on(e.check(call.info(), None, now)) else { panic!() };
                    issued.push(Issued { id: confirmation_id, requester, amount, expires_at, approved_by: None, denied: false, uses: 0 });
                }
                Op::Approve { n, approver } => {
                    let Some(c) = issued.get_mut(n) else { continue };
                    let got = rt.block_on(e.approve(&c.id, &Identity::new(format!("user-{approver}"))));
                    if got.is_ok() {
                        prop_assert_ne!(approver, c.requester, "a self-approval was accepted");
                        prop_assert!(c.approved_by.is_none() && !c.denied && now < c.expires_at);
                        c.approved_by = Some(approver);
                    } else if approver == c.requester && c.approved_by.is_none() && !c.denied {
                        prop_assert_eq!(got, Err(ApprovalError::SelfApproval));
                    }
                }
                Op::Deny { n, approver } => {
                    let Some(c) = issued.get_mut(n) else { continue };
                    let got = rt.block_on(e.deny(&c.id, &Identity::new(format!("user-{approver}"))));
                    // A denial ends a pending record, and revokes an approval nobody used.
                    prop_assert_eq!(got.is_ok(), c.uses == 0 && !c.denied && now < c.expires_at);
                    c.denied |= got.is_ok();
                }
                Op::Advance { ms } => clock.advance(Duration::from_millis(ms)),
                Op::Retry { n, as_consumer, amount } => {
                    let Some(c) = issued.get_mut(n) else { continue };
                    let call = Call::new(person(as_consumer), amount);
                    let got = rt.block_on(e.check(call.info(), Some(&c.id), now));
                    let bound = as_consumer == c.requester && amount == c.amount;
                    let expected = if !bound {
                        ConfirmationDecision::Invalid(ConfirmationInvalidReason::Mismatch)
                    } else if c.uses > 0 {
                        ConfirmationDecision::Invalid(ConfirmationInvalidReason::Consumed)
                    } else if c.denied {
                        ConfirmationDecision::Invalid(ConfirmationInvalidReason::Denied)
                    } else if now >= c.expires_at {
                        ConfirmationDecision::Invalid(ConfirmationInvalidReason::Expired)
                    } else if c.approved_by.is_none() {
                        ConfirmationDecision::Required {
                            confirmation_id: c.id.clone(),
                            summary: SafeText::from("Refund."),
                            expires_at: c.expires_at,
                            origin: Origin::Client,
                        }
                    } else {
                        ConfirmationDecision::Proceed
                    };
                    prop_assert_eq!(&got, &expected);
                    if got == ConfirmationDecision::Proceed {
                        c.uses += 1;
                        prop_assert!(c.approved_by.is_some_and(|a| a != c.requester));
                    }
                }
            }
        }
        prop_assert!(issued.iter().all(|c| c.uses <= usize::from(c.approved_by.is_some())));
    }
}
