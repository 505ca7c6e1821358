//! The store kit's checks of a [`ConfirmationStore`]: the single-use steps (approve, deny, take,
//! withdraw), relayed confirmations and their claims, expiry claims, revocation and reinstatement,
//! the quorum rules and the listing of pending records; [`replicas`] drives two engines over one
//! store, as two replicas do.

mod replicas;

pub use replicas::{
    InStep, check_racing_repeats_open_one_confirmation, check_replicas_record_one_expiry,
    check_replicas_share_one_approval, check_replicas_share_relayed_confirmations, check_replicas_sweep_one_expiry,
};

use agent_surface_core::Timestamp;
use agent_surface_policy::confirmation::{ApprovalVerdict, ConfirmationState, Decided, Rejection, RelayKey, SlotSet};
use agent_surface_policy::idempotency::Fingerprint;
use agent_surface_policy::{ConfirmationRecord, ConfirmationStore, Quorum};
use futures_util::future::join_all;
use serde_json::json;

use super::{T0, at, binding, expect, pending};

/// Runs the [`ConfirmationStore`] suite against `store`.
///
/// # Panics
///
/// On the first rule the store breaks.
pub async fn check_confirmation_store(store: &dyn ConfirmationStore, prefix: &str) {
    let id = |name: &str| format!("{prefix}{name}");

    // Insert and read back; an id is inserted once.
    let a = id("conf-a");
    expect("insert", store.insert(pending(&a), at(0)).await);
    assert!(store.insert(pending(&a), at(0)).await.is_err(), "store kit: a second insert of one id must fail");
    let read = expect("get", store.get(&a, at(1)).await).expect("store kit: an inserted record must be readable");
    assert_eq!(read, pending(&a), "store kit: get must return the record as inserted");
    assert_eq!(expect("get", store.get(&id("conf-none"), at(1)).await), None, "store kit: an unknown id reads as none");

    // The requester cannot approve its own request (by subject or by consumer key, also under a
    // name that only looks different), but may deny.
    for who in ["alice", "c-1", "Alice", " alice", "al\u{200b}ice", "ali\u{301}ce", "\u{430}lice", "C-1"] {
        let got = expect("decide", store.decide(&a, ApprovalVerdict::Approve, who, at(2)).await);
        assert_eq!(got, Decided::SelfApproval, "store kit: the requester ({who}) must not approve");
    }
    // Another consumer's evidence is a mismatch whatever state the record is in (checked first,
    // so that it reveals nothing, and never the pending record).
    let stranger = binding("c-2");
    let mismatch = |got: Result<agent_surface_policy::confirmation::Consumed, Rejection>, state: &str| match got {
        Err(Rejection::Mismatch(m)) => assert!(m.consumer, "store kit: {state}: {m:?}"),
        other => panic!("store kit: another consumer's evidence on a {state} record must be a mismatch, got {other:?}"),
    };
    mismatch(expect("consume", store.consume(&a, &stranger, at(2)).await), "pending");
    // A pending record consumed answers pending, with the record.
    match expect("consume", store.consume(&a, &binding("c-1"), at(3)).await) {
        Err(Rejection::Pending(record)) => assert_eq!(*record, pending(&a), "store kit: pending carries the record"),
        other => panic!("store kit: consuming a pending record must answer Pending, got {other:?}"),
    }
    assert_eq!(expect("decide", store.decide(&a, ApprovalVerdict::Approve, "bob", at(4)).await), Decided::Done);
    assert_eq!(
        expect("decide", store.decide(&a, ApprovalVerdict::Approve, "carol", at(5)).await),
        Decided::NotPending(ConfirmationState::Approved { by: "bob".to_string() }),
        "store kit: an approval is final"
    );

    // Another call's evidence reveals nothing and consumes nothing.
    let mut other = binding("c-1");
    other.input_hash = Fingerprint::of(&json!({"orderId": "A-2"}));
    match expect("consume", store.consume(&a, &other, at(6)).await) {
        Err(Rejection::Mismatch(m)) => assert!(m.input && !m.consumer && !m.capability && !m.target, "{m:?}"),
        got => panic!("store kit: another input must be a mismatch, got {got:?}"),
    }
    match expect("consume", store.consume(&a, &binding("c-2"), at(6)).await) {
        Err(Rejection::Mismatch(m)) => assert!(m.consumer && !m.input, "{m:?}"),
        got => panic!("store kit: another consumer must be a mismatch, got {got:?}"),
    }

    // Approved evidence is consumed once, however many race for it.
    let mine = binding("c-1");
    let racers = (0..24).map(|_| store.consume(&a, &mine, at(7)));
    let results = join_all(racers).await;
    let won = results.iter().filter(|r| matches!(r, Ok(Ok(_)))).count();
    assert_eq!(won, 1, "store kit: exactly one concurrent consume must win, got {results:?}");
    for r in &results {
        match r {
            Ok(Ok(consumed)) => assert_eq!(consumed.approved_by, "bob", "store kit: consume reports the approver"),
            Ok(Err(Rejection::Consumed)) => {}
            other => panic!("store kit: a losing consume must answer Consumed, got {other:?}"),
        }
    }

    // A denial is final; a withdrawn record reads as expired; withdrawing a decided one changes nothing.
    let d = id("conf-d");
    expect("insert", store.insert(pending(&d), at(0)).await);
    assert_eq!(expect("decide", store.decide(&d, ApprovalVerdict::Deny, "alice", at(1)).await), Decided::Done);
    mismatch(expect("consume", store.consume(&d, &stranger, at(2)).await), "denied");
    assert_eq!(expect("consume", store.consume(&d, &binding("c-1"), at(2)).await), Err(Rejection::Denied));
    assert_eq!(
        expect("withdraw", store.withdraw(&d, at(3)).await),
        Some(ConfirmationState::Denied { by: "alice".to_string() })
    );
    let w = id("conf-w");
    expect("insert", store.insert(pending(&w), at(0)).await);
    assert_eq!(expect("withdraw", store.withdraw(&w, at(1)).await), Some(ConfirmationState::Withdrawn));
    mismatch(expect("consume", store.consume(&w, &stranger, at(2)).await), "withdrawn");
    assert_eq!(expect("consume", store.consume(&w, &binding("c-1"), at(2)).await), Err(Rejection::Expired));
    assert_eq!(
        expect("decide", store.decide(&w, ApprovalVerdict::Approve, "bob", at(3)).await),
        Decided::NotPending(ConfirmationState::Withdrawn)
    );
    assert_eq!(expect("withdraw", store.withdraw(&id("conf-none"), at(3)).await), None);

    mismatch(expect("consume", store.consume(&a, &stranger, at(8)).await), "consumed");

    // Expiry: no decision after it (the requester rule is checked first); approved evidence is not
    // usable after it.
    let e = id("conf-e");
    expect("insert", store.insert(pending(&e), at(0)).await);
    assert_eq!(
        expect("decide", store.decide(&e, ApprovalVerdict::Approve, "alice", at(60_000)).await),
        Decided::SelfApproval
    );
    assert_eq!(expect("decide", store.decide(&e, ApprovalVerdict::Approve, "bob", at(60_000)).await), Decided::Expired);
    mismatch(expect("consume", store.consume(&e, &stranger, at(60_001)).await), "expired");
    let f = id("conf-f");
    expect("insert", store.insert(pending(&f), at(0)).await);
    assert_eq!(expect("decide", store.decide(&f, ApprovalVerdict::Approve, "bob", at(59_999)).await), Decided::Done);
    assert_eq!(expect("consume", store.consume(&f, &binding("c-1"), at(60_000)).await), Err(Rejection::Expired));

    // The requester approving in person is not a self-approval (the requester rule is for
    // `Approve` only); a decided record refuses the requester as `NotPending`, not `SelfApproval`.
    let p = id("conf-p");
    expect("insert", store.insert(pending(&p), at(0)).await);
    assert_eq!(
        expect("decide", store.decide(&p, ApprovalVerdict::ApproveInPerson, "alice", at(1)).await),
        Decided::Done
    );
    assert_eq!(
        expect("decide", store.decide(&p, ApprovalVerdict::Approve, "alice", at(1)).await),
        Decided::NotPending(ConfirmationState::Approved { by: "alice".to_string() })
    );
    let consumed = expect("consume", store.consume(&p, &binding("c-1"), at(2)).await);
    assert!(consumed.is_ok(), "store kit: an in-person approval is usable, got {consumed:?}");

    check_pending_listing(store, prefix).await;
    check_confirmation_quorum(store, prefix).await;
    check_confirmation_slots(store, prefix).await;
    check_expiry_claims(store, prefix).await;
    check_reinstatement(store, prefix).await;
    check_expired_listing(store, prefix).await;
    check_relayed_confirmations(store, prefix).await;
    check_revocation(store, prefix).await;
}

