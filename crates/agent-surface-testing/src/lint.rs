//! The service lint: one call that holds a registry to the rules of a surface agents can use
//! well — every reachable capability has an authority rule written for it, every schema reaches
//! every provider whole, every capability declares its output and describes its input.

use std::any::Any;
use std::collections::BTreeMap;
use std::fmt;

use agent_surface_policy::{AuthorityPolicy, Consumer, Fallback, Policies, Scope};
use agent_surface_registry::schema::resolve_ref;
use agent_surface_registry::{CapabilityDescriptor, Registry, Snapshot};
use serde_json::Value;

/// The losses of one provider's conversion of a one-capability snapshot, as text.
type Losses = Box<dyn Fn(&Snapshot) -> Vec<String> + Send + Sync>;

/// What [`assert_service`] checks, beyond what it always checks (authority rules, output
/// schemas, descriptions): the providers whose conversions must be lossless, and the consumers
/// whose view is linted.
///
/// The testing kit does not depend on the adapters, so a provider is named with the function
/// that lists its conversion's losses — for the embedded toolset,
/// `agent_surface_toolset::lossy_conversions`:
///
/// ```
/// use agent_surface_policy::{Consumer, Identity};
/// use agent_surface_testing::ServiceLint;
/// use agent_surface_toolset::{Provider, lossy_conversions};
///
/// let lint = ServiceLint::new()
///     .providers(Provider::ALL, lossy_conversions)
///     .seen_by(Consumer::authenticated("lint", Identity::new("root").with_role("admin")));
/// // … then `assert_service(&registry, &lint).await` in a test.
/// # drop(lint);
/// ```
#[derive(Default)]
pub struct ServiceLint {
    /// Whose snapshots are linted (their union); none means one anonymous consumer.
    consumers: Vec<Consumer>,
    /// Each enabled provider and its losses.
    providers: Vec<(String, Losses)>,
}

impl fmt::Debug for ServiceLint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let providers: Vec<&str> = self.providers.iter().map(|(p, _)| p.as_str()).collect();
        f.debug_struct("ServiceLint").field("consumers", &self.consumers).field("providers", &providers).finish()
    }
}

impl ServiceLint {
    /// A lint of the capabilities an anonymous consumer sees, with no provider enabled.
    pub fn new() -> ServiceLint {
        ServiceLint::default()
    }

    /// Enables `providers`: each capability's input schema must convert to each of them with no
    /// loss, as `losses(snapshot, provider)` reports it (one entry per loss, printed as its
    /// `Display` writes it; the toolset's `Loss` names the capability, the provider and the
    /// place).
    ///
    /// ```
    /// use agent_surface_registry::Snapshot;
    /// use agent_surface_testing::ServiceLint;
    ///
    /// // A provider that loses nothing, named by a string.
    /// fn lossless(_: &Snapshot, _: &str) -> Vec<String> { Vec::new() }
    /// let lint = ServiceLint::new().providers(["plain"], lossless);
    /// assert_eq!(format!("{lint:?}"), r#"ServiceLint { consumers: [], providers: ["plain"] }"#);
    /// ```
    pub fn providers<P, L>(mut self, providers: impl IntoIterator<Item = P>, losses: fn(&Snapshot, P) -> Vec<L>) -> Self
    where
        P: Copy + fmt::Display + Send + Sync + 'static,
        L: fmt::Display + 'static,
    {
        for provider in providers {
            let check = move |snapshot: &Snapshot| losses(snapshot, provider).iter().map(L::to_string).collect();
            self.providers.push((provider.to_string(), Box::new(check)));
        }
        self
    }

    /// Lints what `consumer` sees too. A capability the authority policy hides from every
    /// linted consumer is not checked: add a consumer who sees it (an administrator, say).
    pub fn seen_by(mut self, consumer: Consumer) -> Self {
        self.consumers.push(consumer);
        self
    }
}

