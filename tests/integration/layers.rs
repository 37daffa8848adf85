//! Folders that stack one way: drawn folder by folder (each file or sub-folder a room, each import
//! an arrow, `mod.rs`/`lib.rs` a room of its folder), no crate has an import that runs back up —
//! every folder's rooms import each other without a loop, re-exports of a folder's facade
//! included. And the crates whose floors ARCHITECTURE.md lists (`widebag-model`,
//! `widebag-data`) import only from their own floor or the floors below it, and place every
//! top-level module on a floor. (`modcycles` counts files and skips a module's use of its own
//! ancestors; this counts folders and does not.)

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use crate::common::repo_root;
use crate::modcycles::{Module, cycles, modules, paths, resolve, source_dirs, strip_tests};

/// The paths of `use child::…` trees in `text` that start at one of `me`'s own child modules
/// (a facade's `pub use child::Name`), as `self::child::…`.
fn child_paths(
    text: &str,
    me: &Module,
    mods: &BTreeMap<Module, std::path::PathBuf>,
) -> Vec<String> {
    let mut out = Vec::new();
    for line in text.lines() {
        let line = line.trim_start();
        let line = line.strip_prefix("pub ").unwrap_or(line);
        let line = line.strip_prefix("pub(crate) ").unwrap_or(line);
        let Some(tree) = line.strip_prefix("use ") else {
            continue;
        };
        let first: String = tree
            .chars()
            .take_while(|c| c.is_alphanumeric() || *c == '_')
            .collect();
        let mut child = me.clone();
        child.push(first.clone());
        if !first.is_empty() && tree[first.len()..].starts_with("::") && mods.contains_key(&child) {
            out.push(format!("self::{}", tree.trim_end_matches(';')));
        }
    }
    out
}

/// Each module's edges to the other modules it imports from, its ancestors and the crate root
/// (another module's re-export) included.
fn graph(src: &Path) -> BTreeMap<Module, BTreeSet<Module>> {
    let mods = modules(src);
    let mut edges: BTreeMap<Module, BTreeSet<Module>> = BTreeMap::new();
    for (me, file) in &mods {
        let text = strip_tests(&std::fs::read_to_string(file).expect("reads a source file"));
        let mine = edges.entry(me.clone()).or_default();
        let relative = child_paths(&text, me, &mods);
        for p in paths(&text).into_iter().chain(relative) {
            let p: String = p.chars().filter(|c| !c.is_whitespace()).collect();
            let p = p.split("::{").next().unwrap_or(&p).to_string();
            // `crate::{a, b}` seen as a path in code: its tree's own paths are counted already.
            if matches!(p.as_str(), "crate" | "super" | "self") {
                continue;
            }
            match resolve(me, &p, &mods) {
                Some(t) if t != *me => {
                    mine.insert(t);
                }
                _ => {}
            }
        }
    }
    edges
}

/// The room module `m` stands in when folder `folder` is drawn: `mod` for the folder's own
/// `mod.rs` (`lib.rs` at the root), else the child of `folder` that holds `m`; `None` outside.
fn room(folder: &[String], m: &Module) -> Option<String> {
    if !m.starts_with(folder) {
        return None;
    }
    Some(match m.get(folder.len()) {
        None => "mod".to_string(),
        Some(child) => child.clone(),
    })
}

/// Every folder of `edges`' crate (the root and each module with children), with the arrows
/// between its rooms.
fn folders(
    edges: &BTreeMap<Module, BTreeSet<Module>>,
) -> BTreeMap<Module, BTreeMap<Module, BTreeSet<Module>>> {
    let mut out: BTreeMap<Module, BTreeMap<Module, BTreeSet<Module>>> = BTreeMap::new();
    let all: BTreeSet<&Module> = edges.keys().collect();
    let folders: BTreeSet<Module> = all
        .iter()
        .flat_map(|m| (0..m.len()).map(|n| m[..n].to_vec()))
        .collect();
    for folder in folders {
        let rooms = out.entry(folder.clone()).or_default();
        for (from, tos) in edges {
            let Some(a) = room(&folder, from) else {
                continue;
            };
            for to in tos {
                let Some(b) = room(&folder, to) else { continue };
                if a != b {
                    rooms.entry(vec![a.clone()]).or_default().insert(vec![b]);
                }
            }
        }
    }
    out
}

/// The floors ARCHITECTURE.md lists for `krate`, top first: the lines under its
/// "`krate` floors, top to bottom" line, each a floor of space-separated top-level modules.
fn declared_floors(krate: &str) -> Vec<Vec<String>> {
    let text = std::fs::read_to_string(repo_root().join("ARCHITECTURE.md")).expect("reads it");
    let head = format!("{krate} floors, top to bottom");
    let mut lines = text.lines().skip_while(|l| !l.contains(&head));
    assert!(lines.next().is_some(), "ARCHITECTURE.md lists no `{head}`");
    lines
        .take_while(|l| !l.trim().is_empty() && !l.starts_with("```"))
        .map(|l| l.split_whitespace().map(str::to_string).collect())
        .collect()
}