/// A denial of an approved record that nobody used yet revokes the approval (part of
/// [`check_confirmation_store`]): the record becomes denied by the one who declined, its
/// decisions keep the approval and add the denial, and its evidence is refused as denied. Used,
/// expired, withdrawn or denied records keep their state; a denial racing a consumption lands
/// exactly when the consumption does not.
///
/// # Panics
///
/// On the first rule the store breaks.
pub async fn check_revocation(store: &dyn ConfirmationStore, prefix: &str) {
    let id = |name: &str| format!("{prefix}{name}");
    let r = id("conf-revoked");
    expect("insert", store.insert(pending(&r), at(0)).await);
    assert_eq!(expect("decide", store.decide(&r, ApprovalVerdict::Approve, "bob", at(1)).await), Decided::Done);
    assert_eq!(
        expect("decide", store.decide(&r, ApprovalVerdict::Deny, "alice", at(2)).await),
        Decided::Done,
        "store kit: a decline after an approval that was not used revokes it"
    );
    let read = expect("get", store.get(&r, at(3)).await).expect("store kit: a revoked record is kept");
    assert_eq!(read.state, ConfirmationState::Denied { by: "alice".to_string() }, "store kit: revoked reads denied");
    let verdicts: Vec<_> = read.decisions.iter().map(|d| (d.approver.as_str(), d.verdict)).collect();
    assert_eq!(
        verdicts,
        [("bob", ApprovalVerdict::Approve), ("alice", ApprovalVerdict::Deny)],
        "store kit: a revoked record keeps the approval and adds the denial"
    );
    assert_eq!(expect("consume", store.consume(&r, &binding("c-1"), at(4)).await), Err(Rejection::Denied));
    assert_eq!(
        expect("decide", store.decide(&r, ApprovalVerdict::Approve, "carol", at(5)).await),
        Decided::NotPending(ConfirmationState::Denied { by: "alice".to_string() }),
        "store kit: a revoked record takes no approval"
    );

    // An approver may take back their own approval.
    let own = id("conf-revoked-own");
    expect("insert", store.insert(pending(&own), at(0)).await);
    assert_eq!(expect("decide", store.decide(&own, ApprovalVerdict::Approve, "bob", at(1)).await), Decided::Done);
    assert_eq!(expect("decide", store.decide(&own, ApprovalVerdict::Deny, "bob", at(2)).await), Decided::Done);
    assert_eq!(expect("consume", store.consume(&own, &binding("c-1"), at(3)).await), Err(Rejection::Denied));

    // Used evidence stays used; approved evidence past its deadline stays as it was.
    let used = id("conf-revoke-used");
    expect("insert", store.insert(pending(&used), at(0)).await);
    assert_eq!(expect("decide", store.decide(&used, ApprovalVerdict::Approve, "bob", at(1)).await), Decided::Done);
    assert!(expect("consume", store.consume(&used, &binding("c-1"), at(2)).await).is_ok());
    assert_eq!(
        expect("decide", store.decide(&used, ApprovalVerdict::Deny, "alice", at(3)).await),
        Decided::NotPending(ConfirmationState::Consumed { approved_by: "bob".to_string() }),
        "store kit: a decline after the use revokes nothing"
    );
    let late = id("conf-revoke-late");
    expect("insert", store.insert(pending(&late), at(0)).await);
    assert_eq!(expect("decide", store.decide(&late, ApprovalVerdict::Approve, "bob", at(1)).await), Decided::Done);
    assert_ne!(
        expect("decide", store.decide(&late, ApprovalVerdict::Deny, "alice", at(60_000)).await),
        Decided::Done,
        "store kit: a decline past the deadline changes nothing"
    );
    let read = expect("get", store.get(&late, at(60_001)).await).expect("store kit: kept for its retention");
    assert_eq!(read.state, ConfirmationState::Approved { by: "bob".to_string() });

    // A decline racing the use: exactly one of them lands.
    for round in 0..8 {
        let raced = id(&format!("conf-revoke-race-{round}"));
        expect("insert", store.insert(pending(&raced), at(0)).await);
        assert_eq!(expect("decide", store.decide(&raced, ApprovalVerdict::Approve, "bob", at(1)).await), Decided::Done);
        let mine = binding("c-1");
        let (declined, used) = futures_util::future::join(
            store.decide(&raced, ApprovalVerdict::Deny, "alice", at(2)),
            store.consume(&raced, &mine, at(2)),
        )
        .await;
        let declined = expect("decide", declined);
        let used = expect("consume", used);
        match (&declined, &used) {
            (Decided::Done, Err(Rejection::Denied)) => {}
            (Decided::NotPending(ConfirmationState::Consumed { .. }), Ok(_)) => {}
            other => panic!("store kit: a decline racing a use must leave exactly one of them landed, got {other:?}"),
        }
    }
}

