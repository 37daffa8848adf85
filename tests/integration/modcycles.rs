//! No module cycles: every crate's module graph, from its `use crate::`/`super::`/`self::` paths
//! (and `crate::`/`super::` paths in code) outside `#[cfg(test)]` blocks, `tests` modules and
//! comments, has no two modules that reach each other. Counted as `../shared/tools/modcycles.py` counts them: a
//! module's imports from its own ancestors (their re-exports, the facade) are not edges.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// A module path inside a crate: `[]` is the crate root, `["table", "io"]` is `table::io`.
pub(crate) type Module = Vec<String>;

/// Every file module under `src`, keyed by its module path.
pub(crate) fn modules(src: &Path) -> BTreeMap<Module, PathBuf> {
    fn walk(dir: &Path, src: &Path, out: &mut BTreeMap<Module, PathBuf>) {
        let Ok(entries) = std::fs::read_dir(dir) else {
            return;
        };
        for entry in entries {
            let path = entry.expect("reads a directory entry").path();
            if path.is_dir() {
                walk(&path, src, out);
                continue;
            }
            if path.extension().is_none_or(|e| e != "rs") {
                continue;
            }
            let rel = path
                .strip_prefix(src)
                .expect("under src")
                .with_extension("");
            let mut parts: Vec<String> = rel
                .components()
                .map(|c| c.as_os_str().to_string_lossy().into_owned())
                .collect();
            let last = parts.last().cloned().unwrap_or_default();
            if parts.len() == 1 && (last == "lib" || last == "main") {
                parts.clear();
            } else if last == "mod" {
                parts.pop();
            }
            // A `tests` module (`#[cfg(test)] mod tests;` in a file of its own) is test code.
            if !parts.iter().any(|p| p == "tests") {
                out.insert(parts, path);
            }
        }
    }
    let mut out = BTreeMap::new();
    walk(src, src, &mut out);
    out
}

/// `text` without `//` comments and without `#[cfg(test)] mod NAME { ... }` blocks.
pub(crate) fn strip_tests(text: &str) -> String {
    let no_comments: String = text
        .lines()
        .map(|l| l.find("//").map_or(l, |i| &l[..i]))
        .collect::<Vec<_>>()
        .join("\n");
    let b = no_comments.as_bytes();
    let mut out = String::new();
    let mut i = 0;
    while let Some(off) = no_comments[i..].find("#[cfg(test)]") {
        let at = i + off;
        let rest = &no_comments[at + "#[cfg(test)]".len()..];
        let trimmed = rest.trim_start();
        let trimmed = trimmed.strip_prefix("pub(crate) ").unwrap_or(trimmed);
        let trimmed = trimmed.strip_prefix("pub ").unwrap_or(trimmed);
        let inline_mod = trimmed.strip_prefix("mod ").and_then(|r| {
            let name_end = r.find(|c: char| !(c.is_alphanumeric() || c == '_'))?;
            r[name_end..].trim_start().starts_with('{').then_some(())
        });
        out.push_str(&no_comments[i..at]);
        if inline_mod.is_none() {
            out.push_str("#[cfg(test)]");
            i = at + "#[cfg(test)]".len();
            continue;
        }
        let open = at + no_comments[at..].find('{').expect("a block");
        let (mut depth, mut j) = (1usize, open + 1);
        while j < b.len() && depth > 0 {
            match b[j] {
                b'{' => depth += 1,
                b'}' => depth -= 1,
                _ => {}
            }
            j += 1;
        }
        i = j;
    }
    out.push_str(&no_comments[i..]);
    out
}

/// `crate::a::{b, c::d}` → `crate::a::b`, `crate::a::c::d` (whitespace already removed).
fn expand(tree: &str) -> Vec<String> {
    let Some(open) = tree.find("::{") else {
        return vec![tree.to_string()];
    };
    if !tree.ends_with('}') {
        return vec![tree.to_string()];
    }
    let head = &tree[..open];
    let body = &tree[open + 3..tree.len() - 1];
    let (mut parts, mut depth, mut cur) = (Vec::new(), 0i32, String::new());
    for ch in body.chars() {
        match ch {
            ',' if depth == 0 => {
                parts.push(std::mem::take(&mut cur));
                continue;
            }
            '{' => depth += 1,
            '}' => depth -= 1,
            _ => {}
        }
        cur.push(ch);
    }
    if !cur.is_empty() {
        parts.push(cur);
    }
    let mut out = Vec::new();
    for p in parts {
        for e in expand(&p) {
            out.push(if e == "self" {
                head.to_string()
            } else {
                format!("{head}::{e}")
            });
        }
    }
    out
}

