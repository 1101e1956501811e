//! The shape of `src/`: imports follow the layer table of `lib.rs`, and no two files depend on
//! each other. Reads the source itself: every `crate::`, `super::` and `self::` path outside
//! comments, string literals and `#[cfg(test)]` modules, with `use` trees expanded.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// A module as its path from the crate root (`["job", "envelope"]`); `[]` is `lib.rs`.
type Module = Vec<String>;

#[test]
fn imports_follow_the_layer_table_of_lib_rs() {
    let source = Source::read();
    let table = LayerTable::of_lib_rs();
    let unplaced: BTreeSet<&str> = source
        .edges
        .keys()
        .filter_map(|m| m.first().map(String::as_str))
        .filter(|top| *top != "main" && !table.layers.contains_key(*top))
        .collect();
    assert!(
        unplaced.is_empty(),
        "modules missing from the layer table of lib.rs: {unplaced:?}"
    );
    let wrong = table.against(&source);
    assert!(
        wrong.is_empty(),
        "imports against the layer table of lib.rs:\n{}",
        wrong.join("\n")
    );
}

#[test]
fn no_two_files_depend_on_each_other() {
    let circles = circles(&Source::read());
    assert!(
        circles.is_empty(),
        "import circles:\n{}",
        circles.join("\n")
    );
}

#[test]
fn no_http_resource_imports_another() {
    let sideways = LayerTable::of_lib_rs().sideways(&Source::read());
    assert!(
        sideways.is_empty(),
        "http resources importing each other (move what they share to a shared module):\n{}",
        sideways.join("\n")
    );
}

#[test]
fn a_planted_sideways_import_and_a_planted_parent_child_circle_are_caught() {
    let table = LayerTable::of_lib_rs();
    let mut files = Source::files();
    assert!(table.sideways(&Source::of(&files)).is_empty());
    assert!(circles(&Source::of(&files)).is_empty());

    // One resource reaching into another.
    let mut sideways = files.clone();
    plant(
        &mut sideways,
        "http::cron::entries",
        "use crate::http::jobs::lifecycle::cancel;",
    );
    assert_eq!(
        table.sideways(&Source::of(&sideways)),
        ["http::cron::entries -> http::jobs::lifecycle"]
    );

    // A child using what its `mod.rs` defines, while the `mod.rs` wires the child.
    plant(
        &mut files,
        "http::jobs::push",
        "fn planted() { let _ = super::router; }",
    );
    assert_eq!(
        circles(&Source::of(&files)),
        ["http::jobs::push <-> http::jobs"]
    );
}

/// Adds `line` to the code of `module`'s file.
fn plant(files: &mut BTreeMap<Module, Vec<Named>>, module: &str, line: &str) {
    let module: Module = module.split("::").map(String::from).collect();
    let named = files.get_mut(&module).expect("the module exists");
    paths(&strip(line), &mut |n| named.push(n));
}

/// The circles of files that use each other, each as `a <-> b <-> …`.
fn circles(source: &Source) -> Vec<String> {
    let graph: BTreeMap<&Module, Vec<&Module>> = source
        .uses
        .iter()
        .map(|(from, tos)| (from, tos.iter().collect()))
        .collect();
    strongly_connected(&graph)
        .into_iter()
        .filter(|component| component.len() > 1)
        .map(|component| {
            let names: Vec<String> = component.iter().map(|m| m.join("::")).collect();
            names.join(" <-> ")
        })
        .collect()
}

#[test]
fn the_reader_finds_paths_in_code_only() {
    let text = strip(concat!(
        "use crate::{a::{b, c::D}, e as f};\n",
        "// crate::x\n/* crate::y */\n",
        "let s = \"crate::y \\\" crate::y\"; let r = r#\"crate::z\"#;\n",
        "let c = '\"'; fn f<'a>(x: &'a str) { crate::g::h(); }\n",
        "pub(in crate::v) fn g() {}\n",
        "#[cfg(test)]\nmod tests { use crate::t; }\n",
    ));
    let mut found = BTreeSet::new();
    paths(&text, &mut |named| {
        found.insert(named.path.join("::"));
    });
    let expected = ["crate::a::b", "crate::a::c::D", "crate::e", "crate::g::h"];
    assert_eq!(found, expected.into_iter().map(String::from).collect());
}

