//! `pg_upgrade` accepts a cluster with the extension: its own throwaway
//! cluster (initdb) gets the extension, a registered schema, a scope
//! resolver, a write validator, a whole-commit validator and a reaction
//! planner; `pg_upgrade`
//! (same major, copy mode) upgrades it into a second fresh cluster, and
//! there the registrations still name their functions: a plain SQL write the
//! validator refuses is still refused, one it accepts is applied.
//!
//! pg_upgrade refuses any cluster with a reg* column (other than regclass,
//! regrole, regtype) in a user table, so registered functions are stored by
//! signature as text. Needs the server's binaries (`SYNCULAR_PG_BIN`,
//! exported by `scripts/test`) with the extension installed; runs them as
//! the `postgres` user when the test runs as root.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use postgres::{Client, NoTls};

const IR: &str = r#"{"version": 1, "tables": [{
  "name": "notes", "primaryKey": "id",
  "columns": [
    {"name": "id", "type": "string", "nullable": false},
    {"name": "ws", "type": "string", "nullable": false},
    {"name": "body", "type": "string", "nullable": true}],
  "scopes": ["ws:{ws}"]}]}"#;

fn is_root() -> bool {
    Command::new("id").arg("-u").output().map(|o| String::from_utf8_lossy(&o.stdout).trim() == "0").unwrap_or(false)
}

/// Runs `tool` of the server's bindir in `cwd`, as `postgres` when root.
fn run_tool(tool: &str, args: &[&str], cwd: &Path) -> Output {
    let bin = std::env::var("SYNCULAR_PG_BIN")
        .unwrap_or_else(|_| panic!("SYNCULAR_PG_BIN is not set: run through scripts/test"));
    let path = format!("{bin}/{tool}");
    let mut cmd = if is_root() {
        let mut c = Command::new("runuser");
        c.args(["-u", "postgres", "--", &path]);
        c
    } else {
        Command::new(&path)
    };
    cmd.args(args).current_dir(cwd).output().unwrap_or_else(|e| panic!("{tool}: {e}"))
}

fn ok(tool: &str, out: Output) -> String {
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "{tool} failed:\n{text}");
    text
}

struct Cluster {
    data: PathBuf,
    root: PathBuf,
    port: u16,
}

impl Drop for Cluster {
    /// A failed assertion must not leave the server running: stop it if it still runs (never
    /// panics: a panic while unwinding would abort the test binary).
    fn drop(&mut self) {
        if !self.data.join("postmaster.pid").exists() {
            return;
        }
        let Ok(bin) = std::env::var("SYNCULAR_PG_BIN") else { return };
        let pg_ctl = format!("{bin}/pg_ctl");
        let data = self.data.to_string_lossy().into_owned();
        let args = ["-D", data.as_str(), "-m", "immediate", "-w", "stop"];
        let mut cmd = if is_root() {
            let mut c = Command::new("runuser");
            c.args(["-u", "postgres", "--", &pg_ctl]);
            c
        } else {
            Command::new(&pg_ctl)
        };
        let _ = cmd.args(args).current_dir(&self.root).output();
    }
}

impl Cluster {
    fn init(root: &Path, name: &str, port: u16) -> Cluster {
        let data = root.join(name);
        ok("initdb", run_tool("initdb", &["-D", data.to_str().unwrap(), "-A", "trust", "-U", "postgres"], root));
        Cluster { data, root: root.to_path_buf(), port }
    }

    fn start(&self) {
        let opts = format!("-p {} -k {} -c listen_addresses=''", self.port, self.root.display());
        let log = self.root.join(format!("{}.log", self.port));
        ok(
            "pg_ctl start",
            run_tool(
                "pg_ctl",
                &["-D", self.data.to_str().unwrap(), "-o", &opts, "-l", log.to_str().unwrap(), "-w", "start"],
                &self.root,
            ),
        );
    }

    fn stop(&self) {
        ok("pg_ctl stop", run_tool("pg_ctl", &["-D", self.data.to_str().unwrap(), "-m", "fast", "-w", "stop"], &self.root));
    }

    fn connect(&self) -> Client {
        let dsn = format!("host={} port={} user=postgres dbname=postgres", self.root.display(), self.port);
        Client::connect(&dsn, NoTls).unwrap_or_else(|e| panic!("connect {dsn}: {e}"))
    }
}

/// Inserts a note with plain SQL (captured: the write validator runs).
fn insert_note(db: &mut Client, id: &str, body: &str) -> Result<u64, postgres::Error> {
    db.execute("INSERT INTO public.notes(id, ws, body) VALUES ($1, 'w1', $2)", &[&id, &body])
}

