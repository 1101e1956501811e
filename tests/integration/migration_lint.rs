//! Migrations after the last release only expand the schema (`migrations/README.md`, "Rolling
//! upgrades"): while a rolling update runs, replicas of the last release serve on the database
//! the new release migrated. So a migration newer than the one the last release shipped
//! (`migrations/RELEASED`) may not:
//!
//! - drop or rename anything (a table, view, column, function, type, index, trigger...);
//! - change a column's type, make it `not null`, drop its default;
//! - add a `not null` column without a default (the last release's inserts do not name it);
//! - add a constraint or a unique index to a table it did not create (the last release's
//!   writes may break it);
//! - add a value to an enum type (the last release cannot decode a row carrying it);
//! - create a function under a name an earlier migration used with other arguments (an overload
//!   beside the old one makes the old release's calls ambiguous; a changed result needs a drop):
//!   a changed function gets a new name or a version suffix.
//!
//! Nor may any migration or any query of the server build a row of a table's type from a list of
//! values (`row(a, b, ...)::ojs_job`): it names every column of the table, so it fails as soon as
//! a column is added. A whole row (`row(j.*)::ojs_job`, or the row variable itself) follows the
//! table.
//!
//! A removal comes a release later, once no release that could still run uses what it removes:
//! the statement is then preceded by `-- lint: contract since vX.Y.Z (why)`, naming the release
//! from which nothing uses it (which must be released already). Any other exception says
//! `-- lint: allow <rule> (why)`.
//!
//! `tests/integration/upgrade.rs` checks the other side: this release keeps serving after such a
//! migration.

use std::collections::BTreeMap;
use std::path::Path;

/// The last release and the newest migration it shipped (`migrations/RELEASED`).
struct Released {
    release: (u32, u32, u32),
    migration: u32,
}

fn released() -> Released {
    let text =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("migrations/RELEASED"))
            .expect("migrations/RELEASED");
    let mut release = None;
    let mut migration = None;
    for line in text
        .lines()
        .map(str::trim)
        .filter(|l| !l.starts_with('#') && !l.is_empty())
    {
        let (key, value) = line.split_once('=').expect("key = value");
        let value = value.trim().trim_matches('"');
        match key.trim() {
            "release" => release = Some(parse_release(value).expect("release = \"vX.Y.Z\"")),
            "migration" => migration = Some(value.parse().expect("migration = <version>")),
            other => panic!("unknown key {other} in migrations/RELEASED"),
        }
    }
    Released {
        release: release.expect("release ="),
        migration: migration.expect("migration ="),
    }
}

fn parse_release(text: &str) -> Option<(u32, u32, u32)> {
    let mut parts = text.strip_prefix('v')?.split('.').map(|p| p.parse().ok());
    let release = (parts.next()??, parts.next()??, parts.next()??);
    parts.next().is_none().then_some(release)
}

/// `(version, file name, SQL)` of every migration, by version.
fn migrations() -> Vec<(u32, String, String)> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("migrations");
    let mut all: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .filter_map(|e| {
            let name = e.unwrap().file_name().into_string().unwrap();
            let version = name.strip_prefix('V')?.split_once("__")?.0.parse().ok()?;
            let sql = std::fs::read_to_string(dir.join(&name)).unwrap();
            Some((version, name, sql))
        })
        .collect();
    all.sort();
    all
}

/// One statement of a migration: its text without comments and quoted bodies (what the DDL
/// rules read), its whole text (what the row rule reads, function bodies included), and the
/// `lint:` markers of its comments.
#[derive(Debug)]
struct Statement {
    code: String,
    whole: String,
    markers: Vec<String>,
}

/// Splits SQL into statements at `;` outside comments, quotes and dollar-quoted bodies.
fn statements(sql: &str) -> Vec<Statement> {
    let mut out = Vec::new();
    let (mut code, mut whole, mut markers) = (String::new(), String::new(), Vec::new());
    let bytes = sql.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        let rest = &sql[i..];
        if rest.starts_with("--") {
            let end = rest.find('\n').unwrap_or(rest.len());
            let comment = &rest[2..end];
            if let Some(marker) = comment.trim().strip_prefix("lint:") {
                markers.push(marker.trim().to_owned());
            }
            code.push(' ');
            i += end;
        } else if rest.starts_with("/*") {
            let end = rest.find("*/").map_or(rest.len(), |e| e + 2);
            code.push(' ');
            i += end;
        } else if rest.starts_with('\'') {
            let mut j = 1;
            while j < rest.len() {
                if rest[j..].starts_with("''") {
                    j += 2;
                } else if rest[j..].starts_with('\'') {
                    j += 1;
                    break;
                } else {
                    j += rest[j..].chars().next().unwrap().len_utf8();
                }
            }
            code.push_str("''");
            whole.push_str(&rest[..j]);
            i += j;
        } else if let Some(tag) = dollar_tag(rest) {
            let body_end = rest[tag.len()..]
                .find(tag)
                .map_or(rest.len(), |e| tag.len() + e + tag.len());
            code.push_str("$$");
            whole.push_str(&rest[..body_end]);
            i += body_end;
        } else if rest.starts_with(';') {
            out.push(Statement {
                code: std::mem::take(&mut code).to_lowercase(),
                whole: std::mem::take(&mut whole).to_lowercase(),
                markers: std::mem::take(&mut markers),
            });
            i += 1;
        } else {
            let ch = rest.chars().next().unwrap();
            code.push(ch);
            whole.push(ch);
            i += ch.len_utf8();
        }
    }
    if !code.trim().is_empty() {
        out.push(Statement {
            code: code.to_lowercase(),
            whole: whole.to_lowercase(),
            markers,
        });
    }
    out
}

