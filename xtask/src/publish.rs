//! `cargo xtask publish-check`: the published crates stay publishable. `cargo xtask ci` runs it.
//!
//! - every crate that may be published (its `publish` is not `false`) carries the metadata the
//!   crate registry shows (description, license, repository, readme, keywords, categories,
//!   `rust-version`) and both license files;
//! - `cargo package` of all of them together, in dependency order, with each package's sources
//!   built the way the registry would build them (Cargo resolves the packages among themselves
//!   before they are published). It builds in a target folder of its own, and first forgets what
//!   an earlier run left of the packages: Cargo takes a registry package's sources and build for
//!   immutable, so the sources it unpacked into `$CARGO_HOME/registry/src` and the builds it
//!   fingerprinted by version alone would otherwise be reused after the code changed (seen in CI,
//!   where the checkout's path, and so the local registry's folder name, is the same every run);
//! - `cargo clippy -D warnings` of each crate that has features, with no default features and with
//!   each of its features alone; with no default features its tests, benches and examples too
//!   (`--all-targets`), so that a target needing a feature says so (`required-features`, or a
//!   `cfg` on the test module) rather than failing a contributor's build;
//! - `cargo doc` of the workspace with every rustdoc warning an error.

use std::path::Path;

use anyhow::{Result, bail};
use serde_json::Value;

/// A crate that may be published, and its features (without `default`).
pub(crate) struct Published {
    /// The crate's name.
    pub(crate) name: String,
    /// Its features, `default` left out.
    pub(crate) features: Vec<String>,
    /// Its folder.
    dir: std::path::PathBuf,
}

/// The workspace crates whose `publish` is not `false`, in `cargo metadata`'s order.
pub(crate) fn published(metadata: &Value) -> Vec<Published> {
    metadata["packages"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|p| p["publish"].as_array().is_none_or(|registries| !registries.is_empty()))
        .map(|p| Published {
            name: p["name"].as_str().unwrap_or_default().to_string(),
            features: p["features"]
                .as_object()
                .into_iter()
                .flat_map(|f| f.keys())
                .filter(|f| *f != "default")
                .cloned()
                .collect(),
            dir: Path::new(p["manifest_path"].as_str().unwrap_or_default())
                .parent()
                .map(Path::to_path_buf)
                .unwrap_or_default(),
        })
        .collect()
}

/// What the crate registry shows of a crate, missing from `package` (a `cargo metadata` entry).
fn missing_metadata(package: &Value) -> Vec<&'static str> {
    let text = |field: &str| package[field].as_str().is_some_and(|s| !s.trim().is_empty());
    let list = |field: &str| package[field].as_array().is_some_and(|a| !a.is_empty());
    let mut missing = Vec::new();
    for (field, present) in [
        ("description", text("description")),
        ("license", text("license")),
        ("repository", text("repository")),
        ("readme", text("readme")),
        ("rust-version", text("rust_version")),
        ("keywords", list("keywords")),
        ("categories", list("categories")),
    ] {
        if !present {
            missing.push(field);
        }
    }
    if package["repository"].as_str().is_some_and(|r| r.contains("example.invalid")) {
        missing.push("repository (a placeholder)");
    }
    missing
}

/// Checks the metadata and license files of every crate that may be published.
pub(crate) fn check_metadata(metadata: &Value) -> Result<()> {
    let packages = metadata["packages"].as_array().cloned().unwrap_or_default();
    let mut problems = Vec::new();
    for crate_ in published(metadata) {
        let Some(package) = packages.iter().find(|p| p["name"] == crate_.name.as_str()) else { continue };
        for field in missing_metadata(package) {
            problems.push(format!("{}: no {field}", crate_.name));
        }
        for file in ["LICENSE-MIT", "LICENSE-APACHE", "README.md"] {
            if !crate_.dir.join(file).is_file() {
                problems.push(format!("{}: no {file} in {}", crate_.name, crate_.dir.display()));
            }
        }
    }
    if !problems.is_empty() {
        bail!("crates that may be published lack what the crate registry needs:\n  {}", problems.join("\n  "));
    }
    Ok(())
}

