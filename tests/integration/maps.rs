//! The maps a reader relies on stay true: every place that sends a notification is in the
//! list of `migrations/README.md`, its inventory names the migration whose body of each
//! function is the live one, the book's architecture page lists every module of `src/`, and
//! every link between the docs leads somewhere.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use crate::support::TestDb;

/// (channel, sender) pairs: a Rust sender as `store::module::function`, an SQL one as its
/// function's name.
type Senders = BTreeSet<(String, String)>;

#[tokio::test]
async fn every_notification_sender_is_listed_in_the_migrations_readme() {
    let db = TestDb::new().await;
    let mut found = rust_senders();
    let sql: Vec<(String, String)> = sqlx::query_as(
        "select m[1], p.proname::text
           from pg_proc p
          cross join lateral regexp_matches(p.prosrc, 'pg_notify\\(''(\\w+)''', 'g') m
          where p.pronamespace = 'public'::regnamespace",
    )
    .fetch_all(&db.pool)
    .await
    .unwrap();
    found.extend(sql);
    let listed = listed_senders();
    assert!(
        found.len() > 10,
        "the search found too few senders: {found:?}"
    );
    let missing: Vec<_> = found.difference(&listed).collect();
    let stale: Vec<_> = listed.difference(&found).collect();
    assert!(
        missing.is_empty() && stale.is_empty(),
        "migrations/README.md, \"Every sender\": missing {missing:?}; no longer sending {stale:?}"
    );
}

#[test]
fn the_architecture_page_lists_every_file_of_src() {
    let page = std::fs::read_to_string(root().join("docs/src/architecture/index.md")).unwrap();
    let listed: BTreeSet<String> = page
        .lines()
        .filter_map(|row| {
            let cells: Vec<&str> = row.split('|').map(str::trim).collect();
            let file = cells.get(2)?.strip_prefix('`')?.strip_suffix('`')?;
            file.ends_with(".rs").then(|| file.to_owned())
        })
        .collect();
    let src = root().join("src");
    let files: BTreeSet<String> = rust_files(&src)
        .iter()
        .map(|f| f.strip_prefix(&src).unwrap().to_string_lossy().into_owned())
        .collect();
    let missing: Vec<_> = files.difference(&listed).collect();
    let gone: Vec<_> = listed.difference(&files).collect();
    assert!(
        missing.is_empty() && gone.is_empty(),
        "docs/src/architecture/index.md, \"Modules\": missing {missing:?}; no longer in src/ {gone:?}"
    );
}

#[test]
fn the_inventory_names_the_migration_that_last_defines_each_function() {
    let defined = last_definitions();
    let readme = std::fs::read_to_string(root().join("migrations/README.md")).unwrap();
    let mut checked = 0;
    let mut wrong = Vec::new();
    for section in ["### PL/pgSQL functions", "### SQL functions"] {
        let (_, rest) = readme.split_once(section).expect("the inventory section");
        for row in rest
            .lines()
            .skip_while(|l| !l.starts_with('|'))
            .take_while(|l| l.starts_with('|'))
            .skip(2)
        {
            let cells: Vec<&str> = row.split('|').map(str::trim).collect();
            let given = cells[2]
                .split(|c: char| !c.is_ascii_alphanumeric())
                .find(|w| w.starts_with('V'))
                .unwrap_or_default();
            for (name, arity) in named_functions(cells[1]) {
                let last = defined
                    .get(&(name.clone(), arity))
                    .or_else(|| defined.get(&(name.clone(), None)));
                checked += 1;
                if last.map(String::as_str) != Some(given) {
                    wrong.push(format!("{name}: says {given}, last defined in {last:?}"));
                }
            }
        }
    }
    assert!(checked > 50, "read too few inventory rows: {checked}");
    assert!(
        wrong.is_empty(),
        "migrations/README.md inventory:\n{}",
        wrong.join("\n")
    );
}

