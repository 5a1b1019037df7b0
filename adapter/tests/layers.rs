//! The adapter's floors, kept: every file of `src/` in a floor folder imports only from its
//! own floor or the floors below it, and no two files import each other unless they are one
//! concern of one floor (the pairs in [`ALLOWED_PAIRS`]).
//!
//! The floors, lowest first, are [`FLOORS`] (the README's Layout says what each holds). An
//! import is any path in the code (comments and string literals aside) that starts with
//! `crate::` (in a `use` line, a `use crate::{…}` group, or inline), or with `super::` from a
//! file's own folder. Inside a floor, items are named by their module path: a path through the
//! crate root's re-exports (`crate::Handler`) hides which floor it comes from, and is refused
//! too, as is `super::super::` (a way across floors that is not a `crate::` path).

#![allow(clippy::unwrap_used, clippy::print_stdout, missing_docs)]

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// The floors of `src/`, lowest first.
const FLOORS: [&str; 8] = [
    "runtime", "support", "api", "state", "handling", "loops", "app", "tools",
];

/// Pairs of files that may import each other: one concern of one floor.
const ALLOWED_PAIRS: [(&str, &str); 0] = [];

/// A source file: its module path (`api::handler`, `app` for `app/mod.rs`) and its code with
/// comments and string literals blanked out.
struct Source {
    module: String,
    code: String,
}

/// Every `.rs` file under `dir`, with its path relative to `root`.
fn rust_files(root: &Path, dir: &Path, found: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            rust_files(root, &path, found);
        } else if path.extension().is_some_and(|e| e == "rs") {
            found.push(path.strip_prefix(root).unwrap().to_path_buf());
        }
    }
}

/// The module path of a file relative to `src/`: `api/handler.rs` is `api::handler`,
/// `app/mod.rs` is `app`, `lib.rs` is the root (empty).
fn module_of(relative: &Path) -> String {
    let mut parts: Vec<String> = relative
        .iter()
        .map(|p| p.to_string_lossy().into_owned())
        .collect();
    let last = parts.pop().unwrap();
    let stem = last.trim_end_matches(".rs");
    if stem != "mod" && stem != "lib" {
        parts.push(stem.to_owned());
    }
    parts.join("::")
}

/// `code` with every comment and the contents of every string and char literal replaced by
/// spaces (line breaks kept), so that only code is searched.
fn blank_comments_and_strings(code: &str) -> String {
    let chars: Vec<char> = code.chars().collect();
    let mut out = String::with_capacity(code.len());
    let mut i = 0;
    let blank = |c: char| if c == '\n' { '\n' } else { ' ' };
    while i < chars.len() {
        let c = chars[i];
        let next = chars.get(i + 1).copied();
        if c == '/' && next == Some('/') {
            while i < chars.len() && chars[i] != '\n' {
                out.push(' ');
                i += 1;
            }
        } else if c == '/' && next == Some('*') {
            let mut depth = 0;
            while i < chars.len() {
                if chars[i] == '/' && chars.get(i + 1) == Some(&'*') {
                    depth += 1;
                    out.push_str("  ");
                    i += 2;
                } else if chars[i] == '*' && chars.get(i + 1) == Some(&'/') {
                    depth -= 1;
                    out.push_str("  ");
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    out.push(blank(chars[i]));
                    i += 1;
                }
            }
        } else if c == 'r'
            && matches!(next, Some('"' | '#'))
            && !ident_char(chars.get(i.wrapping_sub(1)))
        {
            // A raw string: r"…", r#"…"#.
            let mut hashes = 0;
            let mut j = i + 1;
            while chars.get(j) == Some(&'#') {
                hashes += 1;
                j += 1;
            }
            if chars.get(j) != Some(&'"') {
                out.push(c);
                i += 1;
                continue;
            }
            j += 1;
            loop {
                if j >= chars.len() {
                    break;
                }
                if chars[j] == '"' && (0..hashes).all(|h| chars.get(j + 1 + h) == Some(&'#')) {
                    j += 1 + hashes;
                    break;
                }
                j += 1;
            }
            out.extend(chars[i..j.min(chars.len())].iter().map(|&c| blank(c)));
            i = j;
        } else if c == '"' {
            out.push(' ');
            i += 1;
            while i < chars.len() && chars[i] != '"' {
                if chars[i] == '\\' {
                    out.push(' ');
                    i += 1;
                }
                if i < chars.len() {
                    out.push(blank(chars[i]));
                    i += 1;
                }
            }
            out.push(' ');
            i += 1;
        } else if c == '\'' {
            // A char literal ('x', '\n', '\''), or a lifetime ('a), which is left as it is.
            if next == Some('\\') {
                let mut j = i + 2;
                while j < chars.len() && chars[j] != '\'' {
                    j += 1;
                }
                out.extend(std::iter::repeat_n(' ', j + 1 - i));
                i = j + 1;
            } else if chars.get(i + 2) == Some(&'\'') {
                out.push_str("   ");
                i += 3;
            } else {
                out.push(c);
                i += 1;
            }
        } else {
            out.push(c);
            i += 1;
        }
    }
    out
}