#[test]
fn the_layer_table_refuses_upward_and_forbidden_imports() {
    let table = LayerTable::of_lib_rs();
    let m = |path: &str| path.split("::").map(String::from).collect::<Module>();
    assert!(table.allows(&m("broker::fetch"), &m("store::job")));
    assert!(table.allows(&m("job::envelope"), &m("wire::json")));
    assert!(!table.allows(&m("store::job"), &m("broker")));
    assert!(!table.allows(&m("wire::json"), &m("job")));
    assert!(!table.allows(&m("maintenance::reaper"), &m("broker")));
    assert!(!table.allows(&m("http::jobs"), &m("store::job")));
}

/// The rows of `lib.rs`'s layer table and its "never imports" lines.
struct LayerTable {
    /// Top-level module → row (0 is the first, lowest layer).
    layers: BTreeMap<String, usize>,
    /// Pairs of top-level modules that must not import each other, though layers allow it.
    never: BTreeSet<(String, String)>,
    /// The modules of `http` every resource may import (the others are resources).
    shared_http: BTreeSet<String>,
}

impl LayerTable {
    fn of_lib_rs() -> LayerTable {
        let lib = std::fs::read_to_string(src().join("lib.rs")).unwrap();
        let mut table = LayerTable {
            layers: BTreeMap::new(),
            never: BTreeSet::new(),
            shared_http: BTreeSet::new(),
        };
        let doc: Vec<&str> = lib.lines().filter_map(|l| l.strip_prefix("//!")).collect();
        let doc = doc.join(" ");
        if let Some((_, rest)) = doc.split_once("the shared modules ") {
            let names = rest.split('.').next().unwrap_or_default();
            for name in names.split('`').skip(1).step_by(2) {
                table.shared_http.insert(name.to_owned());
            }
        }
        for line in lib.lines().filter_map(|l| l.strip_prefix("//!")) {
            let cells: Vec<&str> = line.split('|').map(str::trim).collect();
            if cells.len() >= 4 && cells[2].starts_with('`') {
                let row = table.layers.values().max().map_or(0, |r| r + 1);
                for name in cells[2].split_whitespace() {
                    table.layers.insert(name.trim_matches('`').to_owned(), row);
                }
            }
            if let Some(rest) = line.trim().strip_prefix("- `")
                && let Some((from, rest)) = rest.split_once("` never imports ")
            {
                for to in rest.split('`').skip(1).step_by(2) {
                    table.never.insert((from.to_owned(), to.to_owned()));
                }
            }
        }
        assert!(table.layers.len() > 10, "lib.rs has no layer table");
        assert!(!table.never.is_empty(), "lib.rs names no forbidden imports");
        assert!(
            table.shared_http.len() > 5,
            "lib.rs names no shared http modules"
        );
        table
    }

    /// The imports of `source` against the table, as `from -> to`.
    fn against(&self, source: &Source) -> Vec<String> {
        let mut wrong = BTreeSet::new();
        for (from, tos) in &source.edges {
            for to in tos {
                if !self.allows(from, to) {
                    wrong.insert(format!("{} -> {}", from.join("::"), to.join("::")));
                }
            }
        }
        wrong.into_iter().collect()
    }

    /// The `http` resource a module belongs to (`None`: not in `http`, or a shared module).
    fn resource<'m>(&self, module: &'m Module) -> Option<&'m str> {
        match module.as_slice() {
            [http, resource, ..] if http == "http" && !self.shared_http.contains(resource) => {
                Some(resource)
            }
            _ => None,
        }
    }

    /// Where one `http` resource uses another, as `from -> to`.
    fn sideways(&self, source: &Source) -> Vec<String> {
        let mut wrong = BTreeSet::new();
        for (from, tos) in source.uses.iter().chain(&source.edges) {
            for to in tos {
                if let (Some(a), Some(b)) = (self.resource(from), self.resource(to))
                    && a != b
                {
                    wrong.insert(format!("{} -> {}", from.join("::"), to.join("::")));
                }
            }
        }
        wrong.into_iter().collect()
    }

    fn allows(&self, from: &Module, to: &Module) -> bool {
        let (Some(a), Some(b)) = (from.first(), to.first()) else {
            return true; // lib.rs itself, or a path to the crate root
        };
        match (self.layers.get(a), self.layers.get(b)) {
            (Some(la), Some(lb)) => lb <= la && !self.never.contains(&(a.clone(), b.clone())),
            _ => a == "main",
        }
    }
}