#[test]
fn every_link_of_the_docs_leads_somewhere() {
    let book = root().join("docs/src");
    let summary = std::fs::read_to_string(book.join("SUMMARY.md")).unwrap();
    let mut pages: Vec<PathBuf> = markdown_files(&book);
    pages.extend([
        root().join("README.md"),
        root().join("migrations/README.md"),
    ]);
    let mut broken = Vec::new();
    for page in &pages {
        let text = std::fs::read_to_string(page).unwrap();
        for target in links(&text) {
            if target.contains("://") || target.starts_with("mailto:") {
                continue;
            }
            let (path, anchor) = target.split_once('#').unwrap_or((&target, ""));
            let file = if path.is_empty() {
                page.clone()
            } else {
                page.parent().unwrap().join(path)
            };
            let found = file.exists()
                && (anchor.is_empty()
                    || file.extension().is_none_or(|e| e != "md")
                    || anchors(&std::fs::read_to_string(&file).unwrap()).contains(anchor));
            if !found {
                let page = page.strip_prefix(root()).unwrap().display();
                broken.push(format!("{page}: {target}"));
            }
        }
    }
    for page in markdown_files(&book) {
        let name = page
            .strip_prefix(&book)
            .unwrap()
            .to_string_lossy()
            .into_owned();
        if name != "SUMMARY.md" && !summary.contains(&format!("({name})")) {
            broken.push(format!("docs/src/{name} is not in SUMMARY.md"));
        }
    }
    assert!(broken.is_empty(), "broken links:\n{}", broken.join("\n"));
}

#[test]
fn every_source_path_the_docs_name_exists() {
    let mut pages = markdown_files(&root().join("docs/src"));
    pages.extend([
        root().join("README.md"),
        root().join("migrations/README.md"),
    ]);
    let mut missing = Vec::new();
    for page in &pages {
        let text = std::fs::read_to_string(page).unwrap();
        for code in text.split('`').skip(1).step_by(2) {
            let named = code.starts_with("src/")
                && (code.ends_with(".rs") || code.ends_with('/'))
                && !code.contains(['*', ' ', '{']);
            if named && !root().join(code).exists() {
                let page = page.strip_prefix(root()).unwrap().display();
                missing.push(format!("{page}: {code}"));
            }
        }
    }
    assert!(
        missing.is_empty(),
        "the docs name files that do not exist:\n{}",
        missing.join("\n")
    );
}

/// The targets of the inline links of a markdown text, outside code.
fn links(text: &str) -> Vec<String> {
    let mut found = Vec::new();
    let mut fenced = false;
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
        }
        if fenced {
            continue;
        }
        // Inline code spans are not links.
        let prose: String = line
            .split('`')
            .enumerate()
            .filter(|(i, _)| i % 2 == 0)
            .map(|(_, part)| part)
            .collect::<Vec<_>>()
            .join(" ");
        let mut rest = prose.as_str();
        while let Some(at) = rest.find("](") {
            let after = &rest[at + 2..];
            let end = after.find(')').unwrap_or(after.len());
            let target = after[..end].split_whitespace().next().unwrap_or_default();
            if !target.is_empty() {
                found.push(target.to_owned());
            }
            rest = &after[end..];
        }
    }
    found
}

/// The anchors of a markdown text's headings, as mdBook and GitHub make them.
fn anchors(text: &str) -> BTreeSet<String> {
    let mut fenced = false;
    let mut found = BTreeSet::new();
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
        }
        if fenced || !line.starts_with('#') {
            continue;
        }
        let heading = line.trim_start_matches('#').trim();
        let slug: String = heading
            .to_lowercase()
            .chars()
            .filter_map(|c| match c {
                ' ' => Some('-'),
                c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c),
                _ => None,
            })
            .collect();
        found.insert(slug);
    }
    found
}

fn markdown_files(dir: &Path) -> Vec<PathBuf> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            found.extend(markdown_files(&path));
        } else if path.extension().is_some_and(|e| e == "md") {
            found.push(path);
        }
    }
    found
}

/// The functions a cell of the inventory names (`ojs_x(a, b)`, or `ojs_x` without arguments),
/// with the number of arguments when it gives them.
fn named_functions(cell: &str) -> Vec<(String, Option<usize>)> {
    cell.split('`')
        .skip(1)
        .step_by(2)
        .filter(|code| code.starts_with("ojs_"))
        .map(|code| match code.split_once('(') {
            Some((name, args)) => {
                let args = args.trim_end_matches(')');
                let arity = match args.trim() {
                    "..." => None,
                    "" => Some(0),
                    args => Some(args.split(',').count()),
                };
                (name.to_owned(), arity)
            }
            None => (code.to_owned(), None),
        })
        .collect()
}