/// [`ConfirmationStore::reinstate`] (part of [`check_confirmation_store`]): consumed evidence is
/// given back to the call that consumed it — its binding and its consumption token — before the
/// deadline, once per consumption; never to another binding, with another token, after another
/// call consumed it again, twice, after the deadline, or once a denial met it in use; of
/// concurrent reinstatements exactly one wins.
async fn check_reinstatement(store: &dyn ConfirmationStore, prefix: &str) {
    let id = |name: &str| format!("{prefix}reinstate-{name}");
    let mine = binding("c-1");
    let approved = |name: &str| {
        let record = pending(&id(name));
        async move {
            expect("insert", store.insert(record.clone(), at(0)).await);
            assert_eq!(
                expect("decide", store.decide(&record.id, ApprovalVerdict::Approve, "bob", at(1)).await),
                Decided::Done
            );
            record.id
        }
    };
    let consume = |r: &str, now| {
        let r = r.to_string();
        let mine = mine.clone();
        async move {
            match expect("consume", store.consume(&r, &mine, now).await) {
                Ok(consumed) => consumed.token.expect("store kit: consume must hand out a consumption token"),
                Err(rejection) => panic!("store kit: approved evidence must be consumed, got {rejection:?}"),
            }
        }
    };
    let state = |r: &str| {
        let r = r.to_string();
        async move { expect("get", store.get(&r, at(10)).await).expect("store kit: the record is still there").state }
    };
    let bob = || ConfirmationState::Approved { by: "bob".to_string() };
    let used = || ConfirmationState::Consumed { approved_by: "bob".to_string() };

    let r = approved("one").await;
    let token = consume(&r, at(2)).await;
    // Another binding, another input, another token: refused, nothing changes.
    let mut other_input = mine.clone();
    other_input.input_hash = Fingerprint::of(&json!({"orderId": "A-2"}));
    for (who, b, t) in [
        ("another consumer", binding("c-2"), token.as_str()),
        ("another input", other_input, token.as_str()),
        ("another token", mine.clone(), "k-not-the-token"),
        ("an empty token", mine.clone(), ""),
    ] {
        assert!(!expect("reinstate", store.reinstate(&r, &b, t, at(3)).await), "store kit: {who} must not reinstate");
    }
    assert_eq!(state(&r).await, used(), "store kit: a refused reinstatement changes nothing");
    // The consumer's own token: approved again, by the same approver; once.
    assert!(expect("reinstate", store.reinstate(&r, &mine, &token, at(4)).await), "store kit: the consumer reinstates");
    assert_eq!(state(&r).await, bob(), "store kit: reinstated evidence is approved by the same approvers");
    assert!(
        !expect("reinstate", store.reinstate(&r, &mine, &token, at(5)).await),
        "store kit: evidence is reinstated once per consumption"
    );
    // The retry consumes it with a token of its own; the first token no longer reinstates.
    let second = consume(&r, at(6)).await;
    assert_ne!(second, token, "store kit: each consumption has a fresh token");
    assert!(
        !expect("reinstate", store.reinstate(&r, &mine, &token, at(7)).await),
        "store kit: an old token must not undo another call's consumption"
    );
    assert_eq!(state(&r).await, used());
    let racers = join_all((0..8).map(|_| store.reinstate(&r, &mine, &second, at(8)))).await;
    let won = racers.into_iter().map(|x| expect("reinstate", x)).filter(|w| *w).count();
    assert_eq!(won, 1, "store kit: of concurrent reinstatements exactly one must win");
    assert_eq!(state(&r).await, bob());

    // Nothing that was not consumed is reinstated: pending, denied, unknown.
    let p = id("pending");
    expect("insert", store.insert(pending(&p), at(0)).await);
    assert!(!expect("reinstate", store.reinstate(&p, &mine, &token, at(1)).await), "store kit: a pending record");
    expect("decide", store.decide(&p, ApprovalVerdict::Deny, "bob", at(2)).await);
    assert!(!expect("reinstate", store.reinstate(&p, &mine, &token, at(3)).await), "store kit: a denied record");
    assert!(!expect("reinstate", store.reinstate(&id("none"), &mine, &token, at(3)).await), "store kit: an unknown id");

    // A denial that meets consumed evidence cannot undo the use, but the approval must never come
    // back: the consumption can no longer be given back (a denial racing a use lands exactly when
    // the use does not).
    let d = approved("denied-in-use").await;
    let token = consume(&d, at(2)).await;
    assert_eq!(
        expect("decide", store.decide(&d, ApprovalVerdict::Deny, "carol", at(3)).await),
        Decided::NotPending(used()),
        "store kit: a denial of consumed evidence is answered as already used"
    );
    assert!(
        !expect("reinstate", store.reinstate(&d, &mine, &token, at(4)).await),
        "store kit: evidence denied while in use must not be given back"
    );
    assert_eq!(state(&d).await, used(), "store kit: it stays consumed");

    // Not at or after the deadline.
    let late = approved("late").await;
    let token = consume(&late, at(59_999)).await;
    assert!(
        !expect("reinstate", store.reinstate(&late, &mine, &token, at(60_000)).await),
        "store kit: expired evidence must not be reinstated"
    );
    let read = expect("get", store.get(&late, at(60_001)).await).expect("store kit: the record is still there");
    assert_eq!(read.state, used(), "store kit: expired evidence stays consumed");
}

