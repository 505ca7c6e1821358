//! The table of a capability's names in `docs/names.md` is the one `id::names_table` renders:
//! the page cannot drift from the code. `UPDATE_EXPECT=1` rewrites the page's generated block.

use agent_surface_registry::id;

const BEGIN: &str = "<!-- BEGIN GENERATED: names (UPDATE_EXPECT=1 cargo test -p agent-surface-registry --test it names; do not edit) -->\n";
const END: &str = "<!-- END GENERATED: names -->";

#[test]
fn the_names_table_in_the_docs_is_rendered_from_the_code() {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/names.md");
    let page = std::fs::read_to_string(&path).expect("docs/names.md is readable");
    let start = page.find(BEGIN).expect("docs/names.md has the generated block's start marker") + BEGIN.len();
    let end = start + page[start..].find(END).expect("docs/names.md has the generated block's end marker");
    let rendered = id::names_table("tickets", "create");
    if page[start..end] == rendered {
        return;
    }
    if std::env::var_os("UPDATE_EXPECT").is_some() {
        let updated = format!("{}{rendered}{}", &page[..start], &page[end..]);
        std::fs::write(&path, updated).expect("docs/names.md is writable");
        return;
    }
    panic!(
        "the names table of docs/names.md differs from `id::names_table`; run \
         `UPDATE_EXPECT=1 cargo test -p agent-surface-registry --test it names`.\nexpected:\n{rendered}\nfound:\n{}",
        &page[start..end]
    );
}
