//! The docs' SQL runs (docs/src/**/*.md and README.md): every ```sql block
//! of a page runs, in order, in a database of its own with the extension,
//! after the page's hidden setup (`<!-- sql-setup … -->` comments, in order).
//! Fence markers (docs/src/develop/testing.md "Docs examples"):
//! `error=SQLSTATE` (the block must fail with it), `skip=<reason>` (never
//! run), `params=request` ($1 is a real encoded pull request). And every
//! function in schema `syncular` is named somewhere in the docs.

use std::path::{Path, PathBuf};

use syncular_integration_tests::wire::{pull_header, request, subscription};
use syncular_integration_tests::{connect_to, dsn, dsn_for_db};

/// What a block's fence says to do with it.
#[derive(Debug, PartialEq)]
enum Mode {
    Run,
    Error(String),
    Skip,
}

/// One ```sql block (or setup comment) of a page.
#[derive(Debug)]
struct Block {
    line: usize,
    mode: Mode,
    params: bool,
    sql: String,
}

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap().to_path_buf()
}

/// README.md, then every page under docs/src, sorted.
fn pages() -> Vec<PathBuf> {
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
        for e in std::fs::read_dir(dir).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                walk(&p, out);
            } else if p.extension().is_some_and(|x| x == "md") {
                out.push(p);
            }
        }
    }
    let mut docs = Vec::new();
    walk(&repo().join("docs/src"), &mut docs);
    docs.sort();
    let mut all = vec![repo().join("README.md")];
    all.extend(docs);
    all
}

/// The fence line's markers: `error=…`, `params=request`, `skip=<reason to end of line>`.
fn markers(fence: &str, at: &str) -> (Mode, bool) {
    let rest = fence.trim_start_matches("```sql").trim();
    if let Some(reason) = rest.strip_prefix("skip=") {
        assert!(!reason.trim().is_empty(), "{at}: skip= needs a reason");
        return (Mode::Skip, false);
    }
    let (mut mode, mut params) = (Mode::Run, false);
    for m in rest.split_whitespace() {
        match m.split_once('=') {
            Some(("error", code)) if code.len() == 5 => mode = Mode::Error(code.to_string()),
            Some(("params", "request")) => params = true,
            _ => panic!("{at}: unknown fence marker {m:?}"),
        }
    }
    (mode, params)
}

/// Setup comments first (they run before any block), then the blocks, each in page order.
fn parse(text: &str, page: &str) -> (Vec<Block>, Vec<Block>) {
    let (mut setup, mut blocks) = (Vec::new(), Vec::new());
    let mut open: Option<(Block, bool)> = None; // (block, is setup)
    let mut in_other_fence = false;
    for (i, line) in text.lines().enumerate() {
        let n = i + 1;
        if let Some((mut b, is_setup)) = open.take() {
            let end = if is_setup { line.trim() == "-->" } else { line.trim_end() == "```" };
            if end {
                if is_setup { setup.push(b) } else { blocks.push(b) }
            } else {
                b.sql.push_str(line);
                b.sql.push('\n');
                open = Some((b, is_setup));
            }
        } else if in_other_fence {
            in_other_fence = line.trim_end() != "```";
        } else if line.starts_with("```sql") {
            let (mode, params) = markers(line, &format!("{page}:{n}"));
            open = Some((Block { line: n, mode, params, sql: String::new() }, false));
        } else if line.starts_with("```") {
            in_other_fence = true;
        } else if line.trim() == "<!-- sql-setup" {
            open = Some((Block { line: n, mode: Mode::Run, params: false, sql: String::new() }, true));
        }
    }
    assert!(open.is_none(), "{page}: a block or sql-setup comment is never closed");
    (setup, blocks)
}

/// A real wire-version-2 request: bootstrap subscription `tasks` of project `p1`.
fn sample_request() -> Vec<u8> {
    request(
        "docs-client",
        None,
        vec![pull_header(100, 1000, 4, 0b0001), subscription("tasks", "tasks", &[("project_id", &["p1"])], -1, None)],
    )
}

/// The block's statements as psql sends them: split after a line ending in `;` (a `-- comment`
/// after it allowed) outside a `$$` body; comment-only chunks dropped.
fn statements(sql: &str) -> Vec<String> {
    let (mut out, mut stmt, mut in_body) = (Vec::new(), String::new(), false);
    for line in sql.lines() {
        stmt.push_str(line);
        stmt.push('\n');
        if line.matches("$$").count() % 2 == 1 {
            in_body = !in_body;
        }
        if !in_body && line.split(" --").next().unwrap().trim_end().ends_with(';') {
            out.push(std::mem::take(&mut stmt));
        }
    }
    out.push(stmt);
    out.retain(|s| s.lines().any(|l| !l.trim().is_empty() && !l.trim_start().starts_with("--")));
    out
}

/// Runs one block, statement by statement (autocommit, as psql), up to its first error; `Err`
/// says why it did not behave as its fence says.
fn run_block(c: &mut postgres::Client, b: &Block) -> Result<(), String> {
    let req = sample_request();
    let mut result = Ok(());
    for s in statements(&b.sql) {
        result = if b.params && s.contains("$1") { c.execute(s.as_str(), &[&req]).map(|_| ()) } else { c.batch_execute(&s) };
        if result.is_err() {
            // Close a transaction the block opened, so the next block starts clean.
            let _ = c.batch_execute("ROLLBACK");
            break;
        }
    }
    match (&b.mode, result) {
        (Mode::Run, Ok(())) => Ok(()),
        (Mode::Run, Err(e)) => Err(format!("failed: {}", describe(&e))),
        (Mode::Error(code), Err(e)) if e.code().map(|s| s.code()) == Some(code.as_str()) => Ok(()),
        (Mode::Error(code), Err(e)) => Err(format!("expected SQLSTATE {code}, got {}", describe(&e))),
        (Mode::Error(code), Ok(())) => Err(format!("expected SQLSTATE {code}, but it succeeded")),
        (Mode::Skip, _) => unreachable!(),
    }
}