struct Source {
    /// The modules each file's code names (itself left out): `crate::broker::X` is an edge to
    /// `broker`, though `broker` re-exports `X` from elsewhere. The layer table reads these.
    edges: BTreeMap<Module, BTreeSet<Module>>,
    /// The files that define what each file's code names (itself left out): `crate::broker::X`
    /// is an edge to the file that defines `X`, and the `use` line that brings `X` into
    /// `broker` is an edge from `broker` to it. The circle check reads these.
    uses: BTreeMap<Module, BTreeSet<Module>>,
}

impl Source {
    fn read() -> Source {
        Source::of(&Source::files())
    }

    /// What each file of `src/` names.
    fn files() -> BTreeMap<Module, Vec<Named>> {
        let root = src();
        rust_files(&root)
            .into_iter()
            .map(|path| {
                let text = strip(&std::fs::read_to_string(&path).unwrap());
                let mut named = Vec::new();
                paths(&text, &mut |n| named.push(n));
                (module_of(&root, &path), named)
            })
            .collect()
    }

    fn of(files: &BTreeMap<Module, Vec<Named>>) -> Source {
        // The names each file's `use` items bring in, as absolute paths: `super::X` in a child,
        // or `crate::m::X` where `m` re-exports `X`, is followed to where `X` is defined.
        let exports: BTreeMap<&Module, BTreeMap<&str, Module>> = files
            .iter()
            .map(|(module, named)| {
                let names = named
                    .iter()
                    .filter(|n| n.inside.is_empty())
                    .filter_map(|n| Some((n.exported_as.as_deref()?, n.resolve(module))))
                    .collect();
                (module, names)
            })
            .collect();
        // The file a path lands in: its longest prefix that is a file's module, followed
        // through that file's imports to where the item is defined.
        let land = |mut absolute: Module, follow: bool| -> Option<Module> {
            for _ in 0..8 {
                let file = (1..=absolute.len())
                    .rev()
                    .map(|n| absolute[..n].to_vec())
                    .find(|m| files.contains_key(m))?;
                let reexport = absolute
                    .get(file.len())
                    .and_then(|name| exports.get(&file)?.get(name.as_str()));
                match reexport {
                    Some(target) if follow && !target.starts_with(&absolute) => {
                        let rest = absolute[file.len() + 1..].to_vec();
                        absolute = target.clone();
                        absolute.extend(rest);
                    }
                    _ => return Some(file),
                }
            }
            None
        };
        let targets = |module: &Module, named: &[Named], follow: bool| -> BTreeSet<Module> {
            named
                .iter()
                .filter_map(|n| land(n.resolve(module), follow))
                .filter(|target| target != module)
                .collect()
        };
        Source {
            edges: files
                .iter()
                .map(|(module, named)| (module.clone(), targets(module, named, false)))
                .collect(),
            uses: files
                .iter()
                .map(|(module, named)| (module.clone(), targets(module, named, true)))
                .collect(),
        }
    }
}

fn src() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

fn rust_files(dir: &Path) -> Vec<PathBuf> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            found.extend(rust_files(&path));
        } else if path.extension().is_some_and(|e| e == "rs") {
            found.push(path);
        }
    }
    found
}

/// `src/job/mod.rs` → `job`, `src/job/envelope.rs` → `job::envelope`, `src/lib.rs` → root.
fn module_of(root: &Path, file: &Path) -> Module {
    let relative = file.strip_prefix(root).unwrap().with_extension("");
    let mut module: Module = relative
        .components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect();
    if matches!(module.last().map(String::as_str), Some("mod" | "lib")) {
        module.pop();
    }
    module
}