/// One problem the service lint found.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum ServiceProblem {
    /// The registry has no authority policy: every capability is callable by every consumer and
    /// no rule names any.
    NoAuthorityPolicy,
    /// A capability the authority policy lets through with no rule written for it.
    NoAuthorityRule {
        /// The capability.
        capability: String,
        /// Why the lint says so (the default-allow fallback, or a policy whose scopes do not
        /// cover it).
        why: String,
    },
    /// A capability's input schema loses something on its way to a provider.
    Lossy {
        /// The capability.
        capability: String,
        /// The provider.
        provider: String,
        /// The loss, as the provider's loss function writes it.
        loss: String,
    },
    /// A capability declares no output schema.
    NoOutputSchema {
        /// The capability.
        capability: String,
    },
    /// A capability's description is empty.
    NoDescription {
        /// The capability.
        capability: String,
    },
    /// A top-level property of a capability's input schema has no description.
    NoPropertyDescription {
        /// The capability.
        capability: String,
        /// The property.
        property: String,
    },
}

impl ServiceProblem {
    /// The capability the problem is about, if it is about one.
    pub fn capability(&self) -> Option<&str> {
        match self {
            ServiceProblem::NoAuthorityPolicy => None,
            ServiceProblem::NoAuthorityRule { capability, .. }
            | ServiceProblem::Lossy { capability, .. }
            | ServiceProblem::NoOutputSchema { capability }
            | ServiceProblem::NoDescription { capability }
            | ServiceProblem::NoPropertyDescription { capability, .. } => Some(capability),
        }
    }
}

impl fmt::Display for ServiceProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ServiceProblem::NoAuthorityPolicy => f.write_str(
                "the registry has no authority policy: every capability is callable by every consumer and no rule \
                 names any (set `RegistryConfig::authority`, e.g. to `Policies::default_deny()` with a rule per type)",
            ),
            ServiceProblem::NoAuthorityRule { capability, why } => {
                write!(f, "{capability}: no authority rule names it; {why}")
            }
            ServiceProblem::Lossy { loss, .. } => write!(f, "{loss}"),
            ServiceProblem::NoOutputSchema { capability } => write!(
                f,
                "{capability}: declares no output schema (return a type that derives `JsonSchema`, not \
                 `serde_json::Value` or `()`)"
            ),
            ServiceProblem::NoDescription { capability } => write!(f, "{capability}: its description is empty"),
            ServiceProblem::NoPropertyDescription { capability, property } => {
                write!(f, "{capability}: input property `{property}` has no description (a doc comment on the field)")
            }
        }
    }
}

/// Every problem the service lint finds in `registry`, as [`assert_service`] checks it; empty
/// when there is none.
pub async fn check_service(registry: &Registry, lint: &ServiceLint) -> Vec<ServiceProblem> {
    let anonymous = [Consumer::anonymous("service-lint")];
    let consumers = if lint.consumers.is_empty() { &anonymous[..] } else { &lint.consumers[..] };
    let mut seen: BTreeMap<String, CapabilityDescriptor> = BTreeMap::new();
    let mut snapshot = None;
    for consumer in consumers {
        let s = registry.snapshot(consumer).await;
        for c in &s.capabilities {
            seen.entry(c.name.clone()).or_insert_with(|| c.clone());
        }
        snapshot.get_or_insert(s);
    }
    let Some(mut one) = snapshot else { return Vec::new() };

    let mut problems = Vec::new();
    let authority = registry.config().authority.as_deref();
    if authority.is_none() {
        problems.push(ServiceProblem::NoAuthorityPolicy);
    }
    for (name, c) in &seen {
        if let Some(why) = authority.and_then(|policy| unruled(policy, name)) {
            problems.push(ServiceProblem::NoAuthorityRule { capability: name.clone(), why });
        }
        one.capabilities = vec![c.clone()];
        for (provider, losses) in &lint.providers {
            for loss in losses(&one) {
                problems.push(ServiceProblem::Lossy { capability: name.clone(), provider: provider.clone(), loss });
            }
        }
        if c.output_schema.is_none() {
            problems.push(ServiceProblem::NoOutputSchema { capability: name.clone() });
        }
        if c.description.trim().is_empty() {
            problems.push(ServiceProblem::NoDescription { capability: name.clone() });
        }
        for property in undescribed_properties(&c.input_schema) {
            problems.push(ServiceProblem::NoPropertyDescription { capability: name.clone(), property });
        }
    }
    problems
}