fn describe(e: &postgres::Error) -> String {
    match e.as_db_error() {
        Some(d) => format!("{} {}", d.code().code(), d.message()),
        None => e.to_string(),
    }
}

/// A database of its own for one page, dropped afterwards.
struct PageDb(String);

impl PageDb {
    /// `with_extension`: `CREATE EXTENSION syncular` first (a page whose first block creates it
    /// itself gets a database without it).
    fn new(idx: usize, with_extension: bool) -> (PageDb, postgres::Client) {
        let name = format!("syncular_docs_{idx}_{}", std::process::id());
        let mut admin = connect_to(&dsn());
        admin.batch_execute(&format!("DROP DATABASE IF EXISTS {name}")).unwrap();
        admin.batch_execute(&format!("CREATE DATABASE {name}")).unwrap();
        let mut c = connect_to(&dsn_for_db(&dsn(), &name));
        c.batch_execute("SET statement_timeout = '60s'").unwrap();
        if with_extension {
            c.batch_execute("CREATE EXTENSION syncular").unwrap();
        }
        (PageDb(name), c)
    }
}

impl Drop for PageDb {
    fn drop(&mut self) {
        if let Ok(mut admin) = postgres::Client::connect(&dsn(), postgres::NoTls) {
            let _ = admin.batch_execute(&format!("DROP DATABASE IF EXISTS {} WITH (FORCE)", self.0));
        }
    }
}

#[test]
fn docs_sql_blocks_run_as_their_fences_say() {
    let mut failures = Vec::new();
    let (mut ran, mut skipped) = (0, 0);
    for (idx, path) in pages().iter().enumerate() {
        let page = path.strip_prefix(repo()).unwrap().display().to_string();
        let (setup, blocks) = parse(&std::fs::read_to_string(path).unwrap(), &page);
        if blocks.iter().all(|b| b.mode == Mode::Skip) {
            skipped += blocks.len();
            continue;
        }
        let creates_extension = setup.iter().chain(&blocks).find(|b| b.mode != Mode::Skip)
            .is_some_and(|b| b.sql.trim_start().starts_with("CREATE EXTENSION syncular"));
        let (_db, mut c) = PageDb::new(idx, !creates_extension);
        for b in setup.iter().chain(&blocks) {
            if b.mode == Mode::Skip {
                skipped += 1;
                continue;
            }
            ran += 1;
            if let Err(why) = run_block(&mut c, b) {
                failures.push(format!("{page}:{}: {why}\n{}", b.line, b.sql.trim_end()));
            }
        }
    }
    println!("docs SQL: {ran} blocks ran, {skipped} skipped");
    assert!(ran > 30, "only {ran} docs SQL blocks ran: are the fences still ```sql?");
    assert!(failures.is_empty(), "{} docs SQL block(s) misbehaved:\n\n{}", failures.len(), failures.join("\n\n"));
}

#[test]
fn docs_sql_name_every_syncular_function() {
    let text: String = pages().iter().map(|p| std::fs::read_to_string(p).unwrap()).collect();
    let (_db, mut c) = PageDb::new(9999, true);
    let names: Vec<String> = c
        .query("SELECT DISTINCT proname::text FROM pg_proc WHERE pronamespace = 'syncular'::regnamespace ORDER BY 1", &[])
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert!(names.len() > 40, "only {} functions in schema syncular?", names.len());
    let is_word = |b: u8| b.is_ascii_alphanumeric() || b == b'_';
    let named = |n: &str| {
        text.match_indices(n).any(|(i, _)| {
            let (before, after) = (text.as_bytes().get(i.wrapping_sub(1)), text.as_bytes().get(i + n.len()));
            !before.is_some_and(|&b| is_word(b)) && !after.is_some_and(|&b| is_word(b))
        })
    };
    let missing: Vec<&String> = names.iter().filter(|n| !named(n)).collect();
    assert!(missing.is_empty(), "functions of schema syncular the docs never name: {missing:?}");
}

#[test]
fn docs_sql_parser_reads_markers_and_setup() {
    let page = "x\n<!-- sql-setup\nCREATE TABLE a();\n-->\n```sql error=22023\nSELECT 1;\n```\n```sh\n```sql\n```\n```sql skip=needs a file\nCOPY\n```\n";
    let (setup, blocks) = parse(page, "t.md");
    assert_eq!(setup.len(), 1);
    assert_eq!(setup[0].sql, "CREATE TABLE a();\n");
    assert_eq!(blocks.len(), 2, "the ```sql inside the ```sh fence is not a block");
    assert_eq!(blocks[0].mode, Mode::Error("22023".into()));
    assert_eq!((blocks[0].line, blocks[1].mode == Mode::Skip), (5, true));
    let body = "CREATE FUNCTION f() RETURNS int LANGUAGE sql AS $$\n  SELECT 1;\n$$;\nSELECT f();  -- 1\n-- output\n";
    assert_eq!(statements(body).len(), 2, "a $$ body's ; does not split; a trailing comment is no statement");
}

#[test]
fn docs_sql_readme_request_literal_is_the_encoders() {
    let readme = std::fs::read_to_string(repo().join("README.md")).unwrap();
    let hex: String = sample_request().iter().map(|b| format!("{b:02x}")).collect();
    let literal = readme.split("'\\x").nth(1).and_then(|rest| rest.split('\'').next());
    assert_eq!(literal, Some(hex.as_str()), "README's sample request must be the encoder's bytes (\\x{hex})");
}