/// A path as written in `module`'s file (`crate::a`, `super::b`, `self::c`), from the root.
fn resolve(module: &Module, path: &[String]) -> Module {
    let mut base: Module = Vec::new();
    let mut rest = path;
    match path.first().map(String::as_str) {
        Some("crate") => rest = &path[1..],
        Some("self") => {
            base = module.clone();
            rest = &path[1..];
        }
        _ => {
            base = module.clone();
            while rest.first().is_some_and(|s| s == "super") {
                base.pop();
                rest = &rest[1..];
            }
        }
    }
    base.extend(rest.iter().cloned());
    base
}

/// `text` with comments, string and character literals, and `#[cfg(test)]` items removed.
fn strip(text: &str) -> String {
    let chars: Vec<char> = text.chars().collect();
    let mut out = String::with_capacity(text.len());
    let mut i = 0;
    let at = |i: usize, s: &str| {
        s.chars()
            .enumerate()
            .all(|(k, c)| chars.get(i + k) == Some(&c))
    };
    while i < chars.len() {
        if at(i, "//") {
            while i < chars.len() && chars[i] != '\n' {
                i += 1;
            }
        } else if at(i, "/*") {
            let mut depth = 0;
            while i < chars.len() {
                if at(i, "/*") {
                    depth += 1;
                    i += 2;
                } else if at(i, "*/") {
                    depth -= 1;
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    i += 1;
                }
            }
        } else if chars[i] == 'r'
            && (at(i + 1, "\"") || at(i + 1, "#"))
            && !chars
                .get(i.wrapping_sub(1))
                .is_some_and(|c| c.is_alphanumeric() || *c == '_')
        {
            let hashes = chars[i + 1..].iter().take_while(|c| **c == '#').count();
            if chars.get(i + 1 + hashes) != Some(&'"') {
                out.push(chars[i]);
                i += 1;
                continue;
            }
            let close: String = std::iter::once('"')
                .chain(std::iter::repeat_n('#', hashes))
                .collect();
            i += 2 + hashes;
            while i < chars.len() && !at(i, &close) {
                i += 1;
            }
            i += close.len();
            out.push_str("\"\"");
        } else if chars[i] == '"' {
            i += 1;
            while i < chars.len() && chars[i] != '"' {
                i += if chars[i] == '\\' { 2 } else { 1 };
            }
            i += 1;
            out.push_str("\"\"");
        } else if chars[i] == '\'' && (at(i + 1, "\\") || chars.get(i + 2) == Some(&'\'')) {
            // A character literal (a lifetime has no closing quote).
            i += 1;
            while i < chars.len() && chars[i] != '\'' {
                i += if chars[i] == '\\' { 2 } else { 1 };
            }
            i += 1;
            out.push_str("' '");
        } else {
            out.push(chars[i]);
            i += 1;
        }
    }
    drop_test_modules(&out)
}

/// `text` without the items that follow `#[cfg(test)]` (up to their closing brace or `;`).
fn drop_test_modules(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(start) = rest.find("#[cfg(test)]") {
        out.push_str(&rest[..start]);
        let item = &rest[start..];
        let end = match (item.find('{'), item.find(';')) {
            (Some(open), semi) if semi.is_none_or(|s| open < s) => {
                let mut depth = 0;
                item[open..]
                    .char_indices()
                    .find_map(|(k, c)| {
                        depth += match c {
                            '{' => 1,
                            '}' => -1,
                            _ => 0,
                        };
                        (depth == 0).then_some(open + k + 1)
                    })
                    .unwrap_or(item.len())
            }
            (_, Some(semi)) => semi + 1,
            _ => item.len(),
        };
        rest = &item[end..];
    }
    out.push_str(rest);
    out
}

