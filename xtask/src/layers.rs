//! The crate graph shows the layers of `ARCHITECTURE.md`: each workspace crate names its layer in
//! its own manifest,
//!
//! ```toml
//! [package.metadata.agent-surface]
//! layer = "store"
//! ```
//!
//! and depends only on workspace crates of the layers its layer's row of [`LAYERS`] allows, read
//! from `cargo metadata`. A crate that names no layer, or a layer not in the table, fails the
//! check, so a new crate cannot slip past it.
//!
//! Normal and build dependencies count; dev-dependencies do not (a crate's tests may use the
//! testing kit, which sits above it).

use std::path::Path;
use std::process::Command;

use anyhow::{Context, Result, bail};
use serde_json::Value;

/// The layers, each with the layers its crates may depend on. Nothing depends upward and the
/// adapters (the toolset, the transports, the testing kit) never depend on each other; the
/// application (the demo), the fuzz drivers, the example of `docs/guide.md` and xtask sit on top.
/// A layer does not list itself: crates of one layer do not depend on one another.
const LAYERS: &[(&str, &[&str])] = &[
    // agent-surface-core: the error model.
    ("core", &[]),
    // agent-surface-server: serving an HTTP router with limits; knows nothing of the rest.
    ("server", &[]),
    // agent-surface-policy: policies, clocks and the store traits.
    ("policy", &["core"]),
    // agent-surface-registry: capabilities and the invocation pipeline.
    ("registry", &["core", "policy"]),
    // The client side: it speaks to a server over MCP, so it needs the error model only.
    ("client", &["core"]),
    // The shared store backends (Redis, SQLite, PostgreSQL): the traits of the policy crate.
    ("store", &["core", "policy"]),
    // agent-surface-oauth: an authenticator for the policy crate's hook.
    ("auth", &["policy"]),
    // The in-process adapter (the toolset): the registry, no serving.
    ("adapter", &["core", "policy", "registry"]),
    // The transports (MCP, HTTP): the registry served over the wire.
    ("transport", &["core", "policy", "registry", "server"]),
    // The testing kit: drives the registry and the stores; no transport.
    ("kit", &["core", "policy", "registry"]),
    // `agent-surface`, the one dependency of an application: it re-exports the parts and serves
    // them together.
    ("facade", &["core", "policy", "registry", "server", "transport", "auth", "store"]),
    // The demo: any part, but neither the facade nor the testing kit.
    ("application", &["core", "policy", "registry", "server", "adapter", "transport", "auth", "store"]),
    // The fuzz drivers: the entry points an agent's input reaches (the pipeline, the toolset, the
    // transports); as before layers were declared in manifests, no stores, no auth, no server.
    ("fuzz", &["core", "policy", "registry", "adapter", "transport"]),
    // The example of `docs/guide.md`: the facade only, as an application outside the workspace.
    ("example", &["facade"]),
    // xtask: the error model's matrix, nothing that slows its build.
    ("tool", &["core"]),
];

/// One workspace crate as the check sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Member {
    name: String,
    /// What `[package.metadata.agent-surface] layer` says, if anything.
    layer: Option<String>,
    /// The workspace crates it depends on (normal and build dependencies).
    deps: Vec<String>,
}

/// Reads the workspace's crate graph with `cargo metadata` and checks it against [`LAYERS`].
pub(crate) fn check(root: &Path) -> Result<()> {
    check_graph(&workspace_graph(&metadata(root)?))
}

/// The workspace's `cargo metadata` (its own packages, no dependencies).
pub(crate) fn metadata(root: &Path) -> Result<Value> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_string());
    let out = Command::new(cargo)
        .args(["metadata", "--format-version", "1", "--no-deps", "--offline"])
        .current_dir(root)
        .output()
        .context("cannot run `cargo metadata`")?;
    if !out.status.success() {
        bail!("`cargo metadata` failed: {}", String::from_utf8_lossy(&out.stderr));
    }
    serde_json::from_slice(&out.stdout).context("`cargo metadata` printed no JSON")
}