/// The paths a module's text names: its `use crate|super|self::…;` trees and every
/// `crate::…`/`super::…` path in code.
pub(crate) fn paths(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut rest = text;
    while let Some(at) = rest.find("use ") {
        let before_ok = at == 0 || !rest.as_bytes()[at - 1].is_ascii_alphanumeric();
        let after = &rest[at + 4..];
        rest = after;
        if !before_ok {
            continue;
        }
        let tree = after.trim_start();
        if !(tree.starts_with("crate") || tree.starts_with("super") || tree.starts_with("self")) {
            continue;
        }
        if let Some(end) = tree.find(';') {
            let compact: String = tree[..end].chars().filter(|c| !c.is_whitespace()).collect();
            out.extend(expand(&compact));
        }
    }
    let bytes = text.as_bytes();
    for key in ["crate::", "super::"] {
        let mut from = 0;
        while let Some(off) = text[from..].find(key) {
            let at = from + off;
            from = at + key.len();
            if at > 0 && (bytes[at - 1].is_ascii_alphanumeric() || bytes[at - 1] == b'_') {
                continue;
            }
            let mut end = at;
            while end < bytes.len()
                && (bytes[end].is_ascii_alphanumeric() || b"_:".contains(&bytes[end]))
            {
                end += 1;
            }
            out.push(text[at..end].trim_end_matches(':').to_string());
        }
    }
    out
}

/// The module a path from `me` lands in: its longest prefix that is a file module.
pub(crate) fn resolve(me: &Module, path: &str, mods: &BTreeMap<Module, PathBuf>) -> Option<Module> {
    let segs: Vec<&str> = path.split("::").filter(|s| !s.is_empty()).collect();
    let (mut base, rest) = if segs.first() == Some(&"crate") {
        (Vec::new(), &segs[1..])
    } else {
        let mut base = me.clone();
        let mut k = 0;
        while k < segs.len() && (segs[k] == "super" || segs[k] == "self") {
            if segs[k] == "super" {
                base.pop();
            }
            k += 1;
        }
        (base, &segs[k..])
    };
    base.extend(rest.iter().filter(|s| **s != "*").map(|s| s.to_string()));
    (0..=base.len())
        .rev()
        .map(|n| base[..n].to_vec())
        .find(|m| mods.contains_key(m))
}

/// Each module's edges to the other modules it imports from (ancestors excepted).
fn graph(src: &Path) -> BTreeMap<Module, BTreeSet<Module>> {
    let mods = modules(src);
    let mut edges: BTreeMap<Module, BTreeSet<Module>> = BTreeMap::new();
    for (me, file) in &mods {
        let text = strip_tests(&std::fs::read_to_string(file).expect("reads a source file"));
        let mine = edges.entry(me.clone()).or_default();
        for p in paths(&text) {
            let Some(t) = resolve(me, &p, &mods) else {
                continue;
            };
            if t == *me || t.is_empty() || me.starts_with(&t) {
                continue;
            }
            mine.insert(t);
        }
    }
    edges
}

