//! The crate graph shows the layers of `ARCHITECTURE.md`: each workspace crate depends only on
//! the workspace crates its row of [`LAYERS`] allows, read from `cargo metadata`.
//!
//! Normal and build dependencies count; dev-dependencies do not (a crate's tests may use the
//! testing kit, which sits above it).

use std::path::Path;
use std::process::Command;

use anyhow::{Context, Result, bail};
use serde_json::Value;

const CORE: &str = "agent-surface-core";
const POLICY: &str = "agent-surface-policy";
const REGISTRY: &str = "agent-surface-registry";
const SERVER: &str = "agent-surface-server";
const TOOLSET: &str = "agent-surface-toolset";
const MCP: &str = "agent-surface-mcp";
const HTTP: &str = "agent-surface-http";
const OAUTH: &str = "agent-surface-oauth";
const REDIS: &str = "agent-surface-redis";
const SQLITE: &str = "agent-surface-sqlite";
const POSTGRES: &str = "agent-surface-postgres";
const CLIENT: &str = "agent-surface-client";

/// For each workspace crate, the workspace crates it may depend on. Nothing depends upward and
/// the adapters (toolset, MCP, HTTP, the testing kit) never depend on each other; the
/// applications (demo, fuzz, the example of `docs/guide.md`, xtask) sit on top.
const LAYERS: &[(&str, &[&str])] = &[
    (CORE, &[]),
    (POLICY, &[CORE]),
    (REGISTRY, &[CORE, POLICY]),
    (TOOLSET, &[CORE, POLICY, REGISTRY]),
    (MCP, &[CORE, POLICY, REGISTRY, SERVER]),
    (HTTP, &[CORE, POLICY, REGISTRY, SERVER]),
    ("agent-surface-testing", &[CORE, POLICY, REGISTRY]),
    (SERVER, &[]),
    // The client side: it speaks to a server over MCP, so it needs the error model only.
    (CLIENT, &[CORE]),
    (REDIS, &[CORE, POLICY]),
    (SQLITE, &[CORE, POLICY]),
    (POSTGRES, &[CORE, POLICY]),
    (OAUTH, &[POLICY]),
    // The one dependency of an application: it re-exports the parts and serves them together.
    ("agent-surface", &[CORE, POLICY, REGISTRY, SERVER, MCP, HTTP, OAUTH, REDIS, SQLITE, POSTGRES]),
    ("agent-surface-demo", &[CORE, POLICY, REGISTRY, SERVER, TOOLSET, MCP, HTTP, OAUTH, REDIS, SQLITE, POSTGRES]),
    ("agent-surface-fuzz", &[CORE, POLICY, REGISTRY, TOOLSET, MCP, HTTP]),
    ("agent-surface-example-tickets", &["agent-surface"]),
    ("xtask", &[CORE]),
];

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

/// Each workspace crate and the workspace crates it depends on (normal and build dependencies).
fn workspace_graph(metadata: &Value) -> Vec<(String, Vec<String>)> {
    let packages = metadata["packages"].as_array().cloned().unwrap_or_default();
    let names: Vec<&str> = packages.iter().filter_map(|p| p["name"].as_str()).collect();
    packages
        .iter()
        .map(|p| {
            let deps = p["dependencies"]
                .as_array()
                .into_iter()
                .flatten()
                .filter(|d| d["kind"].as_str() != Some("dev"))
                .filter_map(|d| d["name"].as_str())
                .filter(|d| names.contains(d))
                .map(str::to_string)
                .collect();
            (p["name"].as_str().unwrap_or_default().to_string(), deps)
        })
        .collect()
}

fn check_graph(graph: &[(String, Vec<String>)]) -> Result<()> {
    let mut problems = Vec::new();
    for (name, deps) in graph {
        let Some((_, allowed)) = LAYERS.iter().find(|(n, _)| n == name) else {
            problems.push(format!("`{name}` has no row in the layer table (xtask/src/layers.rs)"));
            continue;
        };
        for dep in deps {
            if !allowed.contains(&dep.as_str()) {
                problems.push(format!("`{name}` depends on `{dep}`, which its layer does not allow"));
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

    #[test]
    fn the_crate_graph_follows_the_layers() {
        if let Err(e) = check(&crate::workspace_root()) {
            panic!("{e:#}");
        }
    }

    #[test]
    fn an_adapter_on_an_adapter_and_an_upward_dependency_fail() {
        let graph = |name: &str, deps: &[&str]| vec![(name.to_string(), deps.iter().map(|d| d.to_string()).collect())];
        assert!(check_graph(&graph(MCP, &[CORE, REGISTRY])).is_ok());
        let err = check_graph(&graph(MCP, &[HTTP])).unwrap_err().to_string();
        assert!(err.contains("`agent-surface-mcp` depends on `agent-surface-http`"), "{err}");
        let err = check_graph(&graph(CORE, &[POLICY])).unwrap_err().to_string();
        assert!(err.contains("`agent-surface-core` depends on `agent-surface-policy`"), "{err}");
        let err = check_graph(&graph("agent-surface-new", &[])).unwrap_err().to_string();
        assert!(err.contains("no row"), "{err}");
    }
}
