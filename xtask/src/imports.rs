//! No circle of file imports inside a crate.
//!
//! For each crate of the workspace (its library, binary and `src/bin` roots), the files of its
//! module tree and the references between them: a `crate::…` or `super::…` path in a `use`, a type,
//! an expression or a macro's tokens, resolved to the file that defines the module it names, or,
//! for an item a module only re-exports (`pub use child::Name`, a rename or a glob), to the file
//! of the item it stands for (else a child would reach a sibling through `super::Name` unseen). A
//! reference to a module below the file's own (its children, by plain name, `self::…` or
//! `crate::…`) is not an edge: a parent that declares and drives its children is the module tree,
//! not a circle (so a crate root has no edges out). Code under
//! `#[cfg(test)]` is left out (tests may reach anywhere), and so are visibility paths
//! (`pub(in crate::x)`).
//!
//! A strongly connected set of two or more files is a circle and fails the check, with one cycle
//! through it and the reference behind each step, unless it is listed in [`KNOWN_CIRCLES`].

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};
use proc_macro2::{TokenStream, TokenTree};
use syn::visit::Visit;

/// Circles the check tolerates for now, each as the files it may span (workspace-relative): a
/// circle passes when all its files are in one entry, so it may shrink but not grow. Each entry
/// names the issue that removes it; the check fails when an entry no longer matches any circle, so
/// the entry is removed with the circle.
const KNOWN_CIRCLES: &[(&str, &[&str])] = &[];

/// The crates whose sources are checked: every crate directory under `crates/` and `examples/`,
/// and `xtask`.
fn crate_dirs(root: &Path) -> Result<Vec<PathBuf>> {
    let mut dirs = vec![root.join("xtask")];
    for parent in ["crates", "examples"] {
        let Ok(entries) = std::fs::read_dir(root.join(parent)) else { continue };
        for entry in entries {
            let path = entry.with_context(|| format!("reading {parent}/"))?.path();
            if path.join("Cargo.toml").is_file() {
                dirs.push(path);
            }
        }
    }
    dirs.sort();
    Ok(dirs)
}

/// Runs the check over the workspace at `root`.
pub(crate) fn check(root: &Path) -> Result<()> {
    let mut circles = Vec::new();
    for dir in crate_dirs(root)? {
        for crate_root in crate_roots(&dir) {
            let graph = Graph::build(root, &crate_root)?;
            circles.extend(graph.circles());
        }
    }
    judge(circles, KNOWN_CIRCLES)
}

/// A circle found: its files (sorted) and a description of one cycle through them.
#[derive(Debug)]
struct Circle {
    files: BTreeSet<String>,
    report: String,
}

fn judge(circles: Vec<Circle>, known: &[(&str, &[&str])]) -> Result<()> {
    let listed =
        |circle: &Circle| known.iter().position(|(_, files)| circle.files.iter().all(|f| files.contains(&f.as_str())));
    let mut problems = Vec::new();
    let mut seen = BTreeSet::new();
    let mut used = BTreeSet::new();
    for circle in &circles {
        // A crate root may be shared by several targets (lib and bin of one crate); report once.
        if !seen.insert(circle.files.clone()) {
            continue;
        }
        match listed(circle) {
            Some(i) => {
                used.insert(i);
            }
            None => problems.push(format!(
                "files import each other in a circle ({}), e.g.:\n{}",
                circle.files.iter().cloned().collect::<Vec<_>>().join(", "),
                circle.report
            )),
        }
    }
    for (i, (issue, files)) in known.iter().enumerate() {
        if !used.contains(&i) {
            problems.push(format!(
                "the known circle of {issue} ({}) is gone: remove it from KNOWN_CIRCLES in xtask/src/imports.rs",
                files.join(", ")
            ));
        }
    }
    if !problems.is_empty() {
        bail!("{}", problems.join("\n"));
    }
    Ok(())
}