/// Each workspace crate, its declared layer and the workspace crates it depends on.
fn workspace_graph(metadata: &Value) -> Vec<Member> {
    let packages = metadata["packages"].as_array().cloned().unwrap_or_default();
    let names: Vec<&str> = packages.iter().filter_map(|p| p["name"].as_str()).collect();
    packages
        .iter()
        .map(|p| Member {
            name: p["name"].as_str().unwrap_or_default().to_string(),
            layer: p["metadata"]["agent-surface"]["layer"].as_str().map(str::to_string),
            deps: p["dependencies"]
                .as_array()
                .into_iter()
                .flatten()
                .filter(|d| d["kind"].as_str() != Some("dev"))
                .filter_map(|d| d["name"].as_str())
                .filter(|d| names.contains(d))
                .map(str::to_string)
                .collect(),
        })
        .collect()
}

fn check_graph(graph: &[Member]) -> Result<()> {
    let known = || LAYERS.iter().map(|(l, _)| *l).collect::<Vec<_>>().join(", ");
    let layer_of = |name: &str| graph.iter().find(|m| m.name == name).and_then(|m| m.layer.as_deref());
    let mut problems = Vec::new();
    for member in graph {
        let name = &member.name;
        let Some(layer) = member.layer.as_deref() else {
            problems.push(format!(
                "`{name}` names no layer: add `[package.metadata.agent-surface] layer = \"…\"` to its Cargo.toml \
                 (one of: {})",
                known()
            ));
            continue;
        };
        let Some((_, allowed)) = LAYERS.iter().find(|(l, _)| *l == layer) else {
            problems.push(format!(
                "`{name}` names the layer `{layer}`, which is not in the layer table of xtask/src/layers.rs (one of: {})",
                known()
            ));
            continue;
        };
        for dep in &member.deps {
            // A dependency without a known layer is reported on its own line.
            let Some(dep_layer) = layer_of(dep).filter(|l| LAYERS.iter().any(|(k, _)| k == l)) else { continue };
            if !allowed.contains(&dep_layer) {
                problems.push(format!(
                    "`{name}` ({layer}) depends on `{dep}` ({dep_layer}), which the layer `{layer}` does not allow"
                ));
            }
        }
    }
    if !problems.is_empty() {
        bail!("the crate graph breaks the layers of ARCHITECTURE.md:\n  {}", problems.join("\n  "));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn member(name: &str, layer: Option<&str>, deps: &[&str]) -> Member {
        Member {
            name: name.to_string(),
            layer: layer.map(str::to_string),
            deps: deps.iter().map(|d| d.to_string()).collect(),
        }
    }

    /// The parts the cases below depend on, each in its layer.
    fn parts() -> Vec<Member> {
        vec![
            member("agent-surface-core", Some("core"), &[]),
            member("agent-surface-policy", Some("policy"), &["agent-surface-core"]),
            member("agent-surface-registry", Some("registry"), &["agent-surface-core", "agent-surface-policy"]),
            member("agent-surface-server", Some("server"), &[]),
            member("agent-surface-http", Some("transport"), &["agent-surface-registry", "agent-surface-server"]),
        ]
    }

    fn with(extra: Member) -> Vec<Member> {
        let mut graph = parts();
        graph.push(extra);
        graph
    }

    #[test]
    fn the_crate_graph_follows_the_layers() {
        if let Err(e) = check(&crate::workspace_root()) {
            panic!("{e:#}");
        }
    }

    #[test]
    fn an_adapter_on_an_adapter_and_an_upward_dependency_fail() {
        let mcp = |deps: &[&str]| member("agent-surface-mcp", Some("transport"), deps);
        assert!(check_graph(&with(mcp(&["agent-surface-core", "agent-surface-registry"]))).is_ok());
        let err = check_graph(&with(mcp(&["agent-surface-http"]))).unwrap_err().to_string();
        assert!(err.contains("`agent-surface-mcp` (transport) depends on `agent-surface-http` (transport)"), "{err}");
        let mut graph = parts();
        graph[0].deps.push("agent-surface-policy".into());
        let err = check_graph(&graph).unwrap_err().to_string();
        assert!(err.contains("`agent-surface-core` (core) depends on `agent-surface-policy` (policy)"), "{err}");
        let store = member("agent-surface-new", Some("store"), &["agent-surface-registry"]);
        let err = check_graph(&with(store)).unwrap_err().to_string();
        assert!(err.contains("`agent-surface-new` (store) depends on `agent-surface-registry`"), "{err}");
    }

    #[test]
    fn a_crate_without_a_layer_or_with_an_unknown_one_fails() {
        let err = check_graph(&with(member("agent-surface-new", None, &[]))).unwrap_err().to_string();
        assert!(
            err.contains("`agent-surface-new` names no layer") && err.contains("[package.metadata.agent-surface]"),
            "{err}"
        );
        let err = check_graph(&with(member("agent-surface-new", Some("stores"), &[]))).unwrap_err().to_string();
        assert!(err.contains("`agent-surface-new` names the layer `stores`, which is not in the layer table"), "{err}");
    }

    /// A new store backend needs no edit here: its manifest's layer is enough, and the facade and
    /// the demo may depend on it.
    #[test]
    fn a_new_store_crate_is_placed_by_its_manifest_alone() {
        let metadata = serde_json::json!({"packages": [
            {"name": "agent-surface-core", "metadata": {"agent-surface": {"layer": "core"}}, "dependencies": []},
            {"name": "agent-surface-policy", "metadata": {"agent-surface": {"layer": "policy"}},
             "dependencies": [{"name": "agent-surface-core", "kind": null}]},
            {"name": "agent-surface-new", "metadata": {"agent-surface": {"layer": "store"}},
             "dependencies": [{"name": "agent-surface-policy", "kind": null}, {"name": "serde", "kind": null},
                              {"name": "agent-surface-testing", "kind": "dev"}]},
            {"name": "agent-surface-testing", "metadata": {"agent-surface": {"layer": "kit"}},
             "dependencies": [{"name": "agent-surface-policy", "kind": null}]},
            {"name": "agent-surface", "metadata": {"agent-surface": {"layer": "facade"}},
             "dependencies": [{"name": "agent-surface-new", "kind": null}]},
            {"name": "agent-surface-demo", "metadata": {"agent-surface": {"layer": "application"}},
             "dependencies": [{"name": "agent-surface-new", "kind": null}]},
            {"name": "agent-surface-unplaced", "metadata": null, "dependencies": []}
        ]});
        let graph = workspace_graph(&metadata);
        assert_eq!(
            graph[2],
            member("agent-surface-new", Some("store"), &["agent-surface-policy"]),
            "dev-dependencies do not count"
        );
        assert_eq!(graph[6], member("agent-surface-unplaced", None, &[]));
        let err = check_graph(&graph).unwrap_err().to_string();
        assert_eq!(err.matches("\n  ").count(), 1, "{err}");
        assert!(err.contains("`agent-surface-unplaced` names no layer"), "{err}");
        assert!(check_graph(&graph[..6]).is_ok());
    }

    #[test]
    fn the_layer_table_names_its_own_layers_and_no_layer_allows_itself() {
        for (layer, allowed) in LAYERS {
            assert!(!allowed.contains(layer), "`{layer}` allows itself");
            for a in *allowed {
                assert!(LAYERS.iter().any(|(l, _)| l == a), "`{layer}` allows `{a}`, which is no layer");
            }
            assert_eq!(LAYERS.iter().filter(|(l, _)| l == layer).count(), 1, "`{layer}` has two rows");
        }
    }
}
