//! `cargo xtask build-weight`: what a downstream service pays to build on `agent-surface`, with
//! the default features against the fewest an MCP-stdio service needs, side by side in one run.
//!
//! It writes two throwaway crates outside the workspace (in a temporary folder, or `--dir DIR`)
//! with the same source — a three-capability service on the memory stores served by
//! `Serve::stdio` — that differ only in their dependency on `agent-surface` (by path, on this
//! checkout):
//!
//! - `full`: `agent-surface` with its default features (the set every service paid before the
//!   features existed: stdio, HTTP, the inbox, the operator log, metrics, `anyhow`);
//! - `minimal`: `default-features = false, features = ["stdio"]`.
//!
//! Both take this workspace's `Cargo.lock`, so they resolve to the versions the workspace tests.
//! For each it prints the number of distinct packages in `cargo tree -e normal` (the crate itself
//! included, build-only and dev-only dependencies left out) and, unless `--count` is given, the wall
//! time of a cold `cargo build` (a target folder of its own, `CARGO_INCREMENTAL=0`), the number of
//! units Cargo compiled, the size of the debug binary and, on Linux, the CPU time the build's
//! processes used (user and system, summed over every `rustc`: what the build costs whatever the
//! machine's load, where the wall time also counts the waiting). The two builds run back to back,
//! `full` first; other work on the machine slows both, so compare their ratios, not the seconds.
//! `--timings` passes the same flag to both builds (Cargo's per-crate report,
//! `DIR/NAME/target/cargo-timings/`) and prints, for each, the units that took the largest shares
//! of the summed unit time, the share of this workspace's own crates, and the share of what is
//! reached only through `jsonschema` (the JSON Schema validation) and only through `rmcp` (the MCP
//! protocol): what dominates.
//!
//! `--count` (which `cargo xtask ci` runs) needs no build and fails when the minimal service
//! pulls more than [`MINIMAL_BUDGET`] crates, so a dependency that slips past its feature gate
//! is seen.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use anyhow::{Context, Result, bail};

/// The most crates (`cargo tree -e normal`, distinct) the minimal service may pull (issue #29).
pub(crate) const MINIMAL_BUDGET: usize = 120;

/// The service both crates build: three capabilities on the memory stores, MCP over stdio.
const MAIN_RS: &str = r#"//! A three-capability service over MCP stdio, for `cargo xtask build-weight`.

use agent_surface::core::{AgentSurfaceError, Effect};
use agent_surface::policy::{AllowAll, Policies, Stores};
use agent_surface::registry::Ctx;
use agent_surface::{Serve, ServiceBuilder};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

#[derive(Deserialize, JsonSchema)]
struct Text {
    /// The text.
    text: String,
}

#[derive(Serialize, JsonSchema)]
struct Answer {
    /// The answer.
    text: String,
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let service = ServiceBuilder::new()
        .stores(Stores::memory())
        .authority(Policies::default_deny().for_type("text", AllowAll))
        .build();
    service.registry.define("text", |t| {
        t.capability("echo", "Echo the text.").effect(Effect::Read).handler(|_ctx: Ctx, i: Text| async move {
            Ok::<_, AgentSurfaceError>(Answer { text: i.text })
        });
        t.capability("upper", "Upper-case the text.").effect(Effect::Read).handler(|_ctx: Ctx, i: Text| async move {
            Ok::<_, AgentSurfaceError>(Answer { text: i.text.to_uppercase() })
        });
        t.capability("count", "Count its characters.").effect(Effect::Read).handler(|_ctx: Ctx, i: Text| async move {
            Ok::<_, AgentSurfaceError>(Answer { text: i.text.chars().count().to_string() })
        });
    })?;
    let _mounted = service.registry.mount("text", "main")?;
    Serve::new(service).stdio(None).await?;
    Ok(())
}
"#;

/// One of the two crates: its name and how it depends on `agent-surface`.
struct Variant {
    name: &'static str,
    features: &'static str,
}

const VARIANTS: [Variant; 2] = [
    Variant { name: "full", features: "" },
    Variant { name: "minimal", features: ", default-features = false, features = [\"stdio\"]" },
];

/// What was measured of one variant.
struct Weight {
    crates: usize,
    build: Option<Build>,
}