/// The root files of a crate's targets under `src/`: `lib.rs`, `main.rs`, `bin/*.rs`.
fn crate_roots(dir: &Path) -> Vec<PathBuf> {
    let src = dir.join("src");
    let mut roots: Vec<PathBuf> = ["lib.rs", "main.rs"].iter().map(|f| src.join(f)).filter(|p| p.is_file()).collect();
    if let Ok(entries) = std::fs::read_dir(src.join("bin")) {
        let mut bins: Vec<PathBuf> = entries
            .filter_map(|e| e.ok().map(|e| e.path()))
            .map(|p| if p.is_dir() { p.join("main.rs") } else { p })
            .filter(|p| p.is_file() && p.extension().is_some_and(|e| e == "rs"))
            .collect();
        bins.sort();
        roots.extend(bins);
    }
    roots
}

/// A module path from the crate root (`["pipeline", "authority"]`).
type ModPath = Vec<String>;

/// One crate target's files, the modules they hold and the references between them.
struct Graph {
    /// Every module of the tree and the file that holds it (inline modules: their file).
    modules: BTreeMap<ModPath, usize>,
    /// Workspace-relative file names.
    files: Vec<String>,
    /// `edges[from][to]` = the first reference that makes the edge, for the report.
    edges: BTreeMap<usize, BTreeMap<usize, String>>,
    /// What each module brings in by `use`: its local name → the absolute path it stands for, so
    /// that a reference through a re-export (`super::Name` where the parent has `pub use
    /// child::Name`) leads to the file that defines the item, not to the re-exporting parent.
    imports: BTreeMap<ModPath, BTreeMap<String, ModPath>>,
    /// The modules each module glob-imports (`use child::*`).
    globs: BTreeMap<ModPath, Vec<ModPath>>,
    /// The items each module defines itself (types, functions, traits, constants, macros…).
    defined: BTreeMap<ModPath, BTreeSet<String>>,
}

impl Graph {
    fn build(root: &Path, crate_root: &Path) -> Result<Graph> {
        let mut graph = Graph {
            modules: BTreeMap::new(),
            files: Vec::new(),
            edges: BTreeMap::new(),
            imports: BTreeMap::new(),
            globs: BTreeMap::new(),
            defined: BTreeMap::new(),
        };
        // The module tree first (a reference may point to a file read later), then what each
        // module defines and imports, then the references.
        let mut parsed = Vec::new();
        graph.load(root, crate_root, Vec::new(), &mut parsed)?;
        for (_, module, syntax) in &parsed {
            graph.names(&syntax.items, module);
        }
        for (file, module, syntax) in &parsed {
            let mut refs = References { module: module.clone(), found: Vec::new() };
            refs.visit_file(syntax);
            for (target, text) in refs.found {
                // A module's own descendants are its module tree, however the path is written.
                if target.starts_with(module) {
                    continue;
                }
                if let Some(to) = graph.resolve(&target)
                    && to != *file
                {
                    graph.edges.entry(*file).or_default().entry(to).or_insert(text);
                }
            }
        }
        Ok(graph)
    }

    /// Reads `path` as the module `module`, registers it and its inline modules, and follows its
    /// `mod x;` declarations.
    fn load(
        &mut self,
        root: &Path,
        path: &Path,
        module: ModPath,
        parsed: &mut Vec<(usize, ModPath, syn::File)>,
    ) -> Result<()> {
        let text = std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
        let syntax = syn::parse_file(&text).with_context(|| format!("parsing {}", path.display()))?;
        let index = self.files.len();
        self.files.push(path.strip_prefix(root).unwrap_or(path).display().to_string());
        // Children of a crate root or a `mod.rs` live beside it; those of `x.rs` in `x/`.
        let owns_dir = module.is_empty() || path.file_name().is_some_and(|n| n == "mod.rs");
        let dir =
            if owns_dir { path.parent().map(Path::to_path_buf).unwrap_or_default() } else { path.with_extension("") };
        self.modules.insert(module.clone(), index);
        let mut declared = Vec::new();
        self.items(&syntax.items, &module, index, &dir, &mut declared);
        parsed.push((index, module, syntax));
        for (child, file) in declared {
            self.load(root, &file, child, parsed)?;
        }
        Ok(())
    }

