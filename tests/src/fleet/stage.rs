//! [`Stage`]: what every fleet scenario starts from — a dev-auth gateway, the test scope
//! resolver ([`crate::gateway::setup`]) with the scenario's grants in a fresh partition, and a
//! connection to read the server's side; plus server-authored seed rows and the comparison of a
//! client's rows with the server's.

use postgres::Client;
use serde_json::{json, Value};

use super::{FleetClient, Generation, Limits, Row};
use crate::fixtures::{partition_name, server_tasks, ServerTask, TASKS};
use crate::gateway::{grant, setup, Gateway};

/// A gateway and a fresh partition with grants.
pub struct Stage {
    /// The gateway (dev auth).
    pub gw: Gateway,
    /// The partition.
    pub partition: String,
    /// A connection to the test server.
    pub conn: Client,
}

impl Stage {
    /// A gateway started with `gateway_args` after `--auth dev`, and a partition named after
    /// `label` where each `(actor, projects)` is granted those projects.
    pub fn new(label: &str, grants: &[(&str, &[&str])], gateway_args: &[&str]) -> Stage {
        let mut conn = crate::connect();
        setup(&mut conn);
        let partition = partition_name(label);
        for (actor, projects) in grants {
            grant(&mut conn, &partition, actor, projects);
        }
        Stage { gw: Gateway::start(gateway_args), partition, conn }
    }

    /// A client of `actor` on this gateway and partition.
    pub fn client(&self, generation: Generation, actor: &str, client_id: &str) -> FleetClient {
        FleetClient::spawn(generation, &self.gw.base_url, &self.partition, actor, client_id)
    }

    /// [`Stage::client`] with request knobs.
    pub fn client_with(&self, generation: Generation, actor: &str, client_id: &str, limits: Limits) -> FleetClient {
        FleetClient::spawn_with(generation, &self.gw.base_url, &self.partition, actor, client_id, limits)
    }

    /// The server's `tasks` rows of the partition, by id.
    pub fn server_tasks(&mut self) -> Vec<ServerTask> {
        server_tasks(&mut self.conn, &self.partition).expect("server rows")
    }

    /// The server's rows of `project`.
    pub fn server_tasks_of(&mut self, project: &str) -> Vec<ServerTask> {
        self.server_tasks().into_iter().filter(|t| t.1 == project).collect()
    }

    /// One server-authored commit (`syncular.commit`) writing `rows` as `(id, project, title)`
    /// (`done` false, `priority` the row's index); returns its commitSeq.
    pub fn seed(&mut self, rows: &[(String, &str, String)]) -> i64 {
        let ops: Vec<Value> = rows
            .iter()
            .enumerate()
            .map(|(i, (id, project, title))| {
                json!({"table": TASKS, "op": "upsert",
                       "row": {"id": id, "project_id": project, "title": title, "done": false, "priority": i}})
            })
            .collect();
        let out: Value = self
            .conn
            .query_one(
                "SELECT syncular.commit($1, 'seeder', $2::jsonb, allowed_scopes => '{\"project_id\": [\"*\"]}')",
                &[&self.partition, &Value::Array(ops)],
            )
            .expect("syncular.commit")
            .get(0);
        assert_eq!(out["status"], "applied", "{out}");
        out["commitSeq"].as_i64().expect("commitSeq")
    }

    /// Commits in the log with this client commit id.
    pub fn commits_with_id(&mut self, client_commit_id: &str) -> i64 {
        self.conn
            .query_one(
                "SELECT count(*) FROM syncular.sync_commits WHERE partition = $1 AND client_commit_id = $2",
                &[&self.partition, &client_commit_id],
            )
            .expect("count commits")
            .get(0)
    }

    /// The partition's newest commitSeq (0 without commits).
    pub fn max_commit_seq(&mut self) -> i64 {
        self.conn
            .query_opt("SELECT max_commit_seq FROM syncular.sync_partitions WHERE partition = $1", &[&self.partition])
            .expect("read max_commit_seq")
            .map_or(0, |r| r.get(0))
    }

    /// `GET /segments/{id}` answers 200 so far.
    pub fn segments_served(&self) -> f64 {
        self.gw.metric("syncular_gateway_http_requests_total{route=\"/segments/{id}\",status=\"200\"")
    }
}

/// A client's rows in the server's shape `(id, project_id, title, done, priority, version)`, to
/// compare with [`Stage::server_tasks`].
pub fn as_server_tasks(rows: &[Row]) -> Vec<ServerTask> {
    rows.iter()
        .map(|r| {
            let text = |k: &str| r.values[k].as_str().unwrap_or_else(|| panic!("{k} of {r:?}")).to_owned();
            (
                r.row_id.clone(),
                text("project_id"),
                text("title"),
                r.values["done"].as_bool().unwrap_or_else(|| panic!("done of {r:?}")),
                r.values["priority"].as_i64(),
                r.version,
            )
        })
        .collect()
}

/// `n` seed rows `{prefix}-000 …` of `project`, titled after their id.
pub fn seed_rows<'a>(prefix: &str, project: &'a str, n: usize) -> Vec<(String, &'a str, String)> {
    (0..n).map(|i| (format!("{prefix}-{i:03}"), project, format!("{prefix} row {i}"))).collect()
}

/// Defines, for each scenario `fn name(generation: Generation)`, a module `name` with the tests
/// `fleet_v2` and `fleet_v3` (test names `name::fleet_v2`, `name::fleet_v3`).
#[macro_export]
macro_rules! fleet_scenarios {
    ($($scenario:ident),* $(,)?) => {$(
        mod $scenario {
            #[test]
            fn fleet_v2() {
                super::$scenario($crate::fleet::Generation::V2)
            }
            #[test]
            fn fleet_v3() {
                super::$scenario($crate::fleet::Generation::V3)
            }
        }
    )*};
}
