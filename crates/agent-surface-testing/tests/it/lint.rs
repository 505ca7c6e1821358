//! The service lint finds every problem at once, and nothing in a service that keeps the rules.

use std::collections::HashSet;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;

use agent_surface_core::{AgentSurfaceError, Effect};
use agent_surface_policy::{AllowAll, AuthorityDecision, AuthorityPolicy, FnPolicy, Policies};
use agent_surface_registry::{Mount, Registry, RegistryConfig};
use agent_surface_testing::{ServiceLint, ServiceProblem, assert_service, check_service};
use agent_surface_toolset::{Provider, lossy_conversions};
use futures_util::FutureExt;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// A note's tags, each once: a set, whose `uniqueItems` Gemini drops.
#[derive(Deserialize, JsonSchema)]
#[expect(dead_code, reason = "read through its schema only")]
struct Tags {
    /// The tags, each once.
    tags: HashSet<String>,
    note: String,
}

/// A count.
#[derive(Serialize, JsonSchema)]
struct Count {
    /// How many.
    n: u64,
}

/// A query with every property described.
#[derive(Deserialize, JsonSchema)]
#[expect(dead_code, reason = "read through its schema only")]
struct Query {
    /// What to look for.
    text: String,
}

/// `notes.tag` (a set input, an undescribed property, no output schema), `notes.count` (clean)
/// and `reports.export` (clean), mounted on a registry under `authority`.
fn registry(authority: Option<Arc<dyn AuthorityPolicy>>) -> (Registry, Vec<Mount>) {
    let registry = Registry::new(RegistryConfig { authority, ..Default::default() });
    registry
        .define("notes", |t| {
            t.capability("tag", "Tag a note.")
                .effect(Effect::Write)
                .handle(|_: Tags| async move { Ok::<_, AgentSurfaceError>(Value::Null) });
            t.capability("count", "Count the notes.")
                .effect(Effect::Read)
                .idempotent()
                .handle(|_: Query| async move { Ok::<_, AgentSurfaceError>(Count { n: 3 }) });
        })
        .expect("defines");
    registry
        .define("reports", |t| {
            t.capability("export", "Export a report.")
                .effect(Effect::Read)
                .idempotent()
                .handle(|_: Query| async move { Ok::<_, AgentSurfaceError>(Count { n: 1 }) });
        })
        .expect("defines");
    let mounts =
        vec![registry.mount("notes", "main").expect("mounts"), registry.mount("reports", "main").expect("mounts")];
    (registry, mounts)
}

/// The problems the lint finds in `registry`, one line each.
fn lines(registry: &Registry, lint: &ServiceLint) -> Vec<String> {
    let problems = check_service(registry, lint).now_or_never().expect("no policy waits");
    problems.iter().map(ToString::to_string).collect()
}

#[test]
fn every_problem_is_listed_not_only_the_first() {
    let policies = Policies::default_allow().for_type("notes", AllowAll);
    let (registry, _mounts) = registry(Some(Arc::new(policies)));
    let lint = ServiceLint::new().providers(Provider::ALL, lossy_conversions);
    let problems = check_service(&registry, &lint).now_or_never().expect("no policy waits");
    let kinds: Vec<(&str, &str)> = problems
        .iter()
        .map(|p| {
            let kind = match p {
                ServiceProblem::NoAuthorityRule { .. } => "no-rule",
                ServiceProblem::Lossy { provider, .. } => provider.as_str(),
                ServiceProblem::NoOutputSchema { .. } => "no-output",
                ServiceProblem::NoPropertyDescription { property, .. } => property.as_str(),
                other => panic!("unexpected {other}"),
            };
            (p.capability().expect("about a capability"), kind)
        })
        .collect();
    assert_eq!(
        kinds,
        [("notes.tag", "gemini"), ("notes.tag", "no-output"), ("notes.tag", "note"), ("reports.export", "no-rule")]
    );

    let message = AssertUnwindSafe(assert_service(&registry, &lint)).catch_unwind().now_or_never().expect("ready");
    let message = *message.expect_err("the lint fails").downcast::<String>().expect("a message");
    let expected = "the service lint found 4 problem(s):\n  \
        - notes.tag for gemini at #/properties/tags: `uniqueItems` is dropped\n  \
        - notes.tag: declares no output schema (return a type that derives `JsonSchema`, not `serde_json::Value` or `()`)\n  \
        - notes.tag: input property `note` has no description (a doc comment on the field)\n  \
        - reports.export: no authority rule names it; the default-allow fallback lets it through (name it with \
        `Policies::for_type` or `Policies::for_capability`, or start from `Policies::default_deny()`)";
    assert_eq!(message, expected);
}

#[test]
fn under_default_deny_an_unnamed_capability_is_unreachable_not_a_problem() {
    let policies = Policies::default_deny().for_type("notes", AllowAll);
    let (registry, _mounts) = registry(Some(Arc::new(policies)));
    let found = lines(&registry, &ServiceLint::new());
    assert!(found.iter().all(|l| !l.starts_with("reports.export")), "{found:#?}");
    // The providers were not enabled: only the output schema and the description remain.
    assert_eq!(found.len(), 2, "{found:#?}");
}

#[test]
fn no_authority_policy_is_one_problem() {
    let (registry, _mounts) = registry(None);
    let found = lines(&registry, &ServiceLint::new());
    assert!(found[0].starts_with("the registry has no authority policy"), "{found:#?}");
    assert!(found.iter().all(|l| !l.contains("no authority rule")), "{found:#?}");
}

#[test]
fn a_policy_that_names_nothing_cannot_show_a_rule() {
    let anyone = FnPolicy::new("anyone", |_call| Ok(AuthorityDecision::Allow));
    let (registry, _mounts) = registry(Some(Arc::new(anyone)));
    let found = lines(&registry, &ServiceLint::new());
    let unruled: Vec<&String> = found.iter().filter(|l| l.contains("no authority rule")).collect();
    assert_eq!(unruled.len(), 3, "{found:#?}");
    assert!(unruled[0].contains("`anyone` is not a `Policies` engine"), "{}", unruled[0]);
}