    /// Registers the inline modules of `items` and collects the files of their `mod x;`.
    fn items(
        &mut self,
        items: &[syn::Item],
        module: &ModPath,
        index: usize,
        dir: &Path,
        declared: &mut Vec<(ModPath, PathBuf)>,
    ) {
        for item in items {
            let syn::Item::Mod(m) = item else { continue };
            if is_test_only(&m.attrs) {
                continue;
            }
            let mut child = module.clone();
            child.push(m.ident.to_string());
            match &m.content {
                Some((_, inner)) => {
                    self.modules.insert(child.clone(), index);
                    self.items(inner, &child, index, &dir.join(m.ident.to_string()), declared);
                }
                None => {
                    let file = match path_attr(&m.attrs) {
                        Some(p) => dir.join(p),
                        None => {
                            let flat = dir.join(format!("{}.rs", m.ident));
                            if flat.is_file() { flat } else { dir.join(m.ident.to_string()).join("mod.rs") }
                        }
                    };
                    if file.is_file() {
                        declared.push((child, file));
                    }
                }
            }
        }
    }

    /// Records what the (non-test) `items` of `module` define and import, and recurses into its
    /// inline modules.
    fn names(&mut self, items: &[syn::Item], module: &ModPath) {
        for item in items {
            let (attrs, ident) = match item {
                syn::Item::Const(i) => (&i.attrs, Some(&i.ident)),
                syn::Item::Enum(i) => (&i.attrs, Some(&i.ident)),
                syn::Item::Fn(i) => (&i.attrs, Some(&i.sig.ident)),
                syn::Item::Macro(i) => (&i.attrs, i.ident.as_ref()),
                syn::Item::Static(i) => (&i.attrs, Some(&i.ident)),
                syn::Item::Struct(i) => (&i.attrs, Some(&i.ident)),
                syn::Item::Trait(i) => (&i.attrs, Some(&i.ident)),
                syn::Item::TraitAlias(i) => (&i.attrs, Some(&i.ident)),
                syn::Item::Type(i) => (&i.attrs, Some(&i.ident)),
                syn::Item::Union(i) => (&i.attrs, Some(&i.ident)),
                syn::Item::Mod(m) => {
                    if let Some((_, inner)) = &m.content
                        && !is_test_only(&m.attrs)
                    {
                        let mut child = module.clone();
                        child.push(m.ident.to_string());
                        self.names(inner, &child);
                    }
                    continue;
                }
                syn::Item::Use(u) => {
                    if !is_test_only(&u.attrs) && u.leading_colon.is_none() {
                        self.use_names(module, &mut Vec::new(), &u.tree);
                    }
                    continue;
                }
                _ => continue,
            };
            if let Some(ident) = ident
                && !is_test_only(attrs)
            {
                self.defined.entry(module.clone()).or_default().insert(ident.to_string());
            }
        }
    }

    /// Records the names one `use` tree of `module` brings in.
    fn use_names(&mut self, module: &ModPath, prefix: &mut Vec<String>, tree: &syn::UseTree) {
        let (leaf, name) = match tree {
            syn::UseTree::Path(p) => {
                prefix.push(p.ident.to_string());
                self.use_names(module, prefix, &p.tree);
                prefix.pop();
                return;
            }
            syn::UseTree::Group(g) => {
                for t in &g.items {
                    self.use_names(module, prefix, t);
                }
                return;
            }
            syn::UseTree::Name(n) => (n.ident.to_string(), n.ident.to_string()),
            syn::UseTree::Rename(r) => (r.ident.to_string(), r.rename.to_string()),
            syn::UseTree::Glob(_) => {
                if let Some(target) = self.absolute(module, prefix) {
                    self.globs.entry(module.clone()).or_default().push(target);
                }
                return;
            }
        };
        let mut segments = prefix.clone();
        if leaf != "self" {
            segments.push(leaf);
        }
        if let Some(target) = self.absolute(module, &segments)
            && name != "_"
        {
            let name = if name == "self" { prefix.last().cloned().unwrap_or_default() } else { name };
            self.imports.entry(module.clone()).or_default().insert(name, target);
        }
    }