/// [`ConfirmationStore::list_expired`] (part of [`check_confirmation_store`]): records past
/// their deadline that were pending, approved and unused, or withdrawn, and whose expiry nobody
/// claimed, soonest expiry first, at most the limit; not consumed or denied ones, not claimed
/// ones, not those before their deadline.
async fn check_expired_listing(store: &dyn ConfirmationStore, prefix: &str) {
    let id = |name: &str| format!("{prefix}expired-{name}");
    let mine = binding("c-1");
    let mut later = pending(&id("later"));
    later.expires_at = at(120_000);
    for record in ["pending", "approved", "consumed", "denied", "withdrawn", "claimed"]
        .map(|name| pending(&id(name)))
        .into_iter()
        .chain([later.clone()])
    {
        expect("insert", store.insert(record, at(0)).await);
    }
    expect("decide", store.decide(&id("approved"), ApprovalVerdict::Approve, "bob", at(1)).await);
    expect("decide", store.decide(&id("consumed"), ApprovalVerdict::Approve, "bob", at(1)).await);
    assert!(expect("consume", store.consume(&id("consumed"), &mine, at(2)).await).is_ok());
    expect("decide", store.decide(&id("denied"), ApprovalVerdict::Deny, "bob", at(1)).await);
    expect("withdraw", store.withdraw(&id("withdrawn"), at(1)).await);
    let ours = |records: Vec<ConfirmationRecord>| -> Vec<(String, ConfirmationState)> {
        records.into_iter().filter(|r| r.id.starts_with(&id(""))).map(|r| (r.id, r.state)).collect()
    };
    assert!(
        ours(expect("list_expired", store.list_expired(at(59_999), 1000).await)).is_empty(),
        "store kit: nothing is listed before its deadline"
    );
    assert!(expect("claim_expiry", store.claim_expiry(&id("claimed"), at(1_000_000), at(60_000)).await));
    let listed = ours(expect("list_expired", store.list_expired(at(60_000), 1000).await));
    assert_eq!(
        listed,
        vec![
            (id("approved"), ConfirmationState::Approved { by: "bob".to_string() }),
            (id("pending"), ConfirmationState::Pending),
            (id("withdrawn"), ConfirmationState::Withdrawn),
        ],
        "store kit: expired pending, approved and withdrawn records whose expiry is unclaimed, by expiry then id"
    );
    let read = expect("list_expired", store.list_expired(at(60_000), 1000).await);
    let full = read.into_iter().find(|r| r.id == id("pending")).expect("store kit: listed again until claimed");
    assert_eq!(full, pending(&id("pending")), "store kit: a listed record is the record as stored");
    assert_eq!(expect("list_expired", store.list_expired(at(60_000), 1).await).len(), 1, "store kit: the limit");
    assert!(expect("list_expired", store.list_expired(at(60_000), 0).await).is_empty(), "store kit: limit 0");
    assert!(expect("claim_expiry", store.claim_expiry(&id("pending"), at(1_000_000), at(60_001)).await));
    let listed = ours(expect("list_expired", store.list_expired(at(120_000), 1000).await));
    let ids: Vec<&str> = listed.iter().map(|(i, _)| i.as_str()).collect();
    assert_eq!(
        ids,
        [id("approved"), id("withdrawn"), id("later")],
        "store kit: an expiry under a claim is not listed; a later deadline is, once passed"
    );
    // A claim that lapsed before its event was recorded: listed again (its claimer stopped).
    expect("expiry_recorded", store.expiry_recorded(&id("claimed"), at(120_001)).await);
    let listed = ours(expect("list_expired", store.list_expired(at(1_000_000), 1000).await));
    let ids: Vec<&str> = listed.iter().map(|(i, _)| i.as_str()).collect();
    assert_eq!(
        ids,
        [id("approved"), id("pending"), id("withdrawn"), id("later")],
        "store kit: a lapsed claim is listed again, a recorded expiry never"
    );
}

/// The memory of relayed confirmations (part of [`check_confirmation_store`]):
/// [`ConfirmationStore::remember_relayed`] ties a [`RelayKey`] to a held record, replacing what
/// the key held; [`ConfirmationStore::relayed`] reads it while the record is held (at the latest
/// until its expiry plus the store's retention, taken here to be under ten years);
/// [`ConfirmationStore::forget_relayed`] removes it only while it holds the given id; and
/// [`ConfirmationStore::insert_relayed`] claims a key for a new record unless it holds an open
/// one of the same call ([`check_relay_claims`]).
async fn check_relayed_confirmations(store: &dyn ConfirmationStore, prefix: &str) {
    check_relay_claims(store, prefix).await;

    let (r1, r2) = (format!("{prefix}relay-1"), format!("{prefix}relay-2"));
    let mut other = binding("c-1");
    other.input_hash = Fingerprint::of(&json!({"orderId": "A-2", "relay": prefix}));
    let mine = binding("c-1");
    let mut mine_here = mine.clone();
    mine_here.instance_id = format!("{prefix}main");
    let (key, unrelated) = (RelayKey::of(&mine_here), RelayKey::of(&other));
    let relayed = |key| async move { expect("relayed", store.relayed(key, at(10)).await) };
    assert_eq!(relayed(&key).await, None, "store kit: nothing is relayed before it is remembered");
    expect("insert", store.insert(pending(&r1), at(0)).await);
    expect("remember_relayed", store.remember_relayed(&key, &r1, at(1)).await);
    assert_eq!(relayed(&key).await.as_deref(), Some(r1.as_str()), "store kit: a remembered relay must be read back");
    assert_eq!(relayed(&unrelated).await, None, "store kit: another call's key holds nothing");
    expect("remember_relayed", store.remember_relayed(&unrelated, &format!("{prefix}relay-none"), at(1)).await);
    assert_eq!(
        relayed(&unrelated).await,
        None,
        "store kit: nothing is remembered for a record the store does not hold"
    );

    // Forgetting another id leaves the key; a newer confirmation replaces the older one.
    expect("forget_relayed", store.forget_relayed(&key, &r2, at(2)).await);
    assert_eq!(
        relayed(&key).await.as_deref(),
        Some(r1.as_str()),
        "store kit: forgetting another id must change nothing"
    );
    expect("insert", store.insert(pending(&r2), at(0)).await);
    expect("remember_relayed", store.remember_relayed(&key, &r2, at(3)).await);
    assert_eq!(relayed(&key).await.as_deref(), Some(r2.as_str()), "store kit: a newer relay replaces the older");
    expect("forget_relayed", store.forget_relayed(&key, &r1, at(4)).await);
    assert_eq!(
        relayed(&key).await.as_deref(),
        Some(r2.as_str()),
        "store kit: forgetting a replaced id keeps the newer"
    );
    // A relay lives no longer than its record.
    let ten_years = Timestamp::from_unix_millis(T0 + 10 * 365 * 24 * 3_600_000);
    assert_eq!(
        expect("relayed", store.relayed(&key, ten_years).await),
        None,
        "store kit: a relay must be gone with its record"
    );
    expect("forget_relayed", store.forget_relayed(&key, &r2, at(5)).await);
    assert_eq!(relayed(&key).await, None, "store kit: a forgotten relay reads as none");

    // Concurrent repeats of one call (replicas) remember one id between them.
    let ids: Vec<String> = (0..8).map(|n| format!("{prefix}relay-raced-{n}")).collect();
    for id in &ids {
        expect("insert", store.insert(pending(id), at(0)).await);
    }
    join_all(ids.iter().map(|id| store.remember_relayed(&key, id, at(6)))).await.into_iter().for_each(|r| {
        expect("remember_relayed", r);
    });
    let held = relayed(&key).await.expect("store kit: one of the raced relays must be held");
    assert!(ids.contains(&held), "store kit: the key must hold one of the raced ids, got {held}");
}

