//! Discovery: a consumer's [`Snapshot`] of the surface.

use std::sync::Arc;

use agent_surface_core::Effect;
use agent_surface_policy::{AuthorityDecision, Consumer};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::define::{CapabilityDef, Plane};
use crate::registry::Registry;

/// What one consumer sees of a registry at one moment.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub struct Snapshot {
    /// The registry's surface id.
    pub surface_id: String,
    /// The surface version this snapshot reflects.
    pub version: u64,
    /// The visible capabilities, sorted by name.
    pub capabilities: Vec<CapabilityDescriptor>,
}

impl Snapshot {
    /// The descriptor of `name`, if visible.
    pub fn capability(&self, name: &str) -> Option<&CapabilityDescriptor> {
        self.capabilities.iter().find(|c| c.name == name)
    }
}

/// One capability as discovery shows it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub struct CapabilityDescriptor {
    /// The capability name (`type.capability`), used in invoke requests.
    pub name: String,
    /// The tool name for providers and MCP (`type-capability`).
    pub tool_name: String,
    /// The description for the model.
    pub description: String,
    /// The tool's version: a digest of its definition as a caller plans against it
    /// ([`agent_surface_core::tool_version`]), the same on every replica and across restarts;
    /// echoed as [`InvokeRequest::tool_version`](crate::InvokeRequest::tool_version), it makes a
    /// call planned against another definition `STALE_CAPABILITY`. Serialized as `toolVersion`.
    /// Always set by [`Registry::snapshot`]; `None` only in a descriptor read from a server that
    /// lists no versions, whose calls then name none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_version: Option<String>,
    /// The input schema the agent must satisfy (bound fields excluded), with the optional reserved
    /// target argument ([`crate::TARGET_ARGUMENT`]) when several instances this consumer sees can
    /// handle the capability.
    pub input_schema: Value,
    /// The output schema, when the capability declares one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_schema: Option<Value>,
    /// The declared effect.
    pub effect: Effect,
    /// Whether the capability is idempotent.
    pub idempotent: bool,
    /// Whether a call may run long (see `CapabilityBuilder::long_running`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub long_running: bool,
    /// Where it runs.
    pub plane: Plane,
    /// Whether it can be called now.
    pub enabled: bool,
    /// Why not, when disabled (the same string as `CAPABILITY_NOT_AVAILABLE`'s reason).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unavailable_reason: Option<String>,
    /// The live instances that can handle it.
    pub instances: Vec<InstanceDescriptor>,
    /// Author metadata.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub meta: Option<Value>,
}

/// One live instance as discovery shows it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub struct InstanceDescriptor {
    /// The instance id (to name as a call's target).
    pub instance_id: String,
    /// The live registration id.
    pub registration_id: String,
    /// The instance's description.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
}

struct Row {
    def: Arc<CapabilityDef>,
    disabled: Option<String>,
    instances: Vec<InstanceDescriptor>,
}

impl Registry {
    /// The consumer's view of the surface: every capability with at least one live instance
    /// that the authority policy does not hide from this consumer.
    pub async fn snapshot(&self, consumer: &Consumer) -> Snapshot {
        build(self, consumer).await
    }
}

pub(crate) async fn build(registry: &Registry, consumer: &Consumer) -> Snapshot {
    let inner = &registry.inner;
    let (version, rows) = {
        let state = inner.read();
        let mut rows = Vec::new();
        for def in state.capabilities.values() {
            let Some(ty) = state.types.get(&def.type_id) else { continue };
            if ty.instances.is_empty() {
                continue;
            }
            rows.push(Row {
                def: def.clone(),
                disabled: state.disabled.get(&def.name).map(|r| r.as_str().to_string()),
                instances: ty
                    .instances
                    .values()
                    .map(|r| InstanceDescriptor {
                        instance_id: r.instance_id.to_string(),
                        registration_id: r.registration_id.to_string(),
                        description: r.description.clone(),
                    })
                    .collect(),
            });
        }
        (state.version, rows)
    };
    let mut capabilities = Vec::with_capacity(rows.len());
    // The capabilities are decided on together, under one authority budget for the whole
    // snapshot: a stuck policy costs one budget, a slow one the slowest decision, not their sum. A
    // decision not made in time counts as a failed one (denied: shown, refused when called), as in
    // `invoke`. Each capability is asked about as a whole (no instance) and once per live instance,
    // as a call to that instance would be: an instance the policy hides from this consumer is not
    // listed, and a capability none of whose instances is visible is not listed either.
    let decisions: Vec<Option<(AuthorityDecision, Vec<AuthorityDecision>)>> = match &inner.config.authority {
        None => vec![None; rows.len()],
        Some(policy) => {
            let budget = inner.config.authority_budget;
            fn ask<'a>(
                inner: &'a crate::registry::Inner,
                policy: &'a dyn agent_surface_policy::AuthorityPolicy,
                consumer: &'a Consumer,
                row: &'a Row,
                instance: Option<&'a InstanceDescriptor>,
                budget: std::time::Duration,
            ) -> impl std::future::Future<Output = AuthorityDecision> + 'a {
                let mut call = row.def.call_info(consumer);
                if let Some(i) = instance {
                    call = call.with_instance(&i.instance_id).with_registration(&i.registration_id);
                }
                crate::authority::decide(inner.config.clock.as_ref(), policy, call, budget)
            }
            let policy = policy.as_ref();
            let ask = |row, instance| ask(inner, policy, consumer, row, instance, budget);
            let asks = rows.iter().map(|row| {
                let whole = ask(row, None);
                let each = futures_util::future::join_all(row.instances.iter().map(|i| ask(row, Some(i))));
                futures_util::future::join(whole, each)
            });
            futures_util::future::join_all(asks).await.into_iter().map(Some).collect()
        }
    };
    for (mut row, decision) in rows.into_iter().zip(decisions) {
        if let Some((decision, per_instance)) = decision {
            match decision {
                AuthorityDecision::Hide => continue,
                AuthorityDecision::Disable { reason } => {
                    row.disabled.get_or_insert_with(|| reason.as_str().to_string());
                }
                _ => {}
            }
            let mut hidden = per_instance.iter().map(|d| *d == AuthorityDecision::Hide);
            row.instances.retain(|_| !hidden.next().unwrap_or(false));
            if row.instances.is_empty() {
                continue;
            }
        }
        let def = &row.def;
        // Several instances this consumer sees: the model names one through the reserved target
        // argument.
        let input_schema = if row.instances.len() > 1 {
            let instances: Vec<(&str, Option<&str>)> =
                row.instances.iter().map(|i| (i.instance_id.as_str(), i.description.as_deref())).collect();
            crate::schema::with_target_argument(def.input.advertised.as_value(), &instances)
        } else {
            def.input.advertised.as_value().clone()
        };
        capabilities.push(CapabilityDescriptor {
            name: def.name.to_string(),
            tool_name: def.tool_name.clone(),
            description: def.description.clone(),
            tool_version: Some(def.tool_version.to_string()),
            input_schema,
            output_schema: def.output_schema.clone().map(Value::from),
            effect: def.effect,
            idempotent: def.idempotent,
            long_running: def.long_running,
            plane: def.plane,
            enabled: row.disabled.is_none(),
            unavailable_reason: row.disabled,
            instances: row.instances,
            meta: def.meta.clone(),
        });
    }
    capabilities.sort_by(|a, b| a.name.cmp(&b.name));
    Snapshot { surface_id: inner.surface_id.to_string(), version, capabilities }
}