/// For each function, by name and number of arguments (and by name alone), the migration that
/// creates or replaces it last.
fn last_definitions() -> std::collections::BTreeMap<(String, Option<usize>), String> {
    let mut migrations: Vec<(u32, PathBuf)> = std::fs::read_dir(root().join("migrations"))
        .unwrap()
        .filter_map(|e| {
            let path = e.unwrap().path();
            let name = path.file_name()?.to_str()?.to_owned();
            let number = name.strip_prefix('V')?.split("__").next()?.parse().ok()?;
            Some((number, path))
        })
        .collect();
    migrations.sort();
    let mut last = std::collections::BTreeMap::new();
    for (number, path) in migrations {
        let text = std::fs::read_to_string(&path).unwrap().to_lowercase();
        let mut rest = text.as_str();
        while let Some(at) = rest.find("function ") {
            let before = rest[..at].trim_end();
            rest = &rest[at + "function ".len()..];
            if !(before.ends_with("create") || before.ends_with("replace")) {
                continue;
            }
            let name: String = rest
                .trim_start_matches("public.")
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_')
                .collect();
            let Some(open) = rest.find('(') else { continue };
            let mut depth = 0;
            let mut commas = 0;
            let mut empty = true;
            for c in rest[open..].chars() {
                match c {
                    '(' => depth += 1,
                    ')' => {
                        depth -= 1;
                        if depth == 0 {
                            break;
                        }
                    }
                    ',' if depth == 1 => commas += 1,
                    c if depth >= 1 && !c.is_whitespace() && c != '(' => empty = false,
                    _ => {}
                }
            }
            let arity = if empty { 0 } else { commas + 1 };
            let version = format!("V{number}");
            last.insert((name.clone(), Some(arity)), version.clone());
            last.insert((name, None), version);
        }
    }
    last
}

/// The rows of the table under `#### Every sender`.
fn listed_senders() -> Senders {
    let readme = std::fs::read_to_string(root().join("migrations/README.md")).unwrap();
    let (_, table) = readme
        .split_once("#### Every sender")
        .expect("the migrations README lists every sender");
    table
        .lines()
        .skip_while(|l| !l.starts_with('|'))
        .take_while(|l| l.starts_with('|'))
        .filter_map(|row| {
            let cells: Vec<&str> = row.split('|').map(|c| c.trim().trim_matches('`')).collect();
            match cells.as_slice() {
                ["", channel, sender, ""] if channel.starts_with("ojs_") => {
                    Some(((*channel).to_owned(), (*sender).to_owned()))
                }
                _ => None,
            }
        })
        .collect()
}

/// Each `pg_notify('channel'` in `src/`, with the module and function it is written in.
fn rust_senders() -> Senders {
    let mut found = Senders::new();
    for file in rust_files(&root().join("src")) {
        let text = std::fs::read_to_string(&file).unwrap();
        let module = module_of(&file);
        let mut function = None;
        for line in text.lines() {
            if let Some(name) = function_name(line) {
                function = Some(name);
            }
            for (at, _) in line.match_indices("pg_notify('") {
                let channel: String = line[at + "pg_notify('".len()..]
                    .chars()
                    .take_while(|c| c.is_alphanumeric() || *c == '_')
                    .collect();
                let function = function.expect("pg_notify outside a function");
                found.insert((channel, format!("{module}::{function}")));
            }
        }
    }
    found
}

/// The name of the function a line starts (`pub async fn name(` and the like).
fn function_name(line: &str) -> Option<&str> {
    let (_, rest) = line.split_once("fn ")?;
    let before = &line[..line.len() - rest.len() - 3];
    let words_before_ok = before
        .split_whitespace()
        .all(|w| matches!(w, "pub" | "async" | "const" | "unsafe") || w.starts_with("pub("));
    if !words_before_ok {
        return None;
    }
    let name = rest.split(['(', '<']).next()?;
    (!name.is_empty() && name.chars().all(|c| c.is_alphanumeric() || c == '_')).then_some(name)
}

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
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

/// `src/store/job/claim.rs` → `store::job::claim`; `src/store/mod.rs` → `store`.
fn module_of(file: &Path) -> String {
    let relative = file
        .strip_prefix(root().join("src"))
        .unwrap()
        .with_extension("");
    let parts: Vec<String> = relative
        .components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .filter(|part| part != "mod")
        .collect();
    parts.join("::")
}

#[test]
fn function_names_are_read_from_their_first_line() {
    assert_eq!(
        function_name("pub async fn give_back(db: &PgPool"),
        Some("give_back")
    );
    assert_eq!(function_name("    fn resign<'a>(x"), Some("resign"));
    assert_eq!(function_name("pub(crate) fn notify(x"), Some("notify"));
    assert_eq!(function_name("let f = |x| fn_pointer(x);"), None);
    assert_eq!(function_name("// a fn in a comment"), None);
}