/// `$tag$` (or `$$`) opening a dollar-quoted string at the start of `text`.
fn dollar_tag(text: &str) -> Option<&str> {
    let rest = text.strip_prefix('$')?;
    let end = rest.find('$')?;
    let tag = &rest[..end];
    (tag.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
        && !tag.starts_with(|c: char| c.is_ascii_digit()))
    .then(|| &text[..end + 2])
}

/// The words of `code`, with punctuation as separate words.
fn words(code: &str) -> Vec<String> {
    let mut spaced = String::new();
    for ch in code.chars() {
        if ch.is_alphanumeric() || ch == '_' || ch == '.' || ch == '"' {
            spaced.push(ch);
        } else {
            spaced.push(' ');
            if !ch.is_whitespace() {
                spaced.push(ch);
                spaced.push(' ');
            }
        }
    }
    spaced.split_whitespace().map(str::to_owned).collect()
}

/// Every `row(values)::type` with a list of values rather than a whole row (`x.*`).
pub fn row_casts(text: &str) -> Vec<String> {
    let lower = text.to_lowercase();
    let mut found = Vec::new();
    let mut from = 0;
    while let Some(at) = lower[from..].find("row(").map(|a| a + from) {
        from = at + 4;
        if lower[..at]
            .chars()
            .next_back()
            .is_some_and(|c| c.is_alphanumeric() || c == '_')
        {
            continue;
        }
        let mut depth = 0;
        let mut end = None;
        for (k, ch) in lower[at + 3..].char_indices() {
            match ch {
                '(' => depth += 1,
                ')' => {
                    depth -= 1;
                    if depth == 0 {
                        end = Some(at + 3 + k);
                        break;
                    }
                }
                _ => {}
            }
        }
        let Some(end) = end else { continue };
        let inside = lower[at + 4..end].trim();
        let after = lower[end + 1..].trim_start();
        let whole_row = inside.ends_with(".*") && !inside.contains(',');
        if after.starts_with("::") && !whole_row {
            let cast: String = after[2..]
                .trim_start()
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_')
                .collect();
            found.push(format!("row({})::{cast}", abbreviate(inside)));
        }
    }
    found
}

fn abbreviate(text: &str) -> String {
    let flat = text.split_whitespace().collect::<Vec<_>>().join(" ");
    if flat.chars().count() > 40 {
        format!("{}...", flat.chars().take(40).collect::<String>())
    } else {
        flat
    }
}

/// A function's name and its argument list, normalised (lower case, single spaces, without
/// defaults), from `create [or replace] function name(args)`.
fn function_signature(code: &str) -> Option<(String, String)> {
    let w = words(code);
    let at = w.iter().position(|x| x == "function")?;
    if !w[..at]
        .iter()
        .all(|x| x == "create" || x == "or" || x == "replace")
    {
        return None;
    }
    let name = w.get(at + 1)?.trim_matches('"').to_owned();
    let mut depth = 0;
    let mut args = Vec::new();
    for word in &w[at + 2..] {
        match word.as_str() {
            "(" => {
                depth += 1;
                if depth == 1 {
                    continue;
                }
            }
            ")" => {
                depth -= 1;
                if depth == 0 {
                    break;
                }
            }
            _ => {}
        }
        args.push(word.clone());
    }
    // Defaults change no signature: cut each argument at `default` or `=`.
    let mut normalised = Vec::new();
    let mut skipping = false;
    let mut inner = 0;
    for word in args {
        match word.as_str() {
            "(" => inner += 1,
            ")" => inner -= 1,
            _ => {}
        }
        if word == "," && inner == 0 {
            skipping = false;
        }
        if word == "default" || word == "=" {
            skipping = true;
        }
        if !skipping {
            normalised.push(word);
        }
    }
    Some((name, normalised.join(" ")))
}