/// [`ConfirmationStore::insert_relayed`] (part of [`check_confirmation_store`]): a free key is
/// claimed for the new record, in the same step as the record is added; a key that holds a
/// record of the same call that is pending, or approved and unused, before its deadline, answers
/// that record and adds nothing; a key whose record was consumed, denied or withdrawn, expired,
/// or is bound to another call is claimed anew; an id the store holds is refused and claims
/// nothing; and of concurrent requests of one call exactly one adds its record, every other
/// being answered with it.
async fn check_relay_claims(store: &dyn ConfirmationStore, prefix: &str) {
    use agent_surface_policy::confirmation::Inserted;
    // Each case its own call (and so its own key), under this run's prefix.
    let call = |case: &str| {
        let mut b = binding("c-1");
        b.instance_id = format!("{prefix}main");
        b.input_hash = Fingerprint::of(&json!({"orderId": "A-1", "case": case}));
        b
    };
    let record = |case: &str, n: u32| {
        let mut r = pending(&format!("{prefix}claim-{case}-{n}"));
        r.binding = call(case);
        r
    };
    let request = |case: &'static str, n: u32, now: Timestamp| {
        let r = record(case, n);
        async move {
            let key = RelayKey::of(&r.binding);
            expect("insert_relayed", store.insert_relayed(r, &key, now).await)
        }
    };
    let held = |got: Inserted, case: &str, n: u32, rule: &str| match got {
        Inserted::Held(open) => assert_eq!(open.id, record(case, n).id, "store kit: {rule}"),
        Inserted::New => panic!("store kit: {rule}: a second confirmation was opened"),
    };
    let relayed = |case: &str, now: Timestamp| {
        let key = RelayKey::of(&call(case));
        async move { expect("relayed", store.relayed(&key, now).await) }
    };
    let stored = |case: &str, n: u32| {
        let id = record(case, n).id;
        async move { expect("get", store.get(&id, at(10)).await) }
    };

    // A free key is claimed; the record is added as inserted, and the key holds it.
    assert_eq!(request("open", 1, at(0)).await, Inserted::New, "store kit: a free key must be claimed");
    assert_eq!(stored("open", 1).await, Some(record("open", 1)), "store kit: the claimed record is added");
    assert_eq!(relayed("open", at(1)).await, Some(record("open", 1).id), "store kit: the key holds the new record");
    // While pending: the open record answers, nothing is added.
    held(request("open", 2, at(1)).await, "open", 1, "a pending record of the call must answer the request");
    assert_eq!(stored("open", 2).await, None, "store kit: a request answered with the open record adds nothing");
    match request("open", 3, at(2)).await {
        Inserted::Held(open) => assert_eq!(*open, record("open", 1), "store kit: the answer is the record as stored"),
        Inserted::New => panic!("store kit: a pending record of the call must answer the request"),
    }
    // Approved and unused: still open.
    let open = record("open", 1).id;
    assert_eq!(expect("decide", store.decide(&open, ApprovalVerdict::Approve, "bob", at(3)).await), Decided::Done);
    match request("open", 4, at(4)).await {
        Inserted::Held(approved) => assert_eq!(
            (approved.id.as_str(), &approved.state),
            (open.as_str(), &ConfirmationState::Approved { by: "bob".to_string() }),
            "store kit: an approved, unused record of the call must answer the request"
        ),
        Inserted::New => panic!("store kit: an approved, unused record of the call must answer the request"),
    }
    // Consumed: the key is free again.
    assert!(expect("consume", store.consume(&open, &call("open"), at(5)).await).is_ok());
    assert_eq!(request("open", 5, at(6)).await, Inserted::New, "store kit: a consumed record frees its key");
    assert_eq!(relayed("open", at(7)).await, Some(record("open", 5).id), "store kit: the key holds the new record");
    // Denied, withdrawn: free again.
    let fifth = record("open", 5).id;
    assert_eq!(expect("decide", store.decide(&fifth, ApprovalVerdict::Deny, "bob", at(7)).await), Decided::Done);
    assert_eq!(request("open", 6, at(8)).await, Inserted::New, "store kit: a denied record frees its key");
    let sixth = record("open", 6).id;
    assert_eq!(expect("withdraw", store.withdraw(&sixth, at(9)).await), Some(ConfirmationState::Withdrawn));
    assert_eq!(request("open", 7, at(10)).await, Inserted::New, "store kit: a withdrawn record frees its key");
    // Past its deadline (still held for its retention): free again.
    held(request("open", 8, at(59_999)).await, "open", 7, "a record before its deadline must answer the request");
    assert_eq!(request("open", 9, at(60_010)).await, Inserted::New, "store kit: an expired record frees its key");
    // A key is never kept past its record.
    let ten_years = Timestamp::from_unix_millis(T0 + 10 * 365 * 24 * 3_600_000);
    assert_eq!(relayed("open", ten_years).await, None, "store kit: a claim must be gone with its record");

    // A key that holds a record of another call (remembered under it) is claimed anew.
    let stranger = record("stranger", 1);
    expect("insert", store.insert(stranger.clone(), at(0)).await);
    let foreign = RelayKey::of(&call("foreign"));
    expect("remember_relayed", store.remember_relayed(&foreign, &stranger.id, at(1)).await);
    let mine = record("foreign", 1);
    assert_eq!(
        expect("insert_relayed", store.insert_relayed(mine.clone(), &foreign, at(2)).await),
        Inserted::New,
        "store kit: a record bound to another call must not answer the request"
    );
    assert_eq!(expect("relayed", store.relayed(&foreign, at(3)).await), Some(mine.id));

    // An id the store holds is refused, and the key it asked for stays free.
    expect("insert", store.insert(record("taken", 1), at(0)).await);
    let key = RelayKey::of(&call("taken"));
    assert!(
        store.insert_relayed(record("taken", 1), &key, at(1)).await.is_err(),
        "store kit: a request under an id the store holds must fail"
    );
    assert_eq!(relayed("taken", at(2)).await, None, "store kit: a refused request claims nothing");

    // Concurrent requests of one call (retries on one replica or several): one record.
    let racers: Vec<ConfirmationRecord> = (0..16).map(|n| record("raced", n)).collect();
    let key = RelayKey::of(&call("raced"));
    let answers = join_all(racers.iter().map(|r| store.insert_relayed(r.clone(), &key, at(1)))).await;
    let answers: Vec<Inserted> = answers.into_iter().map(|a| expect("insert_relayed", a)).collect();
    let new: Vec<usize> = (0..answers.len()).filter(|&n| answers[n] == Inserted::New).collect();
    assert_eq!(new.len(), 1, "store kit: of concurrent requests of one call exactly one must add its record");
    let first = &racers[new[0]];
    for answer in &answers {
        if let Inserted::Held(open) = answer {
            assert_eq!(**open, *first, "store kit: every other concurrent request is answered with that record");
        }
    }
    for r in &racers {
        let kept = expect("get", store.get(&r.id, at(2)).await).is_some();
        assert_eq!(kept, r.id == first.id, "store kit: only the first request's record is added ({})", r.id);
    }
    assert_eq!(expect("relayed", store.relayed(&key, at(2)).await).as_ref(), Some(&first.id));
}

