//! A model check of `MemoryIdempotencyStore`: random admit/settle/advance sequences against a
//! plain `HashMap` model of the admission table, eviction order included.

use std::collections::HashMap;
use std::time::Duration;

use agent_surface_core::{InvokeResult, Timestamp};
use agent_surface_policy::{
    IdempotencyStore, MemoryIdempotencyStore, MemoryStoreConfig, StoreError,
    idempotency::{Admission, Attempt, Fingerprint, IdempotencyKey, Lease, Settlement},
};
use futures_util::FutureExt;
use futures_util::future::BoxFuture;
use proptest::prelude::*;
use serde_json::json;

#[derive(Clone, Debug)]
enum Op {
    Admit { key: u8, fp: u8 },
    Store { key: u8, fp: u8, ttl_ms: u64 },
    Release { key: u8, fp: u8 },
    Advance { ms: u64 },
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (0..6u8, 0..3u8).prop_map(|(key, fp)| Op::Admit { key, fp }),
        2 => (0..6u8, 0..3u8, 0..40u64).prop_map(|(key, fp, ttl_ms)| Op::Store { key, fp, ttl_ms }),
        1 => (0..6u8, 0..3u8).prop_map(|(key, fp)| Op::Release { key, fp }),
        2 => (0..25u64).prop_map(|ms| Op::Advance { ms }),
    ]
}

#[derive(Clone, Debug, PartialEq)]
enum Rec {
    InFlight(u8),
    Done(u8, InvokeResult, Timestamp),
}

/// What the store should decide, in the model's terms.
#[derive(Debug, PartialEq)]
enum Decision {
    Leader,
    Follower,
    Replay(InvokeResult),
    Conflict(u8),
    Full,
}

struct Model {
    capacity: usize,
    now: Timestamp,
    records: HashMap<u8, Rec>,
    /// Keys of stored results, oldest settlement first.
    done_order: Vec<u8>,
}

impl Model {
    fn sweep(&mut self) {
        let now = self.now;
        self.records.retain(|_, rec| !matches!(rec, Rec::Done(_, _, expires_at) if *expires_at <= now));
        let records = &self.records;
        self.done_order.retain(|k| matches!(records.get(k), Some(Rec::Done(..))));
    }

    fn admit(&mut self, key: u8, fp: u8) -> Decision {
        self.sweep();
        match self.records.get(&key) {
            Some(Rec::InFlight(f)) if *f == fp => Decision::Follower,
            Some(Rec::Done(f, result, _)) if *f == fp => Decision::Replay(result.clone()),
            Some(Rec::InFlight(f) | Rec::Done(f, ..)) => Decision::Conflict(*f),
            None => {
                while self.records.len() >= self.capacity {
                    if self.done_order.is_empty() {
                        return Decision::Full;
                    }
                    let oldest = self.done_order.remove(0);
                    self.records.remove(&oldest);
                }
                self.records.insert(key, Rec::InFlight(fp));
                Decision::Leader
            }
        }
    }

    /// The result handed to the key's followers, if this settles its leader.
    fn settle(
        &mut self,
        key: u8,
        fp: u8,
        result: InvokeResult,
        store_until: Option<Timestamp>,
    ) -> Option<InvokeResult> {
        if self.records.get(&key) != Some(&Rec::InFlight(fp)) {
            return None;
        }
        match store_until {
            Some(expires_at) if expires_at > self.now => {
                self.records.insert(key, Rec::Done(fp, result.clone(), expires_at));
                self.done_order.push(key);
            }
            _ => {
                self.records.remove(&key);
            }
        }
        Some(result)
    }
}

fn the_key(key: u8) -> IdempotencyKey {
    IdempotencyKey::new("consumer", format!("inv-{key}"))
}

fn the_fp(fp: u8) -> Fingerprint {
    Fingerprint::of(&json!({"request": fp}))
}

struct Waiting {
    key: u8,
    future: BoxFuture<'static, InvokeResult>,
    expected: Option<InvokeResult>,
}

