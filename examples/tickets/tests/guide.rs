//! `docs/guide.md` quotes this crate: a code block right after a line
//! `<!-- quote: PATH#REGION -->` must be the region `REGION` of `PATH` (relative to the workspace
//! root), the lines between `// guide:begin REGION` and `// guide:end REGION`, without their
//! common indentation. A region nested in the quoted one is shown as one line `// … NAME`. Every
//! region of the quoted files must be quoted, so the guide cannot lose a step silently.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn read(path: &str) -> String {
    std::fs::read_to_string(root().join(path)).unwrap_or_else(|e| panic!("cannot read {path}: {e}"))
}

/// The marker a line carries, as (`begin` or `end`, region name).
fn marker(line: &str) -> Option<(&str, &str)> {
    let rest = line.trim().strip_prefix("// guide:")?;
    rest.split_once(' ')
}

/// Every region name in `source`.
fn regions(source: &str) -> BTreeSet<String> {
    source.lines().filter_map(marker).filter(|(kind, _)| *kind == "begin").map(|(_, name)| name.to_string()).collect()
}

/// The text of region `name` in `source`, dedented, nested regions elided.
fn region(source: &str, name: &str) -> Option<String> {
    let mut lines = source.lines().skip_while(|l| marker(l) != Some(("begin", name))).skip(1);
    let mut out: Vec<String> = Vec::new();
    let mut nested: Option<String> = None;
    loop {
        let line = lines.next()?;
        match (marker(line), &nested) {
            (Some(("end", n)), None) if n == name => break,
            (Some(("begin", n)), None) => {
                let indent = &line[..line.len() - line.trim_start().len()];
                out.push(format!("{indent}// … {n}"));
                nested = Some(n.to_string());
            }
            (Some(("end", n)), Some(open)) if n == open => nested = None,
            (_, Some(_)) => {}
            (_, None) => out.push(line.to_string()),
        }
    }
    let indent = out.iter().filter(|l| !l.trim().is_empty()).map(|l| l.len() - l.trim_start().len()).min().unwrap_or(0);
    Some(out.iter().map(|l| l.get(indent..).unwrap_or("").to_string()).collect::<Vec<_>>().join("\n"))
}

/// Each quote of the guide: (path, region, the code block's text).
fn quotes(guide: &str) -> Vec<(String, String, String)> {
    let mut quotes = Vec::new();
    let mut lines = guide.lines();
    while let Some(line) = lines.next() {
        let Some(target) = line.trim().strip_prefix("<!-- quote: ").and_then(|t| t.strip_suffix(" -->")) else {
            continue;
        };
        let (path, name) = target.split_once('#').unwrap_or_else(|| panic!("`{line}` names no region"));
        let fence = lines.next().unwrap_or_default();
        assert!(fence.starts_with("```"), "the line after `{line}` must open a code block, not `{fence}`");
        let block: Vec<&str> = lines.by_ref().take_while(|l| !l.starts_with("```")).collect();
        quotes.push((path.to_string(), name.to_string(), block.join("\n")));
    }
    quotes
}

#[test]
fn the_guide_quotes_the_example_as_it_is() {
    let guide = read("docs/guide.md");
    let quotes = quotes(&guide);
    assert!(quotes.len() >= 8, "the guide quotes the example in {} places; expected its every step", quotes.len());
    let mut quoted: BTreeSet<(String, String)> = BTreeSet::new();
    let mut drifted = Vec::new();
    for (path, name, block) in &quotes {
        let source = read(path);
        let Some(region) = region(&source, name) else {
            drifted.push(format!("{path}#{name}: no such region"));
            continue;
        };
        if &region != block {
            drifted.push(format!("{path}#{name} differs from the guide; the source has:\n{region}\n"));
        }
        quoted.insert((path.clone(), name.clone()));
    }
    let files: BTreeSet<&String> = quotes.iter().map(|(path, _, _)| path).collect();
    for path in files {
        for name in regions(&read(path)) {
            if !quoted.contains(&(path.clone(), name.clone())) {
                drifted.push(format!("{path}#{name} is marked as a guide region but the guide does not quote it"));
            }
        }
    }
    assert!(drifted.is_empty(), "docs/guide.md and the example disagree:\n{}", drifted.join("\n"));
}

#[test]
fn regions_are_dedented_and_nested_ones_elided() {
    let source = "fn f() {\n    // guide:begin outer\n    a();\n    // guide:begin inner\n    b();\n    // guide:end inner\n        c();\n    // guide:end outer\n}\n";
    assert_eq!(region(source, "outer").as_deref(), Some("a();\n// … inner\n    c();"));
    assert_eq!(region(source, "inner").as_deref(), Some("b();"));
    assert_eq!(region(source, "missing"), None);
    let guide = "text\n<!-- quote: a.rs#outer -->\n```rust\nx();\n```\n";
    assert_eq!(quotes(guide), [("a.rs".to_string(), "outer".to_string(), "x();".to_string())]);
}