/// [`ConfirmationStore::claim_expiry`] and [`ConfirmationStore::expiry_recorded`] (part of
/// [`check_confirmation_store`]): the first claim of a held record's expiry wins, every later one
/// loses while it holds, and of concurrent claims exactly one wins; a claim that lapsed without
/// being recorded is won again (exactly once among racers); a recorded expiry is never claimed
/// again; an id the store does not hold answers `true`.
async fn check_expiry_claims(store: &dyn ConfirmationStore, prefix: &str) {
    let x = format!("{prefix}conf-expiry");
    let lease = |t: u64| at(t + 300_000);
    expect("insert", store.insert(pending(&x), at(0)).await);
    assert!(
        expect("claim_expiry", store.claim_expiry(&x, lease(60_000), at(60_000)).await),
        "store kit: the first claim must win"
    );
    assert!(
        !expect("claim_expiry", store.claim_expiry(&x, lease(60_001), at(60_001)).await),
        "store kit: a second claim of one expiry must lose while the first holds"
    );
    // The claimer stopped before it wrote the event: its claim lapses, and another wins it.
    assert!(
        !expect("claim_expiry", store.claim_expiry(&x, lease(359_999), at(359_999)).await),
        "store kit: a claim holds until its deadline"
    );
    let claims = join_all((0..8).map(|_| store.claim_expiry(&x, lease(360_000), at(360_000)))).await;
    let won = claims.into_iter().map(|c| expect("claim_expiry", c)).filter(|first| *first).count();
    assert_eq!(won, 1, "store kit: a lapsed claim must be won again, by exactly one of concurrent claimers");
    // Recorded: never claimed again, even once the last claim lapsed.
    expect("expiry_recorded", store.expiry_recorded(&x, at(360_001)).await);
    assert!(
        !expect("claim_expiry", store.claim_expiry(&x, lease(700_000), at(700_000)).await),
        "store kit: a recorded expiry must not be claimed again"
    );
    let raced = format!("{prefix}conf-expiry-raced");
    expect("insert", store.insert(pending(&raced), at(0)).await);
    let claims = join_all((0..8).map(|_| store.claim_expiry(&raced, lease(60_000), at(60_000)))).await;
    let won = claims.into_iter().map(|c| expect("claim_expiry", c)).filter(|first| *first).count();
    assert_eq!(won, 1, "store kit: of concurrent claims of one expiry exactly one must win");
    assert!(
        expect("claim_expiry", store.claim_expiry(&format!("{prefix}conf-never"), lease(60_000), at(60_000)).await),
        "store kit: an id the store does not hold must answer true"
    );
    expect("expiry_recorded", store.expiry_recorded(&format!("{prefix}conf-never"), at(60_000)).await);
}