/// A cold build's figures.
struct Build {
    seconds: f64,
    /// User and system CPU seconds of the build's processes (`None` off Linux).
    cpu_seconds: Option<f64>,
    units: usize,
    binary_bytes: u64,
}

/// Parses the arguments and runs (see the module docs).
pub(crate) fn run(root: &Path, args: &[String]) -> Result<()> {
    let mut count_only = false;
    let mut timings = false;
    let mut dir = None;
    let mut args = args.iter();
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--count" => count_only = true,
            "--timings" => timings = true,
            "--dir" => dir = Some(PathBuf::from(args.next().context("--dir needs a folder")?)),
            other => bail!("build-weight: unknown argument `{other}` (use --count, --timings, --dir DIR)"),
        }
    }
    let throwaway = dir.is_none();
    let dir =
        dir.unwrap_or_else(|| std::env::temp_dir().join(format!("agent-surface-build-weight-{}", std::process::id())));
    let measured = measure(root, &dir, count_only, timings);
    if throwaway {
        // Best effort: a folder left behind in the temporary folder harms nothing.
        let _ = std::fs::remove_dir_all(&dir);
    } else {
        println!("(the crates and their builds are in {})", dir.display());
    }
    let weights = measured?;
    report(&weights);
    let minimal = weights[1].crates;
    if minimal > MINIMAL_BUDGET {
        bail!("the minimal MCP-stdio service pulls {minimal} crates, over its budget of {MINIMAL_BUDGET}");
    }
    Ok(())
}

/// Writes both crates under `dir`, counts their crates and, unless `count_only`, builds them
/// (with Cargo's `--timings` report when `timings`).
fn measure(root: &Path, dir: &Path, count_only: bool, timings: bool) -> Result<Vec<Weight>> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_string());
    let mut weights = Vec::new();
    for variant in &VARIANTS {
        let crate_dir = write_crate(root, dir, variant)?;
        let crates = count_crates(&cargo, &crate_dir)?;
        println!("{}: {crates} crates (cargo tree -e normal, distinct packages)", variant.name);
        weights.push(Weight { crates, build: None });
    }
    if !count_only {
        for (variant, weight) in VARIANTS.iter().zip(&mut weights) {
            println!("{}: cold debug build (CARGO_INCREMENTAL=0, own target folder)…", variant.name);
            let build = cold_build(&cargo, &dir.join(variant.name), variant.name, timings)?;
            println!(
                "{}: {:.1} s, {} CPU, {} units compiled, debug binary {:.1} MiB",
                variant.name,
                build.seconds,
                build.cpu_seconds.map_or_else(|| "unknown".to_string(), |s| format!("{s:.1} s")),
                build.units,
                build.binary_bytes as f64 / (1024.0 * 1024.0)
            );
            weight.build = Some(build);
        }
    }
    Ok(weights)
}

/// Prints the comparison: minimal against full.
fn report(weights: &[Weight]) {
    let (full, minimal) = (&weights[0], &weights[1]);
    println!(
        "crates: full {} / minimal {} = {:.2}x (budget for minimal: {MINIMAL_BUDGET})",
        full.crates,
        minimal.crates,
        minimal.crates as f64 / full.crates as f64
    );
    if let (Some(f), Some(m)) = (&full.build, &minimal.build) {
        println!("cold build: full {:.1} s / minimal {:.1} s = {:.2}x", f.seconds, m.seconds, m.seconds / f.seconds);
        if let (Some(fc), Some(mc)) = (f.cpu_seconds, m.cpu_seconds) {
            println!("cold build CPU time: full {fc:.1} s / minimal {mc:.1} s = {:.2}x", mc / fc);
        }
        println!("units compiled: full {} / minimal {}", f.units, m.units);
        println!(
            "debug binary: full {:.1} MiB / minimal {:.1} MiB",
            f.binary_bytes as f64 / (1024.0 * 1024.0),
            m.binary_bytes as f64 / (1024.0 * 1024.0)
        );
    }
}