/// The strongly connected sets of more than one module (Tarjan), each sorted.
pub(crate) fn cycles(edges: &BTreeMap<Module, BTreeSet<Module>>) -> Vec<Vec<String>> {
    struct Tarjan<'a> {
        edges: &'a BTreeMap<Module, BTreeSet<Module>>,
        index: BTreeMap<&'a Module, usize>,
        low: BTreeMap<&'a Module, usize>,
        stack: Vec<&'a Module>,
        on: BTreeSet<&'a Module>,
        out: Vec<Vec<String>>,
    }
    impl<'a> Tarjan<'a> {
        fn visit(&mut self, v: &'a Module) {
            let n = self.index.len();
            self.index.insert(v, n);
            self.low.insert(v, n);
            self.stack.push(v);
            self.on.insert(v);
            for w in self.edges.get(v).into_iter().flatten() {
                let Some((w, _)) = self.edges.get_key_value(w) else {
                    continue;
                };
                if !self.index.contains_key(w) {
                    self.visit(w);
                    let lw = self.low[w];
                    let lv = self.low.get_mut(v).expect("visited");
                    *lv = (*lv).min(lw);
                } else if self.on.contains(w) {
                    let iw = self.index[w];
                    let lv = self.low.get_mut(v).expect("visited");
                    *lv = (*lv).min(iw);
                }
            }
            if self.low[v] == self.index[v] {
                let mut comp = Vec::new();
                while let Some(w) = self.stack.pop() {
                    self.on.remove(w);
                    comp.push(if w.is_empty() {
                        "lib".to_string()
                    } else {
                        w.join("::")
                    });
                    if w == v {
                        break;
                    }
                }
                if comp.len() > 1 {
                    comp.sort();
                    self.out.push(comp);
                }
            }
        }
    }
    let mut t = Tarjan {
        edges,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on: BTreeSet::new(),
        out: Vec::new(),
    };
    for v in edges.keys() {
        if !t.index.contains_key(v) {
            t.visit(v);
        }
    }
    t.out
}

/// The source directories checked: `src/` and every `crates/*/src/`.
pub(crate) fn source_dirs() -> Vec<PathBuf> {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let mut dirs = vec![root.join("src")];
    let mut crates: Vec<PathBuf> = std::fs::read_dir(root.join("crates"))
        .expect("reads crates/")
        .map(|e| e.expect("reads an entry").path().join("src"))
        .filter(|p| p.is_dir())
        .collect();
    crates.sort();
    dirs.extend(crates);
    dirs
}

#[test]
fn no_crate_has_a_module_cycle() {
    let mut found = Vec::new();
    let mut n_modules = 0;
    for src in source_dirs() {
        let edges = graph(&src);
        n_modules += edges.len();
        for c in cycles(&edges) {
            found.push(format!("{}: {}", src.display(), c.join(" <-> ")));
        }
    }
    assert!(n_modules > 100, "read only {n_modules} modules");
    assert!(
        found.is_empty(),
        "module cycles (two modules that import each other, directly or round a loop):\n  {}",
        found.join("\n  ")
    );
}

#[test]
fn a_deliberate_cycle_is_found_and_named() {
    let dir = std::env::temp_dir().join(format!("widebag-modcycles-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let src = dir.as_path();
    std::fs::create_dir_all(src.join("table")).unwrap();
    let write = |rel: &str, text: &str| std::fs::write(src.join(rel), text).unwrap();
    write(
        "lib.rs",
        "//! root\npub mod bag;\npub mod table;\npub mod init;\n",
    );
    // table::io uses its parent (an ancestor: no edge); table uses table::io (no cycle).
    write(
        "table/mod.rs",
        "//! t\npub mod io;\nuse crate::table::io::upload;\n",
    );
    write("table/io.rs", "//! io\nuse super::{Table, Storage};\n");
    // bag → init → bag, one of them through a braced tree, one through a path in code.
    write("bag.rs", "//! b\nuse crate::{init::{self, Spec}, table};\n");
    write(
        "init.rs",
        "//! i\nfn f() { crate::bag::g() }\n#[cfg(test)]\nmod tests {\n    use crate::table::io;\n}\n",
    );
    let edges = graph(src);
    assert_eq!(
        cycles(&edges),
        vec![vec!["bag".to_string(), "init".to_string()]]
    );
    // Removing the edge in code ends the cycle; a test block's imports never make one.
    write(
        "init.rs",
        "//! i\n#[cfg(test)]\nmod tests {\n    use crate::bag;\n}\n",
    );
    assert!(cycles(&graph(src)).is_empty());
    std::fs::remove_dir_all(&dir).expect("removes the temporary crate");
}