/// The quorum rules of [`ConfirmationStore::decide`] (part of [`check_confirmation_store`]):
/// one decision per approver, kept in order; a record needing N approvals is approved by the
/// N-th distinct approver (never the requester), and a denial by anyone is final; concurrent
/// decisions count each approver once and approve once.
///
/// # Panics
///
/// On the first rule the store breaks.
pub async fn check_confirmation_quorum(store: &dyn ConfirmationStore, prefix: &str) {
    let id = |name: &str| format!("{prefix}quorum-{name}");
    let needing = |name: &str, n: u32| pending(&id(name)).with_quorum(Quorum::of(n).with_role("manager"));
    let verdicts = |r: &ConfirmationRecord| -> Vec<(String, ApprovalVerdict)> {
        r.decisions.iter().map(|d| (d.approver.clone(), d.verdict)).collect()
    };

    // Two of two: the first approval is recorded and the record stays pending (listed, with the
    // decision); the same approver cannot decide again, under any spelling or verdict.
    let two = needing("two", 2);
    expect("insert", store.insert(two.clone(), at(0)).await);
    let read = expect("get", store.get(&two.id, at(1)).await).expect("store kit: a quorum record must be readable");
    assert_eq!(read, two, "store kit: get must return the quorum as inserted");
    assert_eq!(
        expect("decide", store.decide(&two.id, ApprovalVerdict::Approve, "alice", at(1)).await),
        Decided::SelfApproval,
        "store kit: the requester never counts towards a quorum"
    );
    assert_eq!(expect("decide", store.decide(&two.id, ApprovalVerdict::Approve, "bob", at(2)).await), Decided::Done);
    let read = expect("get", store.get(&two.id, at(3)).await).expect("store kit: the record is still there");
    assert_eq!(read.state, ConfirmationState::Pending, "store kit: one approval of two leaves it pending");
    assert_eq!(verdicts(&read), vec![("bob".to_string(), ApprovalVerdict::Approve)], "store kit: the decision is kept");
    assert_eq!(read.decisions[0].at, at(2), "store kit: the decision keeps its time");
    for (who, verdict) in
        [("bob", ApprovalVerdict::Approve), ("Bob", ApprovalVerdict::Approve), ("bob", ApprovalVerdict::Deny)]
    {
        assert_eq!(
            expect("decide", store.decide(&two.id, verdict, who, at(4)).await),
            Decided::DecidedBefore,
            "store kit: {who} decided before; one decision per approver"
        );
    }
    match expect("consume", store.consume(&two.id, &binding("c-1"), at(5)).await) {
        Err(Rejection::Pending(record)) => {
            assert_eq!(verdicts(&record), verdicts(&read), "store kit: pending evidence carries the decisions so far")
        }
        other => panic!("store kit: evidence with one approval of two must be pending, got {other:?}"),
    }
    let listed = expect("list_pending", store.list_pending(at(5), 1000).await);
    let listed = listed.into_iter().find(|r| r.id == two.id).expect("store kit: a partly approved record is listed");
    assert_eq!(verdicts(&listed), verdicts(&read), "store kit: the listing carries the decisions so far");
    assert_eq!(listed.quorum, two.quorum, "store kit: the listing carries the quorum");
    assert_eq!(expect("decide", store.decide(&two.id, ApprovalVerdict::Approve, "carol", at(6)).await), Decided::Done);
    let read = expect("get", store.get(&two.id, at(7)).await).expect("store kit: the record is still there");
    assert_eq!(read.state, ConfirmationState::Approved { by: "bob, carol".to_string() }, "store kit: two of two");
    assert!(
        !expect("list_pending", store.list_pending(at(7), 1000).await).iter().any(|r| r.id == two.id),
        "store kit: an approved quorum record is not listed"
    );
    assert_eq!(
        expect("decide", store.decide(&two.id, ApprovalVerdict::Approve, "dave", at(8)).await),
        Decided::NotPending(ConfirmationState::Approved { by: "bob, carol".to_string() }),
        "store kit: a completed quorum is final"
    );
    let consumed = expect("consume", store.consume(&two.id, &binding("c-1"), at(9)).await);
    assert_eq!(consumed.map(|c| c.approved_by), Ok("bob, carol".to_string()), "store kit: consumed by the quorum");

    // A denial by any approver is final, after approvals too.
    let denied = needing("denied", 3);
    expect("insert", store.insert(denied.clone(), at(0)).await);
    assert_eq!(expect("decide", store.decide(&denied.id, ApprovalVerdict::Approve, "bob", at(1)).await), Decided::Done);
    assert_eq!(expect("decide", store.decide(&denied.id, ApprovalVerdict::Deny, "carol", at(2)).await), Decided::Done);
    assert_eq!(
        expect("decide", store.decide(&denied.id, ApprovalVerdict::Approve, "dave", at(3)).await),
        Decided::NotPending(ConfirmationState::Denied { by: "carol".to_string() }),
        "store kit: a denial is final"
    );
    assert_eq!(expect("consume", store.consume(&denied.id, &binding("c-1"), at(4)).await), Err(Rejection::Denied));

    // Expiry: an approval of two, then the deadline: no more decisions, the evidence expired.
    let late = needing("late", 2);
    expect("insert", store.insert(late.clone(), at(0)).await);
    assert_eq!(expect("decide", store.decide(&late.id, ApprovalVerdict::Approve, "bob", at(1)).await), Decided::Done);
    assert_eq!(
        expect("decide", store.decide(&late.id, ApprovalVerdict::Approve, "carol", at(60_000)).await),
        Decided::Expired
    );
    assert_eq!(expect("consume", store.consume(&late.id, &binding("c-1"), at(60_000)).await), Err(Rejection::Expired));

    // Racing approvers: with 16 distinct ones on a record needing 2, exactly two decisions land
    // and the record is approved once; one approver racing with itself lands once.
    let raced = needing("raced", 2);
    expect("insert", store.insert(raced.clone(), at(0)).await);
    let names: Vec<String> = (0..16).map(|i| format!("approver-{i}")).collect();
    let results = join_all(names.iter().map(|n| store.decide(&raced.id, ApprovalVerdict::Approve, n, at(1)))).await;
    let done = results.iter().filter(|r| matches!(r, Ok(Decided::Done))).count();
    assert_eq!(done, 2, "store kit: exactly two of sixteen racing approvers land on a quorum of two: {results:?}");
    for r in &results {
        assert!(
            matches!(r, Ok(Decided::Done | Decided::NotPending(ConfirmationState::Approved { .. }))),
            "store kit: a racing approver after the quorum is told it is approved, got {r:?}"
        );
    }
    let read = expect("get", store.get(&raced.id, at(2)).await).expect("store kit: the record is still there");
    assert_eq!(read.decisions.len(), 2, "store kit: exactly the two landed decisions are kept");
    let one = needing("one-approver", 3);
    expect("insert", store.insert(one.clone(), at(0)).await);
    let results = join_all((0..8).map(|_| store.decide(&one.id, ApprovalVerdict::Approve, "bob", at(1)))).await;
    let done = results.iter().filter(|r| matches!(r, Ok(Decided::Done))).count();
    assert_eq!(done, 1, "store kit: one approver racing with itself lands once: {results:?}");
    assert!(results.iter().all(|r| matches!(r, Ok(Decided::Done | Decided::DecidedBefore))), "{results:?}");
}