/// Writes `variant`'s crate under `dir` and returns its folder.
fn write_crate(root: &Path, dir: &Path, variant: &Variant) -> Result<PathBuf> {
    let crate_dir = dir.join(variant.name);
    std::fs::create_dir_all(crate_dir.join("src")).with_context(|| format!("cannot create {}", crate_dir.display()))?;
    let facade = root.join("crates/agent-surface");
    let manifest = format!(
        "[package]\nname = \"weight-{name}\"\nversion = \"0.0.0\"\nedition = \"2024\"\npublish = false\n\n\
         [dependencies]\nagent-surface = {{ path = {path:?}{features} }}\n\
         schemars = \"1\"\nserde = {{ version = \"1\", features = [\"derive\"] }}\n\
         tokio = {{ version = \"1\", features = [\"rt-multi-thread\", \"macros\"] }}\n\n\
         # Outside every workspace.\n[workspace]\n",
        name = variant.name,
        path = facade.to_string_lossy(),
        features = variant.features,
    );
    std::fs::write(crate_dir.join("Cargo.toml"), manifest)?;
    std::fs::write(crate_dir.join("src/main.rs"), MAIN_RS)?;
    std::fs::copy(root.join("Cargo.lock"), crate_dir.join("Cargo.lock")).context("cannot copy Cargo.lock")?;
    Ok(crate_dir)
}

/// The distinct packages of `cargo tree -e normal` in `crate_dir`.
fn count_crates(cargo: &str, crate_dir: &Path) -> Result<usize> {
    let output = Command::new(cargo)
        .args(["tree", "-e", "normal", "--prefix", "none"])
        .current_dir(crate_dir)
        .output()
        .with_context(|| format!("cannot start `{cargo} tree`"))?;
    if !output.status.success() {
        bail!("`cargo tree` failed in {}:\n{}", crate_dir.display(), String::from_utf8_lossy(&output.stderr));
    }
    Ok(distinct_packages(&String::from_utf8_lossy(&output.stdout)))
}

/// The distinct packages in `cargo tree --prefix none` output (a repeated one is marked `(*)`).
fn distinct_packages(tree: &str) -> usize {
    let mut lines: Vec<&str> =
        tree.lines().map(|l| l.trim_end().trim_end_matches(" (*)")).filter(|l| !l.is_empty()).collect();
    lines.sort_unstable();
    lines.dedup();
    lines.len()
}

/// A cold `cargo build` of the crate in `crate_dir`, in a target folder of its own.
fn cold_build(cargo: &str, crate_dir: &Path, name: &str, timings: bool) -> Result<Build> {
    let target = crate_dir.join("target");
    if target.exists() {
        std::fs::remove_dir_all(&target).with_context(|| format!("cannot remove {}", target.display()))?;
    }
    let cpu_before = children_cpu_seconds();
    let start = Instant::now();
    let output = Command::new(cargo)
        .args(["build", "--color", "never"])
        .args(timings.then_some("--timings"))
        .env("CARGO_TARGET_DIR", &target)
        .env("CARGO_INCREMENTAL", "0")
        .current_dir(crate_dir)
        .output()
        .with_context(|| format!("cannot start `{cargo} build`"))?;
    let seconds = start.elapsed().as_secs_f64();
    let cpu_seconds = children_cpu_seconds().zip(cpu_before).map(|(after, before)| after - before);
    let stderr = String::from_utf8_lossy(&output.stderr);
    if !output.status.success() {
        bail!("`cargo build` failed in {}:\n{stderr}", crate_dir.display());
    }
    let units = stderr.lines().filter(|l| l.trim_start().starts_with("Compiling ")).count();
    let binary = target.join("debug").join(format!("weight-{name}{}", std::env::consts::EXE_SUFFIX));
    let binary_bytes = std::fs::metadata(&binary).with_context(|| format!("no binary at {}", binary.display()))?.len();
    if timings {
        let report = target.join("cargo-timings/cargo-timing.html");
        let html = std::fs::read_to_string(&report).with_context(|| format!("no report at {}", report.display()))?;
        print_shares(cargo, crate_dir, name, &html)?;
    }
    Ok(Build { seconds, cpu_seconds, units, binary_bytes })
}

/// How many of the largest units `--timings` prints.
const TOP_UNITS: usize = 12;

/// The dependencies whose exclusive share `--timings` prints.
const HEAVY: [&str; 2] = ["jsonschema", "rmcp"];