/// A path a file's code names, and the name a `use` makes it known by in the file (which its
/// child modules may reach through `super::`, and other modules through a `pub use`).
#[derive(Clone)]
struct Named {
    path: Vec<String>,
    exported_as: Option<String>,
    /// The inline modules (`mod imp { … }`) the path is written in, outermost first.
    inside: Vec<String>,
}

/// Calls `found` with every module path in `text`: each leaf of each `use` tree, and each
/// `crate::`, `super::` or `self::` path elsewhere, and each path that starts with one of the
/// file's own child modules (`mod x;` then `x::y`, read as `self::x::y`).
fn paths(text: &str, found: &mut dyn FnMut(Named)) {
    let tokens = tokenize(text);
    let children: BTreeSet<&str> = tokens
        .windows(3)
        .filter(|w| w[0] == "mod" && is_ident(&w[1]) && w[2] == ";")
        .map(|w| w[1].as_str())
        .collect();
    // Inline modules open at the brace depth recorded beside their name.
    let mut inline: Vec<(String, usize)> = Vec::new();
    let mut depth = 0;
    let mut i = 0;
    while i < tokens.len() {
        let inside: Vec<String> = inline.iter().map(|(name, _)| name.clone()).collect();
        if tokens[i] == "mod"
            && tokens.get(i + 1).is_some_and(|t| is_ident(t))
            && tokens.get(i + 2).is_some_and(|t| t == "{")
        {
            inline.push((tokens[i + 1].clone(), depth));
            depth += 1;
            i += 3;
        } else if tokens[i] == "in" && i >= 2 && tokens[i - 1] == "(" && tokens[i - 2] == "pub" {
            // `pub(in crate::a)` names where an item is visible, not what it uses.
            while i < tokens.len() && tokens[i] != ")" {
                i += 1;
            }
        } else if tokens[i] == "{" {
            depth += 1;
            i += 1;
        } else if tokens[i] == "}" {
            depth -= 1;
            if inline.last().is_some_and(|(_, open)| *open == depth) {
                inline.pop();
            }
            i += 1;
        } else if tokens[i] == "use" {
            let end = tokens[i..]
                .iter()
                .position(|t| t == ";")
                .map_or(tokens.len(), |p| i + p);
            let tree = UseTree {
                children: &children,
                inside: &inside,
            };
            tree.expand(&tokens[i + 1..end], &mut Vec::new(), found);
            i = end;
        } else if (matches!(tokens[i].as_str(), "crate" | "super" | "self")
            || children.contains(tokens[i].as_str()))
            && tokens.get(i + 1).is_some_and(|t| t == "::")
            && (i == 0 || tokens[i - 1] != "::")
        {
            let mut path = rooted(&tokens[i], &children);
            i += 1;
            while tokens.get(i).is_some_and(|t| t == "::")
                && tokens.get(i + 1).is_some_and(|t| is_ident(t))
            {
                path.push(tokens[i + 1].clone());
                i += 2;
            }
            found(Named {
                path,
                exported_as: None,
                inside,
            });
        } else {
            i += 1;
        }
    }
}

/// The first segment of a path: `crate`, `super` or `self` as written, a child module as
/// `self::child`.
fn rooted(first: &str, children: &BTreeSet<&str>) -> Vec<String> {
    if children.contains(first) {
        vec!["self".to_owned(), first.to_owned()]
    } else {
        vec![first.to_owned()]
    }
}

impl Named {
    /// The path from the crate root, for a path written in `file`'s code.
    fn resolve(&self, file: &Module) -> Module {
        let mut module = file.clone();
        module.extend(self.inside.iter().cloned());
        resolve(&module, &self.path)
    }
}

/// How one `use` item is read: which bare names are the file's child modules.
struct UseTree<'a> {
    children: &'a BTreeSet<&'a str>,
    inside: &'a [String],
}