fn run(capacity: usize, ops: Vec<Op>) -> Result<(), TestCaseError> {
    let store = MemoryIdempotencyStore::new(MemoryStoreConfig::with_capacity(capacity));
    let mut model =
        Model { capacity, now: Timestamp::from_unix_millis(1_000), records: HashMap::new(), done_order: Vec::new() };
    let mut waiting: Vec<Waiting> = Vec::new();
    // The lease of each key's latest leader: settlements present it, as the registry does.
    let mut leases: HashMap<u8, Lease> = HashMap::new();
    for (step, op) in ops.into_iter().enumerate() {
        let result = InvokeResult::ok(json!({ "step": step }), None);
        match op {
            Op::Admit { key, fp } => {
                let expected = model.admit(key, fp);
                let admission = store.admit(&the_key(key), the_fp(fp), Attempt::fresh(), model.now).now_or_never();
                let actual = match admission.expect("the memory store answers at once") {
                    Ok(Admission::Leader(lease)) => {
                        prop_assert!(lease.renew_every.is_none(), "memory leases hold until settled");
                        let earlier = leases.insert(key, lease);
                        prop_assert!(earlier.is_none_or(|e| e.token != lease.token), "tokens are unique");
                        Decision::Leader
                    }
                    Ok(Admission::Follower(future)) => {
                        waiting.push(Waiting { key, future, expected: None });
                        Decision::Follower
                    }
                    Ok(Admission::Replay(result)) => Decision::Replay(result),
                    Ok(Admission::TakeOver(lease)) => panic!("memory leases do not lapse, yet {lease:?}"),
                    Ok(Admission::Conflict { stored }) => {
                        Decision::Conflict((0..3).find(|f| the_fp(*f) == stored).expect("a known fingerprint"))
                    }
                    Err(StoreError::Full { capacity: c }) if c == capacity => Decision::Full,
                    Err(other) => panic!("unexpected {other}"),
                };
                prop_assert_eq!(actual, expected, "step {}", step);
            }
            Op::Store { key, fp, ttl_ms } => {
                let expires_at = model.now.saturating_add(Duration::from_millis(ttl_ms));
                let settlement = Settlement::Store { result: result.clone(), expires_at };
                let lease = leases.get(&key).copied();
                settle(&store, &mut model, &mut waiting, (key, fp, lease), settlement, Some(expires_at))?;
            }
            Op::Release { key, fp } => {
                let settlement = Settlement::Release { result: result.clone() };
                let lease = leases.get(&key).copied();
                settle(&store, &mut model, &mut waiting, (key, fp, lease), settlement, None)?;
            }
            Op::Advance { ms } => model.now = model.now.saturating_add(Duration::from_millis(ms)),
        }
        prop_assert_eq!(store.len(), model.records.len(), "step {}", step);
        prop_assert!(store.len() <= capacity);
        // Followers resolve exactly when their leader settled, to what it settled with.
        let mut still_waiting = Vec::new();
        for mut w in waiting {
            let polled = (&mut w.future).now_or_never();
            match (&w.expected, polled) {
                (Some(expected), Some(actual)) => prop_assert_eq!(&actual, expected),
                (None, None) => still_waiting.push(w),
                (expected, actual) => {
                    prop_assert!(false, "step {step}: follower expected {expected:?}, got {actual:?}")
                }
            }
        }
        waiting = still_waiting;
    }
    Ok(())
}

/// Settles in the model and in the store (with the key's latest lease, or a lease the store never
/// gave), and records what the key's followers should receive. A settlement the model rejects
/// must be refused as `LeaseLost` and change nothing.
fn settle(
    store: &MemoryIdempotencyStore,
    model: &mut Model,
    waiting: &mut [Waiting],
    (key, fp, lease): (u8, u8, Option<Lease>),
    settlement: Settlement,
    store_until: Option<Timestamp>,
) -> Result<(), TestCaseError> {
    let result = match &settlement {
        Settlement::Store { result, .. } | Settlement::Release { result } => result.clone(),
    };
    let handed_over = model.settle(key, fp, result, store_until);
    let accepted = handed_over.is_some();
    if let Some(handed_over) = handed_over {
        for w in waiting.iter_mut().filter(|w| w.key == key && w.expected.is_none()) {
            w.expected = Some(handed_over.clone());
        }
    }
    let lease = lease.unwrap_or(Lease::until_settled(u64::MAX));
    let settled = store.settle(&the_key(key), the_fp(fp), lease, settlement, model.now).now_or_never();
    if accepted {
        prop_assert!(matches!(settled, Some(Ok(()))), "{settled:?}");
    } else {
        prop_assert!(matches!(settled, Some(Err(StoreError::LeaseLost))), "{settled:?}");
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn memory_store_agrees_with_the_model(capacity in 1..5usize, ops in prop::collection::vec(op(), 1..80)) {
        run(capacity, ops)?;
    }

    #[test]
    fn memory_store_agrees_with_the_model_without_eviction(ops in prop::collection::vec(op(), 1..80)) {
        run(1_000, ops)?;
    }
}