/// Prints the largest units of a `--timings` report, the share of this workspace's crates and
/// the share of what only each of [`HEAVY`] brings.
fn print_shares(cargo: &str, crate_dir: &Path, name: &str, html: &str) -> Result<()> {
    let units = unit_durations(html).context("the timings report has no unit data Cargo's format was known to have")?;
    let total: f64 = units.iter().map(|(_, d)| d).sum();
    let share = |d: f64| 100.0 * d / total;
    let ours: f64 =
        units.iter().filter(|(n, _)| n.starts_with("agent-surface") || n.starts_with("weight-")).map(|(_, d)| d).sum();
    println!("{name}: summed unit time {total:.1} s; this workspace's crates and the service {:.1}%", share(ours));
    for (unit, duration) in units.iter().take(TOP_UNITS) {
        println!("  {:5.1}%  {unit}", share(*duration));
    }
    let graph = dependency_graph(cargo, crate_dir)?;
    let root = format!("weight-{name}");
    let everything = reached(&graph, &root, None);
    for heavy in HEAVY {
        let without = reached(&graph, &root, Some(heavy));
        let only: Vec<&str> = everything.difference(&without).map(String::as_str).collect();
        let time: f64 = units.iter().filter(|(n, _)| only.contains(&n.as_str())).map(|(_, d)| d).sum();
        println!("  reached only through {heavy}: {} crates, {:.1}% of the unit time", only.len(), share(time));
    }
    Ok(())
}

/// Each package's normal and build dependencies (by name) in `crate_dir`'s resolved graph.
fn dependency_graph(cargo: &str, crate_dir: &Path) -> Result<BTreeMap<String, Vec<String>>> {
    let output = Command::new(cargo)
        .args(["metadata", "--format-version", "1"])
        .current_dir(crate_dir)
        .output()
        .with_context(|| format!("cannot start `{cargo} metadata`"))?;
    if !output.status.success() {
        bail!("`cargo metadata` failed in {}:\n{}", crate_dir.display(), String::from_utf8_lossy(&output.stderr));
    }
    let meta: serde_json::Value = serde_json::from_slice(&output.stdout).context("`cargo metadata` printed no JSON")?;
    graph_of(&meta).context("`cargo metadata` printed no resolved graph")
}

/// The graph of [`dependency_graph`] from `cargo metadata`'s JSON (dev-dependencies left out).
fn graph_of(meta: &serde_json::Value) -> Option<BTreeMap<String, Vec<String>>> {
    let mut names = BTreeMap::new();
    for package in meta.get("packages")?.as_array()? {
        names.insert(package.get("id")?.as_str()?, package.get("name")?.as_str()?);
    }
    let mut graph = BTreeMap::new();
    for node in meta.get("resolve")?.get("nodes")?.as_array()? {
        let mut deps = Vec::new();
        for dep in node.get("deps")?.as_array()? {
            let not_dev =
                dep.get("dep_kinds")?.as_array()?.iter().any(|k| k.get("kind").and_then(|k| k.as_str()) != Some("dev"));
            if not_dev {
                deps.push(names.get(dep.get("pkg")?.as_str()?)?.to_string());
            }
        }
        graph.insert(names.get(node.get("id")?.as_str()?)?.to_string(), deps);
    }
    Some(graph)
}

/// The packages reached from `root` in `graph`, not going through `skip`.
fn reached(graph: &BTreeMap<String, Vec<String>>, root: &str, skip: Option<&str>) -> BTreeSet<String> {
    let mut seen = BTreeSet::new();
    let mut stack = vec![root.to_string()];
    while let Some(name) = stack.pop() {
        if Some(name.as_str()) == skip || !seen.insert(name.clone()) {
            continue;
        }
        stack.extend(graph.get(&name).into_iter().flatten().cloned());
    }
    seen
}

/// The units of a `cargo build --timings` report (its `UNIT_DATA` array), each with its
/// duration in seconds, the longest first; a package built more than once (a build script and
/// its library, or two versions) is summed.
fn unit_durations(html: &str) -> Option<Vec<(String, f64)>> {
    const MARK: &str = "const UNIT_DATA = ";
    let start = html.find(MARK)? + MARK.len();
    let mut stream = serde_json::Deserializer::from_str(&html[start..]).into_iter::<serde_json::Value>();
    let data = stream.next()?.ok()?;
    let mut sums: Vec<(String, f64)> = Vec::new();
    for unit in data.as_array()? {
        let name = unit.get("name")?.as_str()?;
        let duration = unit.get("duration")?.as_f64()?;
        match sums.iter_mut().find(|(n, _)| n == name) {
            Some((_, d)) => *d += duration,
            None => sums.push((name.to_string(), duration)),
        }
    }
    sums.sort_by(|a, b| b.1.total_cmp(&a.1));
    Some(sums)
}