impl UseTree<'_> {
    /// Expands one `use` tree (`crate::a::{b, c::{d, e as f}}`), reporting its leaves.
    fn expand(&self, tokens: &[String], prefix: &mut Vec<String>, found: &mut dyn FnMut(Named)) {
        let depth = prefix.len();
        let mut alias = None;
        let mut i = 0;
        while i < tokens.len() {
            let token = tokens[i].as_str();
            match token {
                "::" => i += 1,
                "{" => {
                    // The group runs to the matching brace; its items are split at top-level
                    // commas.
                    let mut level = 0;
                    let mut start = i + 1;
                    for k in i..tokens.len() {
                        match tokens[k].as_str() {
                            "{" => level += 1,
                            "}" => level -= 1,
                            "," if level == 1 => {
                                self.expand(&tokens[start..k], prefix, found);
                                start = k + 1;
                            }
                            _ => {}
                        }
                        if level == 0 {
                            self.expand(&tokens[start..k], prefix, found);
                            break;
                        }
                    }
                    prefix.truncate(depth);
                    return;
                }
                "as" => {
                    alias = tokens.get(i + 1).cloned();
                    break;
                }
                "*" => break,
                _ if is_ident(token) => {
                    if prefix.is_empty() {
                        prefix.extend(rooted(token, self.children));
                    } else {
                        prefix.push(token.to_owned());
                    }
                    i += 1;
                }
                _ => i += 1,
            }
        }
        let path = prefix.clone();
        prefix.truncate(depth);
        let local = path.first().map(String::as_str);
        if matches!(local, Some("crate" | "super" | "self")) && path.len() > 1 {
            // `self` inside a group names the group's own path.
            let path: Vec<String> = path
                .into_iter()
                .enumerate()
                .filter(|(k, s)| s != "self" || *k == 0)
                .map(|(_, s)| s)
                .collect();
            let exported_as = alias
                .or_else(|| path.last().cloned())
                .filter(|name| name != "_");
            found(Named {
                path,
                exported_as,
                inside: self.inside.to_vec(),
            });
        }
    }
}

fn tokenize(text: &str) -> Vec<String> {
    let mut tokens = Vec::new();
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        if c.is_alphanumeric() || c == '_' {
            let mut ident = String::from(c);
            while let Some(&n) = chars.peek().filter(|n| n.is_alphanumeric() || **n == '_') {
                ident.push(n);
                chars.next();
            }
            tokens.push(ident);
        } else if c == ':' && chars.peek() == Some(&':') {
            chars.next();
            tokens.push("::".to_owned());
        } else if !c.is_whitespace() {
            tokens.push(c.to_string());
        }
    }
    tokens
}

fn is_ident(token: &str) -> bool {
    token
        .chars()
        .next()
        .is_some_and(|c| c.is_alphabetic() || c == '_')
}

/// Tarjan's strongly connected components.
fn strongly_connected<'a>(graph: &BTreeMap<&'a Module, Vec<&'a Module>>) -> Vec<Vec<&'a Module>> {
    struct State<'a> {
        index: BTreeMap<&'a Module, usize>,
        low: BTreeMap<&'a Module, usize>,
        stack: Vec<&'a Module>,
        on_stack: BTreeSet<&'a Module>,
        components: Vec<Vec<&'a Module>>,
    }
    fn visit<'a>(v: &'a Module, graph: &BTreeMap<&'a Module, Vec<&'a Module>>, s: &mut State<'a>) {
        let n = s.index.len();
        s.index.insert(v, n);
        s.low.insert(v, n);
        s.stack.push(v);
        s.on_stack.insert(v);
        for &w in graph.get(v).into_iter().flatten() {
            if !s.index.contains_key(w) {
                visit(w, graph, s);
                let low = s.low[v].min(s.low[w]);
                s.low.insert(v, low);
            } else if s.on_stack.contains(w) {
                let low = s.low[v].min(s.index[w]);
                s.low.insert(v, low);
            }
        }
        if s.low[v] == s.index[v] {
            let mut component = Vec::new();
            while let Some(w) = s.stack.pop() {
                s.on_stack.remove(w);
                component.push(w);
                if w == v {
                    break;
                }
            }
            s.components.push(component);
        }
    }
    let mut state = State {
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on_stack: BTreeSet::new(),
        components: Vec::new(),
    };
    for &v in graph.keys() {
        if !state.index.contains_key(v) {
            visit(v, graph, &mut state);
        }
    }
    state.components
}