    /// The absolute path of a `use` path written in `module`, or `None` for another crate's.
    fn absolute(&self, module: &ModPath, segments: &[String]) -> Option<ModPath> {
        let (mut base, mut rest) = match segments.first().map(String::as_str) {
            Some("crate") => (Vec::new(), &segments[1..]),
            Some("self") => (module.clone(), &segments[1..]),
            Some("super") => (module.clone(), segments),
            Some(first) => {
                let mut child = module.clone();
                child.push(first.to_string());
                if !self.modules.contains_key(&child) {
                    return None;
                }
                (module.clone(), segments)
            }
            None => return None,
        };
        while rest.first().is_some_and(|s| s == "super") {
            base.pop();
            rest = &rest[1..];
        }
        base.extend(rest.iter().filter(|s| *s != "self").cloned());
        Some(base)
    }

    /// The file that defines what `target` names: the longest registered module prefix, and when
    /// the rest names an item that module only imports (a re-export, by name or by glob), the
    /// file of the item it stands for.
    fn resolve(&self, target: &[String]) -> Option<usize> {
        let mut target = target.to_vec();
        // Re-exports may chain; a bounded number of steps also ends an import cycle.
        for _ in 0..16 {
            let n = (0..=target.len()).rev().find(|&n| self.modules.contains_key(&target[..n]))?;
            let module = &target[..n];
            let Some(name) = target.get(n) else { break };
            if self.defined.get(module).is_some_and(|d| d.contains(name)) {
                break;
            }
            let through = self.imports.get(module).and_then(|i| i.get(name)).cloned().or_else(|| {
                self.globs.get(module)?.iter().find_map(|g| {
                    let known = self.defined.get(g).is_some_and(|d| d.contains(name))
                        || self.imports.get(g).is_some_and(|i| i.contains_key(name));
                    known.then(|| g.iter().chain([name]).cloned().collect::<ModPath>())
                })
            });
            let Some(mut next) = through else { break };
            if next == target[..=n] {
                break;
            }
            next.extend(target[n + 1..].iter().cloned());
            target = next;
        }
        (0..=target.len()).rev().find_map(|n| self.modules.get(&target[..n]).copied())
    }

    /// The strongly connected sets of two or more files (Tarjan), each with one cycle through it.
    fn circles(&self) -> Vec<Circle> {
        let n = self.files.len();
        let succ = |v: usize| self.edges.get(&v).into_iter().flat_map(|m| m.keys().copied());
        let mut index = vec![usize::MAX; n];
        let mut low = vec![0; n];
        let mut on_stack = vec![false; n];
        let mut stack = Vec::new();
        let mut next = 0;
        let mut sets = Vec::new();
        // Iterative Tarjan: (node, successors still to visit).
        for start in 0..n {
            if index[start] != usize::MAX {
                continue;
            }
            let mut work: Vec<(usize, Vec<usize>)> = Vec::new();
            index[start] = next;
            low[start] = next;
            next += 1;
            stack.push(start);
            on_stack[start] = true;
            work.push((start, succ(start).collect()));
            while let Some((v, pending)) = work.last_mut() {
                let v = *v;
                if let Some(w) = pending.pop() {
                    if index[w] == usize::MAX {
                        index[w] = next;
                        low[w] = next;
                        next += 1;
                        stack.push(w);
                        on_stack[w] = true;
                        work.push((w, succ(w).collect()));
                    } else if on_stack[w] {
                        low[v] = low[v].min(index[w]);
                    }
                    continue;
                }
                work.pop();
                if let Some((parent, _)) = work.last() {
                    low[*parent] = low[*parent].min(low[v]);
                }
                if low[v] == index[v] {
                    let mut set = Vec::new();
                    while let Some(w) = stack.pop() {
                        on_stack[w] = false;
                        set.push(w);
                        if w == v {
                            break;
                        }
                    }
                    if set.len() > 1 {
                        sets.push(set);
                    }
                }
            }
        }
        sets.into_iter()
            .map(|set| {
                let files = set.iter().map(|&i| self.files[i].clone()).collect();
                Circle { files, report: self.describe(&set) }
            })
            .collect()
    }