fn ident_char(c: Option<&char>) -> bool {
    c.is_some_and(|c| c.is_alphanumeric() || *c == '_')
}

/// A path's segments (`crate::a::b` is `["a", "b"]`).
type Segments = Vec<String>;

/// The paths `code` names from the crate root (`crate::a::b` gives `["a", "b"]`; a group
/// `crate::{a::b, c}` gives each of its members), and the paths it names through `super::`
/// (with how many `super::` they start with).
fn paths(code: &str) -> (Vec<Segments>, Vec<(usize, Segments)>) {
    let mut from_root = Vec::new();
    let mut from_super = Vec::new();
    let bytes: Vec<char> = code.chars().collect();
    let mut i = 0;
    while i < bytes.len() {
        let at_word = i == 0 || !ident_char(bytes.get(i - 1)) && bytes[i - 1] != ':';
        let rest: String = bytes[i..bytes.len().min(i + 8)].iter().collect();
        if at_word && rest.starts_with("crate::") {
            let (found, end) = path_tree(&bytes, i + "crate::".len());
            from_root.extend(found);
            i = end;
        } else if at_word && rest.starts_with("super::") {
            let mut supers = 0;
            let mut j = i;
            while bytes[j..].iter().take(7).collect::<String>() == "super::" {
                supers += 1;
                j += 7;
            }
            let (found, end) = path_tree(&bytes, j);
            from_super.extend(found.into_iter().map(|p| (supers, p)));
            i = end;
        } else {
            i += 1;
        }
    }
    (from_root, from_super)
}

/// The paths of a path tree starting at `at` (`a::b`, `a::{b, c::d}`, `{a, b}`), each as its
/// segments, and where the tree ends.
fn path_tree(chars: &[char], at: usize) -> (Vec<Vec<String>>, usize) {
    let mut i = at;
    let mut prefix = Vec::new();
    loop {
        while chars.get(i).is_some_and(|c| c.is_whitespace()) {
            i += 1;
        }
        if chars.get(i) == Some(&'{') {
            // A group: each member is a tree of its own, after the prefix.
            let mut found = Vec::new();
            i += 1;
            loop {
                while chars.get(i).is_some_and(|c| c.is_whitespace() || *c == ',') {
                    i += 1;
                }
                if chars.get(i).is_none_or(|c| *c == '}') {
                    return (found, i + 1);
                }
                let (members, end) = path_tree(chars, i);
                found.extend(members.into_iter().map(|m| {
                    let mut full = prefix.clone();
                    full.extend(m);
                    full
                }));
                i = end;
                // Skip an `as name` and whatever else ends the member.
                while chars.get(i).is_some_and(|c| *c != ',' && *c != '}') {
                    i += 1;
                }
            }
        }
        let start = i;
        while ident_char(chars.get(i)) {
            i += 1;
        }
        if start == i {
            // `self`, `*`, or the end of the path.
            if chars.get(i) == Some(&'*') {
                i += 1;
            }
            return (vec![prefix], i);
        }
        let segment: String = chars[start..i].iter().collect();
        if segment != "self" {
            prefix.push(segment);
        }
        if chars.get(i) == Some(&':') && chars.get(i + 1) == Some(&':') {
            i += 2;
        } else {
            return (vec![prefix], i);
        }
    }
}

/// The floor of a module path (its first segment), by its rank in [`FLOORS`].
fn floor(module: &str) -> Option<usize> {
    let first = module.split("::").next()?;
    FLOORS.iter().position(|f| *f == first)
}

/// The longest module among `modules` that `path` starts with.
fn resolve(path: &[String], modules: &BTreeSet<String>) -> Option<String> {
    (1..=path.len())
        .rev()
        .map(|n| path[..n].join("::"))
        .find(|m| modules.contains(m))
}

/// Ways of naming another module that the path check below cannot follow, refused in every
/// floor file: a glob from the crate root, the crate under another name, a path a macro
/// builds, a file taken from another folder, and glob re-exports (which would make a
/// module's own path name another floor's items).
const EVASIONS: [(&str, &str); 6] = [
    ("crate::*", "a glob of the crate root"),
    ("crate as", "the crate under another name"),
    ("extern crate", "the crate under another name"),
    ("crate::$", "a path a macro builds"),
    ("#[path", "a file taken from another folder"),
    ("use super::*;", "a glob of the module above"),
];