/// Why `policy` lets `capability` through with no rule written for it, if it does.
///
/// A [`Policies`] engine says which rule names a capability ([`Policies::rule_for`]); one that
/// names none lets it through when its fallback allows. Another policy is asked what it is
/// configured for ([`AuthorityPolicy::scopes`]).
fn unruled(policy: &dyn AuthorityPolicy, capability: &str) -> Option<String> {
    let any: &dyn Any = policy;
    if let Some(policies) = any.downcast_ref::<Policies>() {
        let open = policies.rule_for(capability).is_none() && policies.fallback() == Fallback::Allow;
        return open.then(|| {
            "the default-allow fallback lets it through (name it with `Policies::for_type` or \
             `Policies::for_capability`, or start from `Policies::default_deny()`)"
                .to_string()
        });
    }
    let scope = Scope::capability(capability);
    let covered = policy.scopes().iter().any(|s| s.covers(capability, scope.type_id()));
    (!covered).then(|| {
        format!(
            "the authority policy `{}` is not a `Policies` engine and none of its scopes covers it, so no rule \
             can be shown to decide it",
            policy.name()
        )
    })
}

/// The top-level properties of `schema` with no description (on the property, or on the
/// definition it refers to), in order.
fn undescribed_properties(schema: &Value) -> Vec<String> {
    let Some(properties) = schema.get("properties").and_then(Value::as_object) else { return Vec::new() };
    let described = |s: &Value| s.get("description").and_then(Value::as_str).is_some_and(|d| !d.trim().is_empty());
    properties
        .iter()
        .filter(|(_, p)| {
            let target = p.get("$ref").and_then(Value::as_str).and_then(|r| resolve_ref(schema, r));
            !described(p) && !target.is_some_and(described)
        })
        .map(|(name, _)| name.clone())
        .collect()
}

/// Runs the service lint on `registry` and panics with every problem it finds, one a line:
///
/// - a capability the authority policy lets through with no rule written for it — under
///   default-allow, no `Policies::for_type`/`for_capability` names it (a default-deny engine
///   refuses such a capability, so it is no problem); or the registry has no authority policy;
/// - an input schema that a provider enabled with [`ServiceLint::providers`] does not take whole;
/// - no output schema, an empty description, or a top-level input property without a
///   description.
///
/// Only the capabilities the lint's consumers see are checked ([`ServiceLint::seen_by`]).
///
/// ```
/// use std::sync::Arc;
/// use agent_surface_core::{AgentSurfaceError, Effect};
/// use agent_surface_policy::{AllowAll, Policies};
/// use agent_surface_registry::{Registry, RegistryConfig};
/// use agent_surface_testing::{ServiceLint, ServiceProblem, assert_service, check_service};
/// use schemars::JsonSchema;
/// use serde::{Deserialize, Serialize};
///
/// #[derive(Deserialize, JsonSchema)]
/// struct Lookup {
///     /// The invoice number.
///     invoice: String,
/// }
/// #[derive(Serialize, JsonSchema)]
/// struct Invoice { cents: u64 }
///
/// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
/// let define = |registry: &Registry| {
///     registry.define("billing", |t| {
///         t.capability("lookup", "Look up an invoice.").effect(Effect::Read).idempotent().handle(
///             |_: Lookup| async move { Ok::<_, AgentSurfaceError>(Invoice { cents: 1999 }) },
///         );
///     })
/// };
///
/// // Default-allow with no rule: `billing.lookup` is callable though nobody wrote a rule for it.
/// let open = Registry::new(RegistryConfig { authority: Some(Arc::new(Policies::default_allow())), ..Default::default() });
/// define(&open)?;
/// let _mounted = open.mount("billing", "main")?;
/// let problems = check_service(&open, &ServiceLint::new()).await;
/// assert!(matches!(&problems[..], [ServiceProblem::NoAuthorityRule { capability, .. }] if capability == "billing.lookup"));
///
/// // Default-deny, the type named: nothing to say.
/// let policies = Policies::default_deny().for_type("billing", AllowAll);
/// let ruled = Registry::new(RegistryConfig { authority: Some(Arc::new(policies)), ..Default::default() });
/// define(&ruled)?;
/// let _mounted = ruled.mount("billing", "main")?;
/// assert_service(&ruled, &ServiceLint::new()).await;
/// # Ok::<_, agent_surface_core::DefinitionError>(())
/// # }).unwrap();
/// ```
pub async fn assert_service(registry: &Registry, lint: &ServiceLint) {
    let problems = check_service(registry, lint).await;
    if !problems.is_empty() {
        let lines: Vec<String> = problems.iter().map(|p| format!("  - {p}")).collect();
        panic!("the service lint found {} problem(s):\n{}", problems.len(), lines.join("\n"));
    }
}
