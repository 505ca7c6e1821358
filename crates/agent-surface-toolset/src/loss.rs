//! What a provider's tool definition loses of a capability's input schema: [`Loss`],
//! [`lossy_conversions`], and the once-per-capability warning on the operator channel.

use std::collections::HashSet;
use std::fmt;
use std::hash::{DefaultHasher, Hash, Hasher};
use std::sync::{Mutex, PoisonError};

use agent_surface_registry::{CapabilityDescriptor, Snapshot};

use crate::provider::Provider;
use crate::schema::{LossKind, gemini_conversion};

/// One piece of a capability's input schema that a provider's tool definition does not carry.
///
/// The model writing the call does not see it; the registry still validates the call against
/// the whole schema and answers `INVALID_INPUT` with the issues, so what is lost costs a round
/// trip, not correctness. [`lossy_conversions`] lists them; the toolset warns about them.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub struct Loss {
    /// The capability (`type.capability`).
    pub capability: String,
    /// The provider whose dialect loses it.
    pub provider: Provider,
    /// Where, as a JSON Pointer into the capability's input schema with its `$ref`s followed
    /// (the path of the value the subschema describes: `/properties/labels`, `""` for the root).
    pub pointer: String,
    /// What is lost.
    pub kind: LossKind,
}

impl fmt::Display for Loss {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} for {} at #{}: {}", self.capability, self.provider, self.pointer, self.kind)
    }
}

/// What `provider`'s tool definitions lose of the input schemas of the snapshot's capabilities,
/// in the snapshot's (name) order, then by place in the schema. Empty when they carry every
/// schema whole: assert it in a test suite (the testing kit's service lint does).
///
/// - **Gemini** takes the schema as `parameters`, an OpenAPI 3.0 subset ([`crate::gemini_schema`]),
///   or, when that cannot type every node or would drop a map's value type, as
///   `parametersJsonSchema` ([`crate::gemini_parameters`]). Either way a recursive type below its
///   first recursion, `$ref` chains deeper than 8, `exclusiveMinimum`/`exclusiveMaximum`/
///   `multipleOf`/`uniqueItems`, and string formats other than `date-time` are lost
///   ([`LossKind`]). Not losses: what it rewrites into an equivalent (type arrays, `oneOf` as
///   `anyOf`, any value as the `anyOf` of every type, `enum` values Gemini cannot list as an enum
///   listed in the description), a map's value type and an open object (`parametersJsonSchema`
///   keeps them), `additionalProperties: false` (the model fills declared properties; the registry
///   refuses others) and annotations (`readOnly`, `deprecated`, `x-…`, examples).
/// - **OpenAI** (Chat Completions and Responses) and **Anthropic** take the schema as it is
///   (without `$schema`): nothing is lost. A schema outside OpenAI's strict subset is sent
///   without `strict: true` ([`crate::openai_strict_eligible`]), whole.
///
/// ```
/// use agent_surface_core::{AgentSurfaceError, Effect};
/// use agent_surface_policy::Consumer;
/// use agent_surface_registry::{Registry, RegistryConfig};
/// use agent_surface_toolset::{LossKind, Provider, lossy_conversions};
/// use schemars::JsonSchema;
/// use serde::Deserialize;
/// use std::collections::{HashMap, HashSet};
///
/// #[derive(Deserialize, JsonSchema)]
/// struct Tags {
///     /// Tag name to weight: a map, which Gemini gets whole.
///     weights: HashMap<String, u32>,
///     /// The tags, each once: Gemini has no `uniqueItems`.
///     tags: HashSet<String>,
/// }
///
/// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
/// let registry = Registry::new(RegistryConfig::default());
/// registry.define("notes", |t| {
///     t.capability("tag", "Tag a note.").effect(Effect::Write).handle(|i: Tags| async move {
///         Ok::<_, AgentSurfaceError>((i.weights.len() + i.tags.len()) as u64)
///     });
/// })?;
/// let _mounted = registry.mount("notes", "main")?;
/// let snapshot = registry.snapshot(&Consumer::anonymous("lint")).await;
///
/// assert!(lossy_conversions(&snapshot, Provider::Anthropic).is_empty());
/// let lost = lossy_conversions(&snapshot, Provider::Gemini);
/// assert_eq!(lost.len(), 1);
/// let unique = LossKind::Keyword { keyword: "uniqueItems".into() };
/// assert_eq!((lost[0].pointer.as_str(), &lost[0].kind), ("/properties/tags", &unique));
/// assert_eq!(lost[0].to_string(), "notes.tag for gemini at #/properties/tags: `uniqueItems` is dropped");
/// # Ok::<_, agent_surface_core::DefinitionError>(())
/// # }).unwrap();
/// ```
pub fn lossy_conversions(snapshot: &Snapshot, provider: Provider) -> Vec<Loss> {
    snapshot.capabilities.iter().flat_map(|c| capability_losses(provider, c)).collect()
}

/// What `provider`'s tool definition of `capability` loses.
fn capability_losses(provider: Provider, capability: &CapabilityDescriptor) -> Vec<Loss> {
    match provider {
        Provider::Gemini => losses(provider, capability, gemini_conversion(&capability.input_schema).1),
        Provider::OpenAiChat | Provider::OpenAiResponses | Provider::Anthropic => Vec::new(),
    }
}

/// The conversion's findings as [`Loss`]es of `capability`.
pub(crate) fn losses(
    provider: Provider,
    capability: &CapabilityDescriptor,
    found: Vec<(String, LossKind)>,
) -> Vec<Loss> {
    found
        .into_iter()
        .map(|(pointer, kind)| Loss { capability: capability.name.clone(), provider, pointer, kind })
        .collect()
}

/// The most distinct (capability, provider, losses) the warning remembers; past it, it forgets
/// them all and may warn about each once more.
const WARNED_CAPACITY: usize = 4096;

/// The (capability, provider, losses) already warned about in this process, by digest.
static WARNED: Mutex<Option<HashSet<u64>>> = Mutex::new(None);

/// Warns on the operator channel (`agent_surface::toolset`), once per process for each
/// capability, provider and set of losses, that `provider`'s tool definition loses `losses`.
pub(crate) fn warn_once(provider: Provider, capability: &CapabilityDescriptor, losses: &[Loss]) {
    if losses.is_empty() {
        return;
    }
    let mut digest = DefaultHasher::new();
    (&capability.name, provider, losses).hash(&mut digest);
    let digest = digest.finish();
    {
        let mut warned = WARNED.lock().unwrap_or_else(PoisonError::into_inner);
        let warned = warned.get_or_insert_with(HashSet::new);
        if warned.len() >= WARNED_CAPACITY {
            warned.clear();
        }
        if !warned.insert(digest) {
            return;
        }
    }
    let lost: Vec<String> = losses.iter().map(|l| format!("at #{}: {}", l.pointer, l.kind)).collect();
    tracing::warn!(
        target: "agent_surface::toolset",
        capability = %capability.name,
        provider = %provider,
        losses = %lost.join("; "),
        "the provider's tool definition loses part of the input schema (the registry still validates it whole)"
    );
}