/// The user and system CPU seconds of this process's waited-for children and their own
/// waited-for children (`cutime` and `cstime` of `/proc/self/stat`); `None` where there is no
/// such file.
fn children_cpu_seconds() -> Option<f64> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    let ticks = children_ticks(&stat)?;
    // The kernel's clock tick for these fields (USER_HZ) is 100 on every Linux architecture
    // Rust targets; `getconf CLK_TCK` says so where it can be asked.
    let per_second = Command::new("getconf")
        .arg("CLK_TCK")
        .output()
        .ok()
        .and_then(|o| String::from_utf8_lossy(&o.stdout).trim().parse::<f64>().ok())
        .filter(|hz| *hz > 0.0)
        .unwrap_or(100.0);
    Some(ticks as f64 / per_second)
}

/// `cutime + cstime` (fields 16 and 17) of a `/proc/PID/stat` line. The command name (field 2)
/// is in parentheses and may hold spaces, so the fields are counted after its closing one.
fn children_ticks(stat: &str) -> Option<u64> {
    let after_name = &stat[stat.rfind(')')? + 1..];
    // Fields from 3 (state) on; cutime is field 16, the 14th of these.
    let mut fields = after_name.split_whitespace().skip(13);
    let cutime: u64 = fields.next()?.parse().ok()?;
    let cstime: u64 = fields.next()?.parse().ok()?;
    Some(cutime + cstime)
}

#[cfg(test)]
mod tests {
    use super::{children_ticks, distinct_packages, graph_of, reached, unit_durations};

    #[test]
    fn what_only_one_dependency_brings_is_what_the_graph_loses_without_it() {
        let meta = serde_json::json!({
            "packages": [
                {"id": "a", "name": "app"}, {"id": "j", "name": "jsonschema"}, {"id": "r", "name": "regex"},
                {"id": "s", "name": "serde"}, {"id": "t", "name": "test-kit"}
            ],
            "resolve": {"nodes": [
                {"id": "a", "deps": [{"pkg": "j", "dep_kinds": [{"kind": null}]}, {"pkg": "s", "dep_kinds": [{"kind": null}]},
                                     {"pkg": "t", "dep_kinds": [{"kind": "dev"}]}]},
                {"id": "j", "deps": [{"pkg": "r", "dep_kinds": [{"kind": null}]}, {"pkg": "s", "dep_kinds": [{"kind": "build"}]}]},
                {"id": "r", "deps": []}, {"id": "s", "deps": []}, {"id": "t", "deps": []}
            ]}
        });
        let graph = graph_of(&meta).unwrap();
        let all = reached(&graph, "app", None);
        assert_eq!(all.len(), 4, "the dev-dependency is left out: {all:?}");
        let only: Vec<String> = all.difference(&reached(&graph, "app", Some("jsonschema"))).cloned().collect();
        assert_eq!(only, ["jsonschema", "regex"]);
    }

    #[test]
    fn the_timings_units_are_read_summed_per_package_and_sorted() {
        let html = r#"<script>
const UNIT_DATA = [{"i":0,"name":"serde","duration":1.5},{"i":1,"name":"jsonschema","duration":9.0},
{"i":2,"name":"serde","duration":2.0}];
const CONCURRENCY_DATA = [];
</script>"#;
        assert_eq!(unit_durations(html), Some(vec![("jsonschema".to_string(), 9.0), ("serde".to_string(), 3.5)]));
        assert_eq!(unit_durations("<html>no data</html>"), None);
    }

    #[test]
    fn the_children_cpu_ticks_are_fields_16_and_17_even_with_a_space_in_the_name() {
        let stat = "4242 (cargo xtask) S 1 2 3 4 5 6 7 8 9 10 11 12 1500 25 20 0 1 0 99 0 0";
        assert_eq!(children_ticks(stat), Some(1525));
        assert_eq!(children_ticks("4242 (truncated) S 1 2"), None);
    }

    #[test]
    fn a_package_seen_twice_is_counted_once() {
        let tree = "app v0.1.0 (/x)\nserde v1.0.0\ntokio v1.0.0\nserde v1.0.0 (*)\nsyn v2.0.0 (proc-macro)\n\n";
        assert_eq!(distinct_packages(tree), 4);
    }
}