    /// One cycle through `set`, a step per line with the reference that makes it.
    fn describe(&self, set: &[usize]) -> String {
        let members: BTreeSet<usize> = set.iter().copied().collect();
        let Some(&start) = members.iter().next() else { return String::new() };
        // Breadth-first inside the set from `start` back to `start`.
        let mut came_from: BTreeMap<usize, usize> = BTreeMap::new();
        let mut queue = std::collections::VecDeque::from([start]);
        let mut closing = None;
        while let Some(v) = queue.pop_front() {
            for &w in self.edges.get(&v).map(|m| m.keys().collect::<Vec<_>>()).unwrap_or_default() {
                if !members.contains(&w) {
                    continue;
                }
                if w == start {
                    closing = Some(v);
                    break;
                }
                if let std::collections::btree_map::Entry::Vacant(e) = came_from.entry(w) {
                    e.insert(v);
                    queue.push_back(w);
                }
            }
            if closing.is_some() {
                break;
            }
        }
        let mut path = vec![start];
        let mut at = closing.unwrap_or(start);
        while at != start {
            path.push(at);
            at = came_from[&at];
        }
        path[1..].reverse();
        path.push(start);
        path.windows(2)
            .map(|w| format!("  {} -> {} ({})", self.files[w[0]], self.files[w[1]], self.edges[&w[0]][&w[1]]))
            .collect::<Vec<_>>()
            .join("\n")
    }
}

/// `#[cfg(test)]` (or `#[cfg(all(test, …))]`): code that is compiled only for tests.
fn is_test_only(attrs: &[syn::Attribute]) -> bool {
    attrs.iter().any(|a| {
        a.path().is_ident("cfg")
            && a.meta.require_list().is_ok_and(|l| {
                let t = l.tokens.to_string();
                t == "test" || t.starts_with("all (test") || t.starts_with("all(test")
            })
    })
}

/// The value of a `#[path = "…"]` attribute.
fn path_attr(attrs: &[syn::Attribute]) -> Option<String> {
    attrs.iter().find_map(|a| match &a.meta {
        syn::Meta::NameValue(nv) if nv.path.is_ident("path") => match &nv.value {
            syn::Expr::Lit(syn::ExprLit { lit: syn::Lit::Str(s), .. }) => Some(s.value()),
            _ => None,
        },
        _ => None,
    })
}

/// The `crate::…` and `super::…` references of one file, as absolute module paths.
struct References {
    /// The module being visited (inline modules push onto it).
    module: ModPath,
    /// (absolute path, the reference as written).
    found: Vec<(ModPath, String)>,
}

impl References {
    /// Records a path given as its segments, if it starts with `crate` or `super`.
    fn record(&mut self, segments: &[String]) {
        let mut base = match segments.first().map(String::as_str) {
            Some("crate") => Vec::new(),
            Some("super") => self.module.clone(),
            _ => return,
        };
        let mut rest = &segments[1..];
        if segments[0] == "super" {
            base.pop();
            while rest.first().is_some_and(|s| s == "super") {
                base.pop();
                rest = &rest[1..];
            }
        }
        let mut target = base;
        target.extend(rest.iter().filter(|s| *s != "self" && *s != "*").cloned());
        let written = segments.iter().filter(|s| *s != "self").cloned().collect::<Vec<_>>().join("::");
        self.found.push((target, written));
    }

    fn use_tree(&mut self, prefix: &mut Vec<String>, tree: &syn::UseTree) {
        match tree {
            syn::UseTree::Path(p) => {
                prefix.push(p.ident.to_string());
                self.use_tree(prefix, &p.tree);
                prefix.pop();
            }
            syn::UseTree::Name(n) => self.use_leaf(prefix, n.ident.to_string()),
            syn::UseTree::Rename(r) => self.use_leaf(prefix, r.ident.to_string()),
            syn::UseTree::Glob(_) => self.use_leaf(prefix, "*".to_string()),
            syn::UseTree::Group(g) => {
                for t in &g.items {
                    self.use_tree(prefix, t);
                }
            }
        }
    }

    fn use_leaf(&mut self, prefix: &[String], leaf: String) {
        let mut segments = prefix.to_vec();
        segments.push(leaf);
        self.record(&segments);
    }