/// The role slots of [`ConfirmationStore::decide_in_slots`] and the in-person rule (part of
/// [`check_confirmation_store`]): an approval is recorded only when it and every approval before
/// it can each fill a distinct slot they could fill — an approver who could fill either slot moves
/// to make room for one who can fill only one —, the record is approved when every slot is
/// filled, two approvers racing for the last slot never both land, the slots each approver could
/// fill are kept; and an in-person approval counts once per record, whatever the channel.
///
/// # Panics
///
/// On the first rule the store breaks.
pub async fn check_confirmation_slots(store: &dyn ConfirmationStore, prefix: &str) {
    let id = |name: &str| format!("{prefix}slots-{name}");
    // Slot 0: manager, slot 1: security.
    let two_roles =
        |name: &str| pending(&id(name)).with_quorum(Quorum::default().with_slot("manager").with_slot("security"));
    let (manager, security, both) = (SlotSet::EMPTY.with(0), SlotSet::EMPTY.with(1), SlotSet::EMPTY.with(0).with(1));
    let decide = |id: String, who: &'static str, slots: SlotSet, ms: u64| async move {
        expect("decide_in_slots", store.decide_in_slots(&id, ApprovalVerdict::Approve, who, slots, at(ms)).await)
    };

    // dana (both roles) first, then max (manager only): dana moves to security.
    let moved = two_roles("moved");
    expect("insert", store.insert(moved.clone(), at(0)).await);
    assert_eq!(decide(moved.id.clone(), "dana", both, 1).await, Decided::Done);
    let read = expect("get", store.get(&moved.id, at(2)).await).expect("store kit: the record is still there");
    assert_eq!(read.quorum, moved.quorum, "store kit: get must return the slots as inserted");
    assert_eq!(read.state, ConfirmationState::Pending, "store kit: one approver fills one slot, whatever its roles");
    assert_eq!(read.decisions[0].slots, both, "store kit: the slots an approver could fill are kept");
    assert_eq!(decide(moved.id.clone(), "max", manager, 3).await, Decided::Done, "store kit: dana makes room for max");
    let read = expect("get", store.get(&moved.id, at(4)).await).expect("store kit: the record is still there");
    assert_eq!(read.state, ConfirmationState::Approved { by: "dana, max".to_string() }, "store kit: both slots filled");
    assert_eq!(read.slot_assignment(), vec![Some(1), Some(0)], "store kit: dana on security, max on manager");

    // max, then another manager-only approver: refused, nothing recorded; then security.
    let taken = two_roles("taken");
    expect("insert", store.insert(taken.clone(), at(0)).await);
    assert_eq!(decide(taken.id.clone(), "max", manager, 1).await, Decided::Done);
    assert_eq!(
        decide(taken.id.clone(), "moe", manager, 2).await,
        Decided::SlotsTaken,
        "store kit: an approval that fills no open slot is refused"
    );
    assert_eq!(
        decide(taken.id.clone(), "nina", SlotSet::EMPTY, 2).await,
        Decided::SlotsTaken,
        "store kit: an approver who can fill no slot never counts"
    );
    let read = expect("get", store.get(&taken.id, at(3)).await).expect("store kit: the record is still there");
    assert_eq!(read.decisions.len(), 1, "store kit: a refused approval is not recorded");
    assert_eq!(decide(taken.id.clone(), "sam", security, 5).await, Decided::Done);
    let read = expect("get", store.get(&taken.id, at(6)).await).expect("store kit: the record is still there");
    assert_eq!(read.state, ConfirmationState::Approved { by: "max, sam".to_string() });

    // Racing for the last slot: max holds manager; dana (either) and sam (security) race for
    // security: exactly one lands. Sixteen manager-only approvers racing on a fresh record: one.
    let raced = two_roles("raced");
    expect("insert", store.insert(raced.clone(), at(0)).await);
    assert_eq!(decide(raced.id.clone(), "max", manager, 1).await, Decided::Done);
    let results = join_all(
        [("dana", both), ("sam", security)]
            .map(|(who, slots)| store.decide_in_slots(&raced.id, ApprovalVerdict::Approve, who, slots, at(2))),
    )
    .await;
    let done = results.iter().filter(|r| matches!(r, Ok(Decided::Done))).count();
    assert_eq!(done, 1, "store kit: two approvers racing for the last slot never both land: {results:?}");
    let read = expect("get", store.get(&raced.id, at(3)).await).expect("store kit: the record is still there");
    assert_eq!(read.decisions.len(), 2, "store kit: the quorum holds exactly its two approvals");
    let managers = two_roles("managers");
    expect("insert", store.insert(managers.clone(), at(0)).await);
    let names: Vec<String> = (0..16).map(|i| format!("manager-{i}")).collect();
    let results = join_all(
        names.iter().map(|n| store.decide_in_slots(&managers.id, ApprovalVerdict::Approve, n, manager, at(1))),
    )
    .await;
    let done = results.iter().filter(|r| matches!(r, Ok(Decided::Done))).count();
    assert_eq!(done, 1, "store kit: sixteen racing managers fill the one manager slot once: {results:?}");
    assert!(results.iter().all(|r| matches!(r, Ok(Decided::Done | Decided::SlotsTaken))), "{results:?}");

    // `decide` is an approver who may fill any slot.
    let any = two_roles("any");
    expect("insert", store.insert(any.clone(), at(0)).await);
    assert_eq!(expect("decide", store.decide(&any.id, ApprovalVerdict::Approve, "bob", at(1)).await), Decided::Done);
    assert_eq!(decide(any.id.clone(), "sam", security, 2).await, Decided::Done, "store kit: bob moves to manager");

    // Named approvers are kept as inserted (the engine admits them; the store counts).
    let named = pending(&id("named")).with_quorum(Quorum::of(2).with_approver("bob").with_approver("carol"));
    expect("insert", store.insert(named.clone(), at(0)).await);
    let read = expect("get", store.get(&named.id, at(1)).await).expect("store kit: a named quorum must be readable");
    assert_eq!(read, named, "store kit: get must return the named approvers as inserted");

    // In person: the requester, once, whatever the channel.
    let in_person = pending(&id("in-person")).with_quorum(Quorum::of(3));
    expect("insert", store.insert(in_person.clone(), at(0)).await);
    let by_channel =
        |channel: &'static str, ms: u64| store.decide(&in_person.id, ApprovalVerdict::ApproveInPerson, channel, at(ms));
    assert_eq!(expect("decide", by_channel("in-person:mcp-elicitation", 1).await), Decided::Done);
    assert_eq!(
        expect("decide", by_channel("in-person:host-ui", 2).await),
        Decided::DecidedBefore,
        "store kit: a second in-person approval (another channel) is the same requester"
    );
    let read = expect("get", store.get(&in_person.id, at(3)).await).expect("store kit: the record is still there");
    assert_eq!(read.approvals(), 1, "store kit: an in-person approval counts once");
}

/// `list_pending`: pending, unexpired records only, soonest expiry first, at most the limit; the
/// input preview kept as inserted.
async fn check_pending_listing(store: &dyn ConfirmationStore, prefix: &str) {
    let id = |name: &str| format!("{prefix}list-{name}");
    let mut soon = pending(&id("soon"));
    soon.expires_at = at(30_000);
    let later = pending(&id("later")).with_input_preview(Some(r#"{"orderId":"A-1","card":"[redacted]"}"#));
    for record in [later.clone(), soon.clone(), pending(&id("denied")), pending(&id("withdrawn"))] {
        expect("insert", store.insert(record, at(0)).await);
    }
    expect("decide", store.decide(&id("denied"), ApprovalVerdict::Deny, "bob", at(1)).await);
    expect("withdraw", store.withdraw(&id("withdrawn"), at(1)).await);
    let ours = |records: Vec<ConfirmationRecord>| -> Vec<ConfirmationRecord> {
        records.into_iter().filter(|r| r.id.starts_with(&id(""))).collect()
    };
    let listed = ours(expect("list_pending", store.list_pending(at(10), 1000).await));
    assert_eq!(listed, vec![soon.clone(), later.clone()], "store kit: pending records, soonest expiry first");
    let first = expect("list_pending", store.list_pending(at(10), 1).await);
    assert_eq!(first, vec![soon], "store kit: list_pending(1) is the record that expires first");
    assert_eq!(
        ours(expect("list_pending", store.list_pending(at(30_000), 1000).await)),
        vec![later.clone()],
        "store kit: an expired record is not listed"
    );
    expect("decide", store.decide(&later.id, ApprovalVerdict::Approve, "bob", at(30_001)).await);
    assert!(
        ours(expect("list_pending", store.list_pending(at(30_002), 1000).await)).is_empty(),
        "store kit: a decided record is not listed"
    );
    assert!(expect("list_pending", store.list_pending(at(30_002), 0).await).is_empty(), "store kit: limit 0");
}