/// The imports of `src`'s top-level modules that run against `floors` (top first): from a
/// module to one on a higher floor, or from or to one on no floor.
fn against_floors(src: &Path, floors: &[Vec<String>]) -> Vec<String> {
    let floor_of = |name: &str| floors.iter().position(|f| f.iter().any(|m| m == name));
    let mut bad = Vec::new();
    let root = &folders(&graph(src))[&Vec::new()];
    let rooms: BTreeSet<&Module> = root.keys().chain(root.values().flatten()).collect();
    for r in rooms.iter().filter(|r| r[0] != "mod") {
        if floor_of(&r[0]).is_none() {
            bad.push(format!("{} is on no floor", r[0]));
        }
    }
    for (from, tos) in root {
        for to in tos {
            let (a, b) = (floor_of(&from[0]), floor_of(&to[0]));
            if let (Some(a), Some(b)) = (a, b)
                && b < a
            {
                bad.push(format!(
                    "{} (floor {a}) imports {} (floor {b}, above it)",
                    from[0], to[0]
                ));
            }
            if to[0] == "mod" {
                bad.push(format!(
                    "{} imports through the crate root's re-exports",
                    from[0]
                ));
            }
        }
    }
    bad
}

#[test]
fn every_folder_of_every_crate_draws_without_an_import_running_back_up() {
    let mut found = Vec::new();
    let mut n_folders = 0;
    for src in source_dirs() {
        for (folder, rooms) in folders(&graph(&src)) {
            n_folders += 1;
            for c in cycles(&rooms) {
                let at = match folder.is_empty() {
                    true => String::new(),
                    false => format!("/{}", folder.join("/")),
                };
                found.push(format!("{}{at}: {}", src.display(), c.join(" <-> ")));
            }
        }
    }
    assert!(n_folders > 30, "read only {n_folders} folders");
    assert!(
        found.is_empty(),
        "rooms of one folder that import each other (`mod` is the folder's mod.rs or lib.rs):\n  {}",
        found.join("\n  ")
    );
}

#[test]
fn the_model_and_data_crates_import_only_down_their_declared_floors() {
    for krate in ["widebag-model", "widebag-data"] {
        let floors = declared_floors(krate);
        assert!(floors.len() > 4, "{krate}: {} floors listed", floors.len());
        let bad = against_floors(&repo_root().join("crates").join(krate).join("src"), &floors);
        assert!(
            bad.is_empty(),
            "{krate} against its floors in ARCHITECTURE.md:\n  {}",
            bad.join("\n  ")
        );
    }
}

#[test]
fn an_import_up_a_floor_or_through_the_root_is_found() {
    let dir = std::env::temp_dir().join(format!("widebag-layers-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let src = dir.as_path();
    std::fs::create_dir_all(src.join("step")).unwrap();
    let write = |rel: &str, text: &str| std::fs::write(src.join(rel), text).unwrap();
    write(
        "lib.rs",
        "//! r\npub mod step;\npub mod table;\npub use table::Table;\n",
    );
    write("step/mod.rs", "//! s\npub mod probe;\n");
    write("step/probe.rs", "//! p\n");
    write("table.rs", "//! t\nuse crate::step::probe::Probe;\n");
    let floors = vec![vec!["step".to_string()], vec!["table".to_string()]];
    assert_eq!(
        against_floors(src, &floors),
        vec!["table (floor 1) imports step (floor 0, above it)".to_string()]
    );
    // Through the root's re-export: a loop between lib.rs and table.
    write("table.rs", "//! t\nuse crate::Table;\n");
    assert!(
        against_floors(src, &floors)
            .iter()
            .any(|b| b.contains("re-exports"))
    );
    assert_eq!(cycles(&folders(&graph(src))[&Vec::new()]).len(), 1);
    // A folder's file importing its mod.rs while mod.rs re-exports from it: a loop in the folder.
    write("table.rs", "//! t\n");
    write(
        "step/mod.rs",
        "//! s\npub mod probe;\npub use probe::Probe;\n",
    );
    write("step/probe.rs", "//! p\nuse super::Step;\n");
    let step = &folders(&graph(src))[&vec!["step".to_string()]];
    assert_eq!(
        cycles(step),
        vec![vec!["mod".to_string(), "probe".to_string()]]
    );
    std::fs::remove_dir_all(&dir).expect("removes the temporary crate");
}