/// The tables `create table` statements of `sql` create.
fn created_tables(statements: &[Statement]) -> Vec<String> {
    statements
        .iter()
        .filter_map(|s| {
            let w = words(&s.code);
            let at = w
                .windows(2)
                .position(|p| p[0] == "create" && p[1] == "table")?;
            let mut name = w.get(at + 2)?;
            if name == "if" {
                name = w.get(at + 5)?;
            }
            Some(name.trim_matches('"').to_owned())
        })
        .collect()
}

/// The findings of migration `version` (`sql`), given the function signatures of every earlier
/// migration and the last release.
fn lint(
    sql: &str,
    earlier_functions: &BTreeMap<String, Vec<String>>,
    released: (u32, u32, u32),
) -> Vec<String> {
    let statements = statements(sql);
    let own_tables = created_tables(&statements);
    let mut findings = Vec::new();
    for s in &statements {
        let w = words(&s.code);
        let has = |seq: &[&str]| {
            w.windows(seq.len())
                .any(|p| p.iter().zip(seq).all(|(a, b)| a == b))
        };
        let allowed = |rule: &str| {
            s.markers
                .iter()
                .any(|m| m.starts_with(&format!("allow {rule}")))
        };
        let contract = s.markers.iter().find_map(|m| {
            let rest = m.strip_prefix("contract since ")?;
            parse_release(rest.split_whitespace().next()?)
        });
        let mut flag = |rule: &str, what: String| {
            if !allowed(rule) {
                findings.push(format!("{rule}: {what}"));
            }
        };
        let first = w.first().map(String::as_str).unwrap_or("");
        let summary = abbreviate(&s.code);
        // The table an `alter table` names, and whether this migration created it.
        let altered = if has(&["alter", "table"]) {
            let mut k = w.iter().position(|x| x == "table").unwrap() + 1;
            while matches!(w.get(k).map(String::as_str), Some("if" | "exists" | "only")) {
                k += 1;
            }
            w.get(k).map(|t| t.trim_matches('"').to_owned())
        } else {
            None
        };
        let own = altered.as_ref().is_some_and(|t| own_tables.contains(t));
        let removes = first == "drop"
            || (has(&["alter"])
                && has(&["drop"])
                && !has(&["drop", "default"])
                && !has(&["drop", "not", "null"]));
        if removes && !own {
            match contract {
                Some(since) if since <= released => {}
                Some(since) => flag(
                    "contract",
                    format!(
                        "{summary} (v{}.{}.{} is not released yet)",
                        since.0, since.1, since.2
                    ),
                ),
                None => flag("drop", summary.clone()),
            }
        }
        if has(&["rename"]) && !own {
            flag("rename", summary.clone());
        }
        if altered.is_some() && !own {
            if has(&["type"]) && has(&["alter", "column"])
                || w.windows(3)
                    .any(|p| p[0] == "alter" && p[2] == "type" && p[1] != "table")
            {
                flag("column-type", summary.clone());
            }
            if has(&["set", "not", "null"]) {
                flag("not-null", summary.clone());
            }
            if has(&["drop", "default"]) {
                flag("drop-default", summary.clone());
            }
            if has(&["add", "constraint"])
                || has(&["add", "primary", "key"])
                || has(&["add", "unique"])
                || has(&["add", "check"])
                || has(&["add", "foreign", "key"])
            {
                flag("constraint", summary.clone());
            }
            if has(&["add", "column"]) && has(&["not", "null"]) && !has(&["default"]) {
                flag("not-null-column", summary.clone());
            }
        }
        if has(&["alter", "type"]) && has(&["add", "value"]) {
            flag(
                "enum-value",
                format!("{summary} (the last release cannot read a row carrying it)"),
            );
        }
        if has(&["create", "unique", "index"]) {
            let on = w.iter().position(|x| x == "on").and_then(|k| {
                let mut k = k + 1;
                if w.get(k).map(String::as_str) == Some("only") {
                    k += 1;
                }
                w.get(k).map(|t| t.trim_matches('"').to_owned())
            });
            if !on.is_some_and(|t| own_tables.contains(&t)) {
                flag("unique-index", summary.clone());
            }
        }
        if let Some((name, args)) = function_signature(&s.code)
            && let Some(before) = earlier_functions.get(&name)
            && !before.contains(&args)
        {
            flag(
                "signature",
                format!(
                    "{name}({args}) beside {name}({}): give the new signature a new name",
                    before.join(") / (")
                ),
            );
        }
        for cast in row_casts(&s.whole) {
            flag("row-cast", cast);
        }
    }
    findings
}

