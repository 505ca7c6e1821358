//! Live state: registrations, tombstones, the surface version.

use std::any::Any;
use std::collections::{BTreeMap, VecDeque};

/// The live state's maps: looked up on every call, so hashed with `foldhash` (fast, seeded) rather
/// than SipHash. Their keys are registered by the application; agents only look names up.
pub(crate) type HashMap<K, V> = std::collections::HashMap<K, V, foldhash::fast::RandomState>;
use std::sync::Arc;

use agent_surface_core::{SafeText, Timestamp};
use tokio_util::sync::CancellationToken;

use crate::define::CapabilityDef;

/// One live registration of an instance of a capability type.
pub(crate) struct Registration {
    pub(crate) type_id: Arc<str>,
    pub(crate) instance_id: Arc<str>,
    pub(crate) registration_id: Arc<str>,
    pub(crate) description: Option<String>,
    pub(crate) context: Option<String>,
    pub(crate) state: Option<Arc<dyn Any + Send + Sync>>,
    /// Fires when the registration is unmounted or replaced.
    pub(crate) unmounted: CancellationToken,
}

impl crate::ctx::Instance for Registration {
    fn instance_id(&self) -> &str {
        &self.instance_id
    }

    fn registration_id(&self) -> &str {
        &self.registration_id
    }

    fn state(&self) -> Option<&Arc<dyn Any + Send + Sync>> {
        self.state.as_ref()
    }
}

/// What is left of a registration after it is unmounted, for a bounded time.
#[derive(Clone, Debug)]
pub(crate) struct Tombstone {
    pub(crate) type_id: Arc<str>,
    pub(crate) instance_id: Arc<str>,
    pub(crate) registration_id: Arc<str>,
    pub(crate) created_at: Timestamp,
    pub(crate) expires_at: Timestamp,
    /// The registration that replaced this one, if it was replaced rather than unmounted.
    pub(crate) replaced_by: Option<Arc<str>>,
}

/// Tombstones, bounded by count and lifetime.
#[derive(Default)]
pub(crate) struct Tombstones {
    by_registration: HashMap<Arc<str>, Tombstone>,
    /// The latest tombstone of each (type, instance).
    by_instance: HashMap<(Arc<str>, Arc<str>), Arc<str>>,
    /// The latest tombstone of each type (for calls that name no target).
    by_type: HashMap<Arc<str>, Arc<str>>,
    order: VecDeque<Arc<str>>,
}

impl Tombstones {
    pub(crate) fn insert(&mut self, t: Tombstone, capacity: usize, now: Timestamp) {
        self.sweep(now);
        while self.by_registration.len() >= capacity.max(1) {
            match self.order.pop_front() {
                Some(id) => self.remove(&id),
                None => break,
            }
        }
        let id = t.registration_id.clone();
        self.by_instance.insert((t.type_id.clone(), t.instance_id.clone()), id.clone());
        self.by_type.insert(t.type_id.clone(), id.clone());
        self.order.push_back(id.clone());
        self.by_registration.insert(id, t);
    }

    fn remove(&mut self, id: &Arc<str>) {
        if let Some(t) = self.by_registration.remove(id) {
            let key = (t.type_id.clone(), t.instance_id.clone());
            if self.by_instance.get(&key) == Some(id) {
                self.by_instance.remove(&key);
            }
            if self.by_type.get(&t.type_id) == Some(id) {
                self.by_type.remove(&t.type_id);
            }
        }
    }

    /// Forgets expired tombstones (they expire in insertion order, the lifetime being fixed).
    pub(crate) fn sweep(&mut self, now: Timestamp) {
        while let Some(id) = self.order.front() {
            match self.by_registration.get(id) {
                Some(t) if t.expires_at > now => break,
                _ => {
                    let id = self.order.pop_front().expect("front exists");
                    self.remove(&id);
                }
            }
        }
    }

    fn live(&self, id: &str, now: Timestamp) -> Option<&Tombstone> {
        self.by_registration.get(id).filter(|t| t.expires_at > now)
    }

    pub(crate) fn by_registration(&self, id: &str, now: Timestamp) -> Option<&Tombstone> {
        self.live(id, now)
    }

    pub(crate) fn by_instance(&self, type_id: &str, instance_id: &str, now: Timestamp) -> Option<&Tombstone> {
        let key = (Arc::from(type_id), Arc::from(instance_id));
        self.by_instance.get(&key).and_then(|id| self.live(id, now))
    }

    pub(crate) fn by_type(&self, type_id: &str, now: Timestamp) -> Option<&Tombstone> {
        self.by_type.get(type_id).and_then(|id| self.live(id, now))
    }

    pub(crate) fn len(&self) -> usize {
        self.by_registration.len()
    }
}

/// The live state of one capability type.
#[derive(Default)]
pub(crate) struct TypeState {
    pub(crate) capabilities: Vec<Arc<str>>,
    pub(crate) instances: BTreeMap<Arc<str>, Arc<Registration>>,
    /// The surface version of the last change that concerns this type's capabilities (a
    /// definition, a mount, an unmount, an availability change).
    pub(crate) changed_at: u64,
}

/// Everything that changes at run time, behind one lock.
#[derive(Default)]
pub(crate) struct State {
    pub(crate) version: u64,
    pub(crate) capabilities: HashMap<Arc<str>, Arc<CapabilityDef>>,
    pub(crate) types: HashMap<Arc<str>, TypeState>,
    pub(crate) disabled: HashMap<Arc<str>, SafeText>,
    pub(crate) registrations: HashMap<Arc<str>, Arc<Registration>>,
    pub(crate) tombstones: Tombstones,
}

impl State {
    /// Starts a change that concerns `type_id`: bumps the version and the type's mark.
    pub(crate) fn touch(&mut self, type_id: &str) -> u64 {
        self.version += 1;
        let v = self.version;
        if let Some(t) = self.types.get_mut(type_id) {
            t.changed_at = v;
        }
        v
    }
}