    /// `crate :: a :: b` and `super :: a` sequences in a macro's tokens.
    fn tokens(&mut self, tokens: TokenStream) {
        let trees: Vec<TokenTree> = tokens.into_iter().collect();
        let mut i = 0;
        while i < trees.len() {
            match &trees[i] {
                TokenTree::Group(g) => self.tokens(g.stream()),
                TokenTree::Ident(id) if id == "crate" || id == "super" => {
                    let mut segments = vec![id.to_string()];
                    let mut j = i + 1;
                    while let (Some(TokenTree::Punct(a)), Some(TokenTree::Punct(b)), Some(TokenTree::Ident(next))) =
                        (trees.get(j), trees.get(j + 1), trees.get(j + 2))
                    {
                        if a.as_char() != ':' || b.as_char() != ':' {
                            break;
                        }
                        segments.push(next.to_string());
                        j += 3;
                    }
                    if segments.len() > 1 {
                        self.record(&segments);
                    }
                    i = j;
                    continue;
                }
                _ => {}
            }
            i += 1;
        }
    }
}

impl<'ast> Visit<'ast> for References {
    fn visit_item(&mut self, item: &'ast syn::Item) {
        let attrs = match item {
            syn::Item::Const(i) => &i.attrs,
            syn::Item::Enum(i) => &i.attrs,
            syn::Item::Fn(i) => &i.attrs,
            syn::Item::Impl(i) => &i.attrs,
            syn::Item::Macro(i) => &i.attrs,
            syn::Item::Mod(i) => &i.attrs,
            syn::Item::Static(i) => &i.attrs,
            syn::Item::Struct(i) => &i.attrs,
            syn::Item::Trait(i) => &i.attrs,
            syn::Item::Type(i) => &i.attrs,
            syn::Item::Union(i) => &i.attrs,
            syn::Item::Use(i) => &i.attrs,
            _ => return syn::visit::visit_item(self, item),
        };
        if is_test_only(attrs) {
            return;
        }
        syn::visit::visit_item(self, item);
    }

    fn visit_item_mod(&mut self, m: &'ast syn::ItemMod) {
        // Only inline modules have a body here; a `mod x;` is its own file.
        if let Some((_, items)) = &m.content {
            self.module.push(m.ident.to_string());
            for item in items {
                self.visit_item(item);
            }
            self.module.pop();
        }
    }

    fn visit_item_use(&mut self, u: &'ast syn::ItemUse) {
        if u.leading_colon.is_none() {
            self.use_tree(&mut Vec::new(), &u.tree);
        }
    }

    fn visit_path(&mut self, path: &'ast syn::Path) {
        if path.leading_colon.is_none() {
            let segments: Vec<String> = path.segments.iter().map(|s| s.ident.to_string()).collect();
            self.record(&segments);
        }
        syn::visit::visit_path(self, path);
    }

    fn visit_macro(&mut self, mac: &'ast syn::Macro) {
        self.tokens(mac.tokens.clone());
        syn::visit::visit_macro(self, mac);
    }