/// Removes what an earlier `cargo package` left of the published crates where Cargo would reuse it
/// without looking: their sources unpacked from the temporary local registry into every
/// `$CARGO_HOME/registry/src/*` folder, and every fingerprint of theirs in `target` (the package
/// step's own target folder, so only the verification builds are rebuilt).
fn forget_packaged(metadata: &Value, target: &Path) -> Result<()> {
    let names: Vec<(String, String)> = published(metadata)
        .into_iter()
        .filter_map(|c| {
            let package = metadata["packages"].as_array()?.iter().find(|p| p["name"] == c.name.as_str())?;
            Some((c.name, package["version"].as_str()?.to_string()))
        })
        .collect();
    let cargo_home = std::env::var_os("CARGO_HOME")
        .map(std::path::PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|home| Path::new(&home).join(".cargo")));
    let sources = cargo_home.map(|home| home.join("registry").join("src"));
    for registry in sources.iter().filter_map(|dir| std::fs::read_dir(dir).ok()).flatten().flatten() {
        for (name, version) in &names {
            remove_dir(&registry.path().join(format!("{name}-{version}")))?;
        }
    }
    let fingerprints = target.join("debug").join(".fingerprint");
    for entry in std::fs::read_dir(&fingerprints).into_iter().flatten().flatten() {
        let file = entry.file_name();
        let file = file.to_string_lossy();
        if names.iter().any(|(name, _)| file.strip_prefix(name.as_str()).is_some_and(|hash| hash.starts_with('-'))) {
            remove_dir(&entry.path())?;
        }
    }
    Ok(())
}

/// Removes `dir` and what it holds; a folder that is not there is fine.
fn remove_dir(dir: &Path) -> Result<()> {
    match std::fs::remove_dir_all(dir) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
            Err(anyhow::Error::new(e).context(format!("cannot remove {}", dir.display())))
        }
        _ => Ok(()),
    }
}

/// The whole check (see the module docs).
pub(crate) fn run(root: &Path) -> Result<()> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_string());
    let metadata = crate::layers::metadata(root)?;
    check_metadata(&metadata)?;
    println!("<== publish metadata: ok");
    let crates = published(&metadata);
    let target = Path::new(metadata["target_directory"].as_str().unwrap_or("target")).join("publish-check");
    forget_packaged(&metadata, &target)?;
    let target_arg = target.to_string_lossy().into_owned();
    let mut package = vec!["package", "--allow-dirty", "--target-dir", target_arg.as_str()];
    for c in &crates {
        package.extend(["-p", c.name.as_str()]);
    }
    crate::step::step(root, "package", &cargo, &package)?;
    for c in &crates {
        if c.features.is_empty() {
            continue;
        }
        let base = ["clippy", "-p", c.name.as_str(), "--no-default-features"];
        let lints = ["--", "-D", "warnings"];
        let none = [&base[..], &["--all-targets"], &lints].concat();
        crate::step::step(root, &format!("features {} (none, all targets)", c.name), &cargo, &none)?;
        for feature in &c.features {
            let args = [&base[..], &["--features", feature.as_str()], &lints].concat();
            crate::step::step(root, &format!("features {} ({feature})", c.name), &cargo, &args)?;
        }
    }
    let rustdoc = std::ffi::OsStr::new("-D warnings");
    crate::step::step_with_env(
        root,
        "doc",
        &cargo,
        &["doc", "--workspace", "--no-deps"],
        &[("RUSTDOCFLAGS", rustdoc)],
    )?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn package(name: &str, publish: Value) -> Value {
        json!({
            "name": name, "publish": publish, "manifest_path": format!("/nowhere/{name}/Cargo.toml"),
            "features": {"default": ["a"], "a": [], "b": []},
            "description": "d", "license": "MIT OR Apache-2.0", "repository": "https://example.invalid/x",
            "readme": "README.md", "rust_version": "1.88", "keywords": ["k"], "categories": []
        })
    }

    #[test]
    fn only_crates_that_may_be_published_are_checked_and_what_they_lack_is_named() {
        let metadata = json!({"packages": [package("lib", Value::Null), package("demo", json!([]))]});
        let crates = published(&metadata);
        assert_eq!(crates.iter().map(|c| c.name.as_str()).collect::<Vec<_>>(), ["lib"]);
        assert_eq!(crates[0].features, ["a", "b"]);
        let err = check_metadata(&metadata).expect_err("a placeholder repository, no categories, no files");
        let text = err.to_string();
        for lack in
            ["lib: no categories", "lib: no repository (a placeholder)", "lib: no LICENSE-MIT", "lib: no README.md"]
        {
            assert!(text.contains(lack), "{text}");
        }
        assert!(!text.contains("demo"), "{text}");
    }
}