#[test]
fn migrations_after_the_last_release_only_expand_the_schema() {
    let released = released();
    let all = migrations();
    assert!(
        all.iter().any(|(v, _, _)| *v == released.migration),
        "migrations/RELEASED names V{}, which exists",
        released.migration
    );
    let mut functions: BTreeMap<String, Vec<String>> = BTreeMap::new();
    let mut findings = Vec::new();
    for (version, name, sql) in &all {
        if *version > released.migration {
            for finding in lint(sql, &functions, released.release) {
                findings.push(format!("{name}: {finding}"));
            }
        }
        for s in statements(sql) {
            if let Some((f, args)) = function_signature(&s.code) {
                let known = functions.entry(f).or_default();
                if !known.contains(&args) {
                    known.push(args);
                }
            }
        }
    }
    assert!(
        findings.is_empty(),
        "steps a replica of the last release would break on (see this file's header):\n{}",
        findings.join("\n")
    );
}

#[test]
fn no_query_of_the_server_builds_a_table_row_from_a_list_of_values() {
    let mut findings = Vec::new();
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut stack = vec![root.join("src")];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                stack.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") {
                let text = std::fs::read_to_string(&path).unwrap();
                for cast in row_casts(&text) {
                    findings.push(format!(
                        "{}: {cast}",
                        path.strip_prefix(root).unwrap().display()
                    ));
                }
            }
        }
    }
    assert!(
        findings.is_empty(),
        "row casts from a list of values:\n{}",
        findings.join("\n")
    );
}

/// The lint finds what it must: each forbidden step, in a migration that would be next.
#[test]
fn the_lint_refuses_each_forbidden_step_and_passes_expansions() {
    let earlier: BTreeMap<String, Vec<String>> = [(
        "ojs_signal".to_owned(),
        vec!["job_id uuid , name text , payload jsonb , key text".to_owned()],
    )]
    .into();
    let released = (0, 1, 0);
    let check = |sql: &str| lint(sql, &earlier, released);
    let refused = [
        ("drop table ojs_job_step;", "drop"),
        ("alter table ojs_job drop column durable;", "drop"),
        ("drop function ojs_signal(uuid, text, jsonb, text);", "drop"),
        ("drop index if exists ojs_job_available_idx;", "drop"),
        (
            "alter table ojs_job rename column durable to kept;",
            "rename",
        ),
        ("alter table ojs_job rename to ojs_jobs;", "rename"),
        (
            "alter table ojs_job alter column priority type bigint;",
            "column-type",
        ),
        (
            "alter table ojs_job alter column pool set not null;",
            "not-null",
        ),
        (
            "alter table ojs_job alter column retry drop default;",
            "drop-default",
        ),
        (
            "alter table ojs_job add column owner text not null;",
            "not-null-column",
        ),
        (
            "alter table ojs_job add constraint p check (priority < 10);",
            "constraint",
        ),
        (
            "create unique index ojs_job_x on ojs_job (type);",
            "unique-index",
        ),
        ("alter type ojs_job_state add value 'paused';", "enum-value"),
        (
            "create or replace function ojs_signal(job_id uuid, name text, payload jsonb, key text, ttl int default null) returns text language sql as $$ select 'x' $$;",
            "signature",
        ),
        (
            "create function ojs_f() returns ojs_job language sql as $f$ select row(j.id, j.seq)::ojs_job from ojs_job j $f$;",
            "row-cast",
        ),
        (
            "-- lint: contract since v0.2.0 (not released)\ndrop table ojs_old;",
            "contract",
        ),
    ];
    for (sql, rule) in refused {
        let findings = check(sql);
        assert!(
            findings.iter().any(|f| f.starts_with(&format!("{rule}:"))),
            "{sql} is refused as {rule}: {findings:?}"
        );
    }
    let passed = [
        "alter table ojs_job add column owner text;",
        "alter table ojs_job add column owner text not null default '';",
        "create table ojs_thing (id int primary key, name text not null unique);\nalter table ojs_thing add constraint c check (id > 0);\ncreate unique index ojs_thing_name on ojs_thing (name);\nalter table ojs_thing drop column name;",
        "create index ojs_job_owner on ojs_job (owner);",
        "create or replace function ojs_signal(job_id uuid, name text, payload jsonb default null, key text default null) returns text language sql as $$ select 'drop table x; rename' $$;",
        "create function ojs_signal_v2(job_id uuid, name text) returns text language sql as $$ select row(j.*)::ojs_job::text from ojs_job j $$;",
        "comment on column ojs_job.owner is 'Who may drop it; rename later';",
        "create or replace view ojs_job_all as select * from ojs_job;",
        "-- lint: contract since v0.1.0 (nothing reads it since)\ndrop table ojs_old;",
        "-- lint: allow drop (created by the previous statement of this release, never released)\ndrop function ojs_tmp();",
        "alter table ojs_job alter column pool drop not null;",
    ];
    for sql in passed {
        assert_eq!(check(sql), Vec::<String>::new(), "{sql} passes");
    }
}