/// `code` with the spaces around every `::` taken out (`crate :: a` is `crate::a`).
fn tight_paths(code: &str) -> String {
    let mut out = String::with_capacity(code.len());
    let chars: Vec<char> = code.chars().collect();
    let mut i = 0;
    while i < chars.len() {
        if chars[i].is_whitespace() {
            let mut j = i;
            while j < chars.len() && chars[j].is_whitespace() {
                j += 1;
            }
            let before_path = chars.get(j) == Some(&':') && chars.get(j + 1) == Some(&':');
            let after_path = out.ends_with("::");
            if !before_path && !after_path {
                out.extend(&chars[i..j]);
            }
            i = j;
        } else {
            out.push(chars[i]);
            i += 1;
        }
    }
    out
}

/// What is wrong with the layering of `sources`: one line per fault.
fn faults(sources: &[Source]) -> Vec<String> {
    let modules: BTreeSet<String> = sources.iter().map(|s| s.module.clone()).collect();
    let mut faults = Vec::new();
    for source in sources.iter().filter(|s| floor(&s.module).is_some()) {
        // A test module's own `use super::*;` is how tests read the module they test.
        let code = source
            .code
            .replace("mod tests {\n    use super::*;", "mod tests {");
        for (evasion, what) in EVASIONS {
            if code.contains(evasion) || tight_paths(&code).contains(evasion) {
                faults.push(format!(
                    "{}: `{evasion}` ({what}) hides which floor a name comes from",
                    source.module
                ));
            }
        }
    }
    let mut edges: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for source in sources {
        let Some(own) = floor(&source.module) else {
            // The crate root (lib.rs) declares the floors and re-exports the API.
            continue;
        };
        let (from_root, from_super) = paths(&tight_paths(&source.code));
        let mut named: Vec<(String, Vec<String>)> = Vec::new();
        for path in from_root {
            named.push((format!("crate::{}", path.join("::")), path));
        }
        // `super::` from a file: its parent module (`a::b::c` → `a::b`), and one more up for
        // each further `super::`. A `mod.rs` is its folder's module, so its `super::` is
        // the folder above.
        for (supers, path) in from_super {
            let mut base: Vec<String> = source.module.split("::").map(str::to_owned).collect();
            for _ in 0..supers {
                base.pop();
            }
            if supers > 1 {
                faults.push(format!(
                    "{}: `{}{}` crosses floors through super::super; name it from `crate::`",
                    source.module,
                    "super::".repeat(supers),
                    path.join("::")
                ));
            }
            let mut full = base;
            full.extend(path.iter().cloned());
            named.push((
                format!("{}{}", "super::".repeat(supers), path.join("::")),
                full,
            ));
        }
        for (written, path) in named {
            let Some(target) = resolve(&path, &modules) else {
                {
                    faults.push(format!(
                        "{}: `{written}` names an item through the crate root; name it by its module path",
                        source.module
                    ));
                }
                continue;
            };
            match floor(&target) {
                Some(theirs) if theirs > own => faults.push(format!(
                    "{}: `{written}` imports from floor `{}`, above its own floor `{}`",
                    source.module, FLOORS[theirs], FLOORS[own]
                )),
                Some(_) => {}
                None => faults.push(format!(
                    "{}: `{written}` names an item through the crate root; name it by its module path",
                    source.module
                )),
            }
            if target != source.module {
                edges
                    .entry(source.module.clone())
                    .or_default()
                    .insert(target);
            }
        }
    }
    // Files that import each other, however far round: allowed only as the listed pairs.
    for cycle in cycles(&edges) {
        let allowed = cycle.len() == 2
            && ALLOWED_PAIRS.iter().any(|(a, b)| {
                (cycle[0] == *a && cycle[1] == *b) || (cycle[0] == *b && cycle[1] == *a)
            });
        if !allowed {
            faults.push(format!(
                "files that import each other: {}",
                cycle.join(" <-> ")
            ));
        }
    }
    faults
}