#[test]
fn pg_upgrade_keeps_a_cluster_with_registered_host_functions() {
    let root = std::env::temp_dir().join(format!("syncular-pg-upgrade-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&root);
    std::fs::create_dir_all(&root).unwrap();
    if is_root() {
        assert!(Command::new("chown").args(["postgres", root.to_str().unwrap()]).status().unwrap().success());
    }
    let old = Cluster::init(&root, "old", 55431);
    let new = Cluster::init(&root, "new", 55432);

    old.start();
    {
        let mut db = old.connect();
        db.batch_execute("CREATE EXTENSION syncular").unwrap();
        db.execute("SELECT syncular.register_schema($1::text::jsonb)", &[&IR]).unwrap();
        db.batch_execute(
            r#"
            CREATE FUNCTION public.up_resolver(partition text, actor_id text) RETURNS jsonb
              LANGUAGE sql AS $$ SELECT jsonb_build_object('ws', jsonb_build_array(actor_id)) $$;
            SELECT syncular.set_scope_resolver('public.up_resolver(text,text)');
            CREATE FUNCTION public.no_forbidden(w jsonb) RETURNS jsonb LANGUAGE sql AS $$
              SELECT CASE WHEN w->'row'->>'body' = 'forbidden'
                          THEN jsonb_build_object('code', 'note.forbidden') END $$;
            SELECT syncular.set_write_validator('notes', 'public.no_forbidden(jsonb)');
            CREATE FUNCTION public.whole(c jsonb) RETURNS jsonb LANGUAGE sql AS $$ SELECT NULL::jsonb $$;
            SELECT syncular.set_commit_validator('public.whole(jsonb)');
            CREATE FUNCTION public.plan(c jsonb) RETURNS jsonb LANGUAGE sql AS $$ SELECT NULL::jsonb $$;
            SELECT syncular.set_reaction_planner('public.plan(jsonb)');
            SET syncular.partition = 'p1';
            "#,
        )
        .unwrap_or_else(|e| panic!("{e:?}"));
        insert_note(&mut db, "n1", "before").unwrap_or_else(|e| panic!("{e:?}"));
        let refused = insert_note(&mut db, "n2", "forbidden").expect_err("the validator refuses before the upgrade");
        assert!(format!("{refused:?}").contains("note.forbidden"), "{refused:?}");
    }
    old.stop();

    let out = run_tool(
        "pg_upgrade",
        &[
            "-b",
            &std::env::var("SYNCULAR_PG_BIN").unwrap(),
            "-B",
            &std::env::var("SYNCULAR_PG_BIN").unwrap(),
            "-d",
            old.data.to_str().unwrap(),
            "-D",
            new.data.to_str().unwrap(),
            "-p",
            "55433",
            "-P",
            "55434",
            "-U",
            "postgres",
        ],
        &root,
    );
    let report = ok("pg_upgrade", out);
    // Its reg* check ("Checking for reg* data types in user tables", "Checking data type usage"
    // from Postgres 18) passed: the upgrade completed.
    assert!(report.contains("Upgrade Complete"), "{report}");

    new.start();
    {
        let mut db = new.connect();
        let stored: Vec<String> = db
            .query(
                "SELECT resolver FROM syncular.sync_scope_resolver \
                 UNION ALL SELECT validator FROM syncular.sync_write_validators \
                 UNION ALL SELECT validator FROM syncular.sync_commit_validator \
                 UNION ALL SELECT planner FROM syncular.sync_reaction_planner ORDER BY 1",
                &[],
            )
            .unwrap()
            .iter()
            .map(|r| r.get(0))
            .collect();
        assert_eq!(
            stored,
            ["public.no_forbidden(jsonb)", "public.plan(jsonb)", "public.up_resolver(text,text)", "public.whole(jsonb)"]
        );
        db.batch_execute("SET syncular.partition = 'p1'").unwrap();
        let refused = insert_note(&mut db, "n3", "forbidden").expect_err("the validator still refuses after the upgrade");
        assert!(format!("{refused:?}").contains("note.forbidden"), "{refused:?}");
        insert_note(&mut db, "n4", "after").unwrap_or_else(|e| panic!("{e:?}"));
        let bodies: Vec<String> =
            db.query("SELECT body FROM public.notes ORDER BY id", &[]).unwrap().iter().map(|r| r.get(0)).collect();
        assert_eq!(bodies, ["before", "after"]);
        let commits: i64 = db.query_one("SELECT count(*) FROM syncular.sync_commits", &[]).unwrap().get(0);
        assert_eq!(commits, 2, "both applied plain SQL writes were logged");
    }
    new.stop();
    let _ = std::fs::remove_dir_all(&root);
}
