//! Epoch rotation (SPEC §2.1 backup-restore rule): a new unpredictable
//! epoch, wire version 1 refused afterwards, the partition's client records
//! gone, v2 clients holding the old epoch answered with the reset response,
//! push outcomes kept (an outbox replay answers `cached`), other partitions
//! untouched unless every partition is rotated.

#[pgrx::pg_schema]
mod tests {
    use pgrx::prelude::*;
    use syncular_protocol::response::{decode_response, PushStatus};

    use crate::tests::lifecycle::support::*;
    use crate::tests::sync_pull_support::*;
    use crate::tests::sync_support;

    const P: &str = "rotate-a";
    const Q: &str = "rotate-b";

    fn epoch_of(p: &str) -> (String, bool) {
        Spi::connect(|c| {
            let t = c
                .select(
                    "SELECT log_epoch, epoch_required FROM syncular.sync_partition_registry WHERE partition = $1",
                    None,
                    &[p.into()],
                )
                .unwrap();
            let r = t.first();
            (r.get::<String>(1).unwrap().unwrap(), r.get::<bool>(2).unwrap().unwrap())
        })
    }

    fn rotate(p: Option<&str>) -> Vec<(String, String, i64)> {
        Spi::connect(|c| {
            c.select("SELECT * FROM syncular.rotate_log_epoch($1)", None, &[p.into()])
                .unwrap()
                .map(|r| (r.get::<String>(1).unwrap().unwrap(), r.get::<String>(2).unwrap().unwrap(), r.get::<i64>(3).unwrap().unwrap()))
                .collect()
        })
    }

    fn v1_pull(p: &str, client_id: &str) -> Result<Vec<u8>, crate::store::spi::subtransaction::SubtransactionError> {
        let bytes = sync_support::request(1, client_id, 1, None, vec![], Some(sync_support::empty_pull()));
        sync_support::call("sync", p, "alice", &bytes, None)
    }

    #[pg_test]
    fn rotation_renews_the_epoch_refuses_v1_and_forgets_cursors_but_not_outcomes() {
        setup();
        set_now(T0);
        let mut c = Client::new(P, "alice", "c1");
        let seq = c.push_ok(vec![task("a", "w1", "first")]);
        c.pull(header(100, 1000, 10, ACCEPT_ROWS), vec![sub("s", "tasks", &[("ws", &["w1"])], -1, None)]);
        let mut d = Client::new(Q, "alice", "d1");
        d.push_ok(vec![task("q", "w1", "other")]);
        v1_pull(P, "v1-client").expect("wire version 1 is served before a rotation");
        let (old, required) = epoch_of(P);
        assert!(!required);
        let q_epoch = epoch_of(Q);

        let rotated = rotate(Some(P));
        assert_eq!(rotated.len(), 1);
        let (partition, new, clients_deleted) = &rotated[0];
        assert_eq!(partition, P);
        assert_ne!(new, &old);
        assert_eq!(new.len(), 36, "a UUID: 122 random bits");
        assert_eq!(*clients_deleted, 2, "c1 and the v1 client");
        assert_eq!(epoch_of(P), (new.clone(), true));
        assert_eq!(rows("sync_clients", P, "true"), 0);
        assert_eq!(epoch_of(Q), q_epoch, "another partition keeps its epoch");
        assert_eq!(rows("sync_clients", Q, "true"), 1);

        // Wire version 1 is refused from now on.
        let refused = v1_pull(P, "v1-client").unwrap_err();
        assert!(refused.message.starts_with("sync.client_wire_unsupported"), "{refused:?}");

        // The old epoch gets the reset response: the new epoch, nothing else.
        let bytes = c.request(vec![], Some(syncular_protocol::request::PullRequest {
            header: header(100, 1000, 10, ACCEPT_ROWS),
            subscriptions: vec![sub("s", "tasks", &[("ws", &["w1"])], seq, None)],
        }));
        let resp = decode_response(&c.sync_bytes(bytes).unwrap()).unwrap();
        let epoch = resp.header.epoch.expect("v2 header");
        assert!(epoch.reset_required);
        assert_eq!(&epoch.log_epoch, new);
        assert!(resp.frames.is_empty());

        // The client re-acquires the epoch and replays its outbox: cached.
        let mut again = Client::new(P, "alice", "c1");
        let replay = again.push(vec![task("a", "w1", "first")]);
        assert_eq!(replay.status, PushStatus::Cached);
        assert_eq!(replay.commit_seq, Some(seq));
        assert_eq!(rows("sync_commits", P, "true"), 1, "nothing applied twice");

        // NULL rotates every partition; an unknown named one is created rotated.
        let all = rotate(None);
        assert_eq!(all.iter().map(|r| r.0.as_str()).collect::<Vec<_>>(), vec![P, Q]);
        assert_ne!(epoch_of(Q).0, q_epoch.0);
        assert_eq!(rows("sync_clients", Q, "true"), 0);
        let fresh = rotate(Some("rotate-new"));
        assert_eq!(fresh[0].2, 0);
        assert!(epoch_of("rotate-new").1);
        let e = crate::tests::support::try_run("SELECT * FROM syncular.rotate_log_epoch('')").unwrap_err();
        assert!(e.message.starts_with("syncular.invalid_argument"), "{e:?}");
    }
}
