//! The maps a reader relies on stay true: every place that sends a notification is in the
//! list of `migrations/README.md`.

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