    fn visit_visibility(&mut self, _: &'ast syn::Visibility) {}
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The workspace has no circle but the listed ones, and each listed one is still there.
    #[test]
    fn no_files_import_each_other_in_a_circle() {
        if let Err(e) = check(&crate::workspace_root()) {
            panic!("{e:#}");
        }
    }

    /// A scratch crate with `files`; returns the circles found from its `lib.rs`.
    fn circles_of(name: &str, files: &[(&str, &str)]) -> Vec<Circle> {
        let dir = std::env::temp_dir().join(format!("xtask-imports-{name}-{}", std::process::id()));
        for (path, text) in files {
            let p = dir.join("src").join(path);
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(p, text).unwrap();
        }
        let graph = Graph::build(&dir, &dir.join("src/lib.rs")).unwrap();
        std::fs::remove_dir_all(&dir).ok();
        graph.circles()
    }

    #[test]
    fn a_circle_is_reported_with_its_steps() {
        let circles = circles_of(
            "circle",
            &[
                ("lib.rs", "mod a;\nmod b;\nmod c;\n"),
                ("a.rs", "use crate::b::B;\npub struct A;\n"),
                ("b.rs", "pub struct B(crate::c::C);\n"),
                ("c.rs", "pub fn f() { let _ = format!(\"{:?}\", crate::a::A); }\npub struct C;\n"),
            ],
        );
        assert_eq!(circles.len(), 1, "{circles:?}");
        let report = &circles[0].report;
        assert!(report.contains("src/a.rs -> src/b.rs (crate::b::B)"), "{report}");
        assert!(report.contains("src/b.rs -> src/c.rs (crate::c::C)"), "{report}");
        assert!(report.contains("src/c.rs -> src/a.rs (crate::a::A)"), "{report}");
        let err = judge(circles, &[]).unwrap_err().to_string();
        assert!(err.contains("circle"), "{err}");
    }

    #[test]
    fn children_tests_and_layers_are_not_circles() {
        let circles = circles_of(
            "fine",
            &[
                // The parent drives its children by plain name; they use its types through
                // `super`; tests reach anywhere.
                ("lib.rs", "mod table;\nmod pipeline;\nmod top;\npub struct Root;\npub use crate::top::Top;\n"),
                (
                    "pipeline/mod.rs",
                    "mod phase;\npub struct Stop;\npub fn run() { phase::go(); crate::pipeline::phase::go() }\n",
                ),
                ("pipeline/phase.rs", "use super::Stop;\npub fn go() { let _ = (crate::table::T, crate::Root); }\n"),
                ("table.rs", "pub struct T;\n#[cfg(test)]\nmod tests { use crate::top::Top; }\n"),
                ("top.rs", "use crate::table::T;\npub struct Top(T);\nmod inner { use super::Top; }\n"),
            ],
        );
        assert!(circles.is_empty(), "{circles:?}");
    }

    /// A reference through a re-export leads to the file that defines the item: `super::B` where
    /// the parent has `pub use b::B` (or `pub use b::*`) is a reference to `b.rs`.
    #[test]
    fn a_circle_through_a_re_export_is_found() {
        for reexport in ["pub use b::B;", "pub use self::b::B as B;", "pub use b::*;", "pub use crate::b::{B};"] {
            let circles = circles_of(
                "reexport",
                &[
                    ("lib.rs", &format!("mod a;\nmod b;\n{reexport}\npub use a::A;\n")),
                    ("a.rs", "use super::B;\npub struct A(B);\n"),
                    ("b.rs", "pub struct B;\npub fn f() -> crate::A { todo!() }\n"),
                ],
            );
            assert_eq!(circles.len(), 1, "{reexport}: {circles:?}");
            let report = &circles[0].report;
            assert!(report.contains("src/a.rs -> src/b.rs (super::B)"), "{reexport}: {report}");
            assert!(report.contains("src/b.rs -> src/a.rs (crate::A)"), "{reexport}: {report}");
        }
        // An item the parent defines itself is the parent's, whatever its children re-export.
        let circles = circles_of(
            "own",
            &[
                ("lib.rs", "mod a;\nmod b;\npub struct B;\npub use a::*;\n"),
                ("a.rs", "pub struct A(crate::B);\n"),
                ("b.rs", "pub fn f() -> crate::A { todo!() }\n"),
            ],
        );
        assert!(circles.is_empty(), "{circles:?}");
    }

    #[test]
    fn a_known_circle_passes_and_a_stale_entry_fails() {
        let circles = circles_of(
            "known",
            &[
                ("lib.rs", "mod a;\nmod b;\n"),
                ("a.rs", "use super::b::f;\n"),
                ("b.rs", "pub fn f() { crate::a::g() }\n"),
            ],
        );
        let files: Vec<String> = circles[0].files.iter().cloned().collect();
        let names: Vec<&str> = files.iter().map(String::as_str).collect();
        assert!(judge(circles, &[("#0", &names)]).is_ok());
        let err = judge(Vec::new(), &[("#0", &names)]).unwrap_err().to_string();
        assert!(err.contains("#0") && err.contains("gone"), "{err}");
    }
}