/// The strongly connected components of more than one module (Tarjan's algorithm), each
/// sorted.
fn cycles(edges: &BTreeMap<String, BTreeSet<String>>) -> Vec<Vec<String>> {
    struct Walk<'e> {
        edges: &'e BTreeMap<String, BTreeSet<String>>,
        index: BTreeMap<&'e str, usize>,
        low: BTreeMap<&'e str, usize>,
        stack: Vec<&'e str>,
        on_stack: BTreeSet<&'e str>,
        found: Vec<Vec<String>>,
    }
    impl<'e> Walk<'e> {
        fn visit(&mut self, v: &'e str) {
            let n = self.index.len();
            self.index.insert(v, n);
            self.low.insert(v, n);
            self.stack.push(v);
            self.on_stack.insert(v);
            for w in self.edges.get(v).into_iter().flatten() {
                let w = w.as_str();
                if !self.index.contains_key(w) {
                    self.visit(w);
                    let low = self.low[v].min(self.low[w]);
                    self.low.insert(v, low);
                } else if self.on_stack.contains(w) {
                    let low = self.low[v].min(self.index[w]);
                    self.low.insert(v, low);
                }
            }
            if self.low[v] == self.index[v] {
                let mut component = Vec::new();
                while let Some(w) = self.stack.pop() {
                    self.on_stack.remove(w);
                    component.push(w.to_owned());
                    if w == v {
                        break;
                    }
                }
                if component.len() > 1 {
                    component.sort();
                    self.found.push(component);
                }
            }
        }
    }
    let mut walk = Walk {
        edges,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on_stack: BTreeSet::new(),
        found: Vec::new(),
    };
    for v in edges.keys() {
        if !walk.index.contains_key(v.as_str()) {
            walk.visit(v);
        }
    }
    walk.found
}

/// The adapter's own sources.
fn adapter_sources() -> Vec<Source> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    rust_files(&src, &src, &mut files);
    files.sort();
    files
        .iter()
        .map(|relative| Source {
            module: module_of(relative),
            code: blank_comments_and_strings(&std::fs::read_to_string(src.join(relative)).unwrap()),
        })
        .collect()
}

#[test]
fn every_file_imports_only_from_its_floor_or_below_and_no_files_import_each_other() {
    let sources = adapter_sources();
    // Every file of src/ is in a floor, but the crate root.
    let outside: Vec<&str> = sources
        .iter()
        .filter(|s| !s.module.is_empty() && floor(&s.module).is_none())
        .map(|s| s.module.as_str())
        .collect();
    assert!(outside.is_empty(), "files outside every floor: {outside:?}");
    let faults = faults(&sources);
    assert!(
        faults.is_empty(),
        "the adapter's floors are broken:\n{}",
        faults.join("\n")
    );
}

/// The check itself: it finds an upward import (in a `use` line, a group, an inline path),
/// a path through the crate root, `super::super::`, and files that import each other, and
/// passes what is allowed; comments and strings do not count.
#[test]
fn the_check_finds_each_kind_of_fault() {
    let source = |module: &str, code: &str| Source {
        module: module.to_owned(),
        code: blank_comments_and_strings(code),
    };
    let base = || {
        vec![
            source("runtime", "pub trait Runtime {}"),
            source("support", "pub mod incoming;"),
            source("support::incoming", "use crate::runtime::Runtime;"),
            source(
                "app",
                "use crate::support::incoming::Incoming; use self::running::Running;",
            ),
            source("app::running", "use super::startup::StartError;"),
            source("app::startup", "pub struct StartError;"),
        ]
    };
    assert_eq!(faults(&base()), Vec::<String>::new());
    let with = |extra: Source| {
        let mut all = base();
        all.retain(|s| s.module != extra.module);
        all.push(extra);
        faults(&all)
    };
    // Upward, in each form a path takes.
    for code in [
        "use crate::app::startup::StartError;",
        "use crate::{runtime::Runtime, app::running};",
        "fn f() { crate::app::running::stop(); }",
    ] {
        let found = with(source("support::incoming", code));
        assert!(
            found
                .iter()
                .any(|f| f.contains("above its own floor `support`")),
            "{code}: {found:?}"
        );
    }
    // In a comment or a string: not an import.
    assert_eq!(
        with(source(
            "support::incoming",
            "// crate::app::running\n/// [`x`](crate::app::running)\nconst S: &str = \"crate::app\";"
        )),
        Vec::<String>::new()
    );
    // Through the crate root.
    let found = with(source("support::incoming", "use crate::Handler;"));
    assert!(
        found.iter().any(|f| f.contains("through the crate root")),
        "{found:?}"
    );
    // super::super.
    let found = with(source(
        "app::running",
        "use super::super::support::incoming::Incoming;",
    ));
    assert!(
        found.iter().any(|f| f.contains("super::super")),
        "{found:?}"
    );
    // The ways around the path check.
    for code in [
        "use crate::*;",
        "use crate as root; fn f() { root::app::x(); }",
        "extern crate self as me;",
        "macro_rules! up { ($p:ident) => { crate::$p::x() } }",
        "#[path = \"../app/grace_period.rs\"] mod borrowed;",
        "pub(crate) use super::*;",
        "use crate :: app :: running :: Running;",
    ] {
        let found = with(source("support::incoming", code));
        assert!(!found.is_empty(), "{code}: not found");
    }
    // Two files of one floor that import each other.
    let found = with(source("app::startup", "use super::running::Running;"));
    assert!(
        found
            .iter()
            .any(|f| f.contains("import each other: app::running <-> app::startup")),
        "{found:?}"
    );
}
