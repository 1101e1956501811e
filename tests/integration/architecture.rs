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
    let mut wrong = BTreeSet::new();
    for (from, tos) in &source.edges {
        for to in tos {
            if !table.allows(from, to) {
                wrong.insert(format!("{} -> {}", from.join("::"), to.join("::")));
            }
        }
    }
    assert!(
        wrong.is_empty(),
        "imports against the layer table of lib.rs:\n{}",
        Vec::from_iter(wrong).join("\n")
    );
}

#[test]
fn no_two_files_depend_on_each_other() {
    let source = Source::read();
    // A module and the modules inside it may use each other (a `mod.rs` re-exports its
    // children, children use their parent's types): that is how a Rust module is built.
    let nested = |a: &Module, b: &Module| a.starts_with(b) || b.starts_with(a);
    let graph: BTreeMap<&Module, Vec<&Module>> = source
        .edges
        .iter()
        .map(|(from, tos)| (from, tos.iter().filter(|to| !nested(from, to)).collect()))
        .collect();
    let circles: Vec<String> = strongly_connected(&graph)
        .into_iter()
        .filter(|component| component.len() > 1)
        .map(|component| {
            let names: Vec<String> = component.iter().map(|m| m.join("::")).collect();
            names.join(" <-> ")
        })
        .collect();
    assert!(
        circles.is_empty(),
        "import circles:\n{}",
        circles.join("\n")
    );
}

#[test]
fn the_reader_finds_paths_in_code_only() {
    let text = strip(concat!(
        "use crate::{a::{b, c::D}, e as f};\n",
        "// crate::x\n/* crate::y */\n",
        "let s = \"crate::y \\\" crate::y\"; let r = r#\"crate::z\"#;\n",
        "let c = '\"'; fn f<'a>(x: &'a str) { crate::g::h(); }\n",
        "#[cfg(test)]\nmod tests { use crate::t; }\n",
    ));
    let mut found = BTreeSet::new();
    paths(&text, &mut |path| {
        found.insert(path.join("::"));
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
}

impl LayerTable {
    fn of_lib_rs() -> LayerTable {
        let lib = std::fs::read_to_string(src().join("lib.rs")).unwrap();
        let mut table = LayerTable {
            layers: BTreeMap::new(),
            never: BTreeSet::new(),
        };
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
        table
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
    /// The modules each file's code names (itself left out).
    edges: BTreeMap<Module, BTreeSet<Module>>,
}

impl Source {
    fn read() -> Source {
        let root = src();
        let files: BTreeMap<Module, String> = rust_files(&root)
            .into_iter()
            .map(|path| {
                let text = std::fs::read_to_string(&path).unwrap();
                (module_of(&root, &path), strip(&text))
            })
            .collect();
        let mut edges = BTreeMap::new();
        for (module, text) in &files {
            let mut targets = BTreeSet::new();
            paths(text, &mut |path| {
                let absolute = resolve(module, &path);
                // The file a path lands in: its longest prefix that is a file's module.
                let target = (1..=absolute.len())
                    .rev()
                    .map(|n| absolute[..n].to_vec())
                    .find(|m| files.contains_key(m));
                if let Some(target) = target
                    && &target != module
                {
                    targets.insert(target);
                }
            });
            edges.insert(module.clone(), targets);
        }
        Source { edges }
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

/// Calls `found` with every module path in `text`: each leaf of each `use` tree, and each
/// `crate::`, `super::` or `self::` path elsewhere.
fn paths(text: &str, found: &mut dyn FnMut(Vec<String>)) {
    let tokens = tokenize(text);
    let mut i = 0;
    while i < tokens.len() {
        if tokens[i] == "use" {
            let end = tokens[i..]
                .iter()
                .position(|t| t == ";")
                .map_or(tokens.len(), |p| i + p);
            use_tree(&tokens[i + 1..end], &mut Vec::new(), found);
            i = end;
        } else if matches!(tokens[i].as_str(), "crate" | "super" | "self")
            && tokens.get(i + 1).is_some_and(|t| t == "::")
            && (i == 0 || tokens[i - 1] != "::")
        {
            let mut path = vec![tokens[i].clone()];
            i += 1;
            while tokens.get(i).is_some_and(|t| t == "::")
                && tokens.get(i + 1).is_some_and(|t| is_ident(t))
            {
                path.push(tokens[i + 1].clone());
                i += 2;
            }
            found(path);
        } else {
            i += 1;
        }
    }
}

/// Expands one `use` tree (`crate::a::{b, c::{d, e as f}}`), reporting its leaves.
fn use_tree(tokens: &[String], prefix: &mut Vec<String>, found: &mut dyn FnMut(Vec<String>)) {
    let depth = prefix.len();
    let mut i = 0;
    while i < tokens.len() {
        let token = tokens[i].as_str();
        match token {
            "::" => i += 1,
            "{" => {
                // The group runs to the matching brace; its items are split at top-level commas.
                let mut level = 0;
                let mut start = i + 1;
                for k in i..tokens.len() {
                    match tokens[k].as_str() {
                        "{" => level += 1,
                        "}" => level -= 1,
                        "," if level == 1 => {
                            use_tree(&tokens[start..k], prefix, found);
                            start = k + 1;
                        }
                        _ => {}
                    }
                    if level == 0 {
                        use_tree(&tokens[start..k], prefix, found);
                        break;
                    }
                }
                prefix.truncate(depth);
                return;
            }
            "as" => break,
            "*" => break,
            _ if is_ident(token) => {
                prefix.push(token.to_owned());
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
        let path = path
            .into_iter()
            .filter(|s| s != "self" || depth == 0)
            .collect();
        found(path);
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
