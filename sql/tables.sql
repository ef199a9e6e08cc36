-- syncular: the sync_* storage tables (hand-written DDL, pulled into the
-- generated install script by `extension_sql_file!(…, bootstrap)` in
-- src/lib.rs, i.e. first).
--
-- Schema: the script itself creates schema `syncular` and sets the
-- search_path to it, so every object of the extension — these tables and
-- pgrx's (unqualified) CREATE FUNCTIONs after them — lands in `syncular`, and
-- the schema is an extension MEMBER: DROP EXTENSION removes it with no
-- residue. (A control-file `schema = syncular` would make CREATE EXTENSION
-- create the schema outside the extension, left behind by DROP EXTENSION.)
-- The control file therefore names `schema = pg_catalog` (always present,
-- like pg_cron) with `relocatable = false`. `SET LOCAL`, not `SET`: a plain
-- SET inside an extension script outlives CREATE EXTENSION and would leave
-- the caller's session with search_path = syncular, pg_catalog (measured).
CREATE SCHEMA syncular;
SET LOCAL search_path TO syncular, pg_catalog;
--
-- Part 1 is the reference server's 0.22 Postgres storage DDL (POSTGRES_DDL of
-- @syncular/server, see ../shared/seeds/): same table names, columns, types,
-- keys and indexes. Only `IF NOT EXISTS` is dropped (an extension script runs
-- once) and the 0.22 `ALTER TABLE sync_clients ADD COLUMN IF NOT EXISTS
-- wire_version` is folded into the CREATE TABLE (identical result).
-- Part 2 is this extension's own catalog: the schema marker (registered IR,
-- version, per-table layouts) and the scope-resolver setting.
-- Part 3 marks every table for pg_dump (pg_extension_config_dump).

-- ---------------------------------------------------------------- part 1
CREATE TABLE sync_partitions(
  partition TEXT PRIMARY KEY,
  max_commit_seq BIGINT NOT NULL DEFAULT 0,
  horizon_seq BIGINT NOT NULL DEFAULT 0
);
CREATE TABLE sync_partition_registry(
  partition TEXT PRIMARY KEY,
  log_epoch TEXT NOT NULL,
  epoch_required BOOLEAN NOT NULL DEFAULT FALSE,
  last_authenticated_at_ms BIGINT NOT NULL
);
CREATE TABLE sync_row_scopes(
  partition TEXT NOT NULL, tbl TEXT NOT NULL,
  var TEXT NOT NULL, value TEXT NOT NULL, row_id TEXT NOT NULL,
  PRIMARY KEY(partition, tbl, var, value, row_id)
);
CREATE INDEX sync_row_scopes_by_row
  ON sync_row_scopes(partition, tbl, row_id);
CREATE TABLE sync_commits(
  partition TEXT NOT NULL, commit_seq BIGINT NOT NULL,
  client_id TEXT NOT NULL, client_commit_id TEXT NOT NULL,
  actor_id TEXT NOT NULL, created_at_ms BIGINT NOT NULL,
  PRIMARY KEY(partition, commit_seq)
);
CREATE INDEX sync_commits_by_time
  ON sync_commits(partition, created_at_ms);
CREATE TABLE sync_changes(
  partition TEXT NOT NULL, commit_seq BIGINT NOT NULL, idx INTEGER NOT NULL,
  tbl TEXT NOT NULL, row_id TEXT NOT NULL, op SMALLINT NOT NULL,
  row_version BIGINT, scopes JSONB NOT NULL, payload BYTEA,
  PRIMARY KEY(partition, commit_seq, idx)
);
CREATE INDEX sync_changes_by_table
  ON sync_changes(partition, commit_seq, tbl, idx);
CREATE TABLE sync_change_scopes(
  partition TEXT NOT NULL, tbl TEXT NOT NULL,
  var TEXT NOT NULL, value TEXT NOT NULL, commit_seq BIGINT NOT NULL,
  PRIMARY KEY(partition, tbl, var, value, commit_seq)
);
CREATE TABLE sync_push_results(
  partition TEXT NOT NULL, client_id TEXT NOT NULL,
  client_commit_id TEXT NOT NULL, result JSONB NOT NULL,
  PRIMARY KEY(partition, client_id, client_commit_id)
);
CREATE TABLE sync_reactions(
  partition TEXT NOT NULL, idempotency_key TEXT NOT NULL,
  type TEXT NOT NULL, version INTEGER NOT NULL, payload JSONB NOT NULL,
  source_client_id TEXT NOT NULL, source_client_commit_id TEXT NOT NULL,
  source_commit_seq BIGINT NOT NULL, created_at_ms BIGINT NOT NULL,
  available_at_ms BIGINT NOT NULL, status TEXT NOT NULL,
  attempts INTEGER NOT NULL, max_attempts INTEGER NOT NULL,
  lease_owner TEXT, lease_expires_at_ms BIGINT, completed_at_ms BIGINT,
  last_failure JSONB,
  PRIMARY KEY(partition, idempotency_key),
  CHECK(status IN ('pending', 'leased', 'completed', 'dead-letter'))
);
CREATE INDEX sync_reactions_due
  ON sync_reactions(partition, status, available_at_ms, created_at_ms, idempotency_key);
CREATE INDEX sync_reactions_lease
  ON sync_reactions(partition, status, lease_expires_at_ms);
CREATE INDEX sync_reactions_completed
  ON sync_reactions(partition, status, completed_at_ms, idempotency_key);
CREATE INDEX sync_reactions_dead_letter
  ON sync_reactions(partition, status, available_at_ms, idempotency_key);
CREATE TABLE sync_clients(
  partition TEXT NOT NULL, client_id TEXT NOT NULL, actor_id TEXT NOT NULL,
  wire_version INTEGER NOT NULL DEFAULT 1,
  cursor BIGINT NOT NULL, subscriptions JSONB NOT NULL,
  updated_at_ms BIGINT NOT NULL,
  PRIMARY KEY(partition, client_id)
);
CREATE TABLE sync_blob_refs(
  partition TEXT NOT NULL, tbl TEXT NOT NULL, row_id TEXT NOT NULL,
  blob_id TEXT NOT NULL,
  PRIMARY KEY(partition, tbl, row_id, blob_id)
);
CREATE INDEX sync_blob_refs_by_blob
  ON sync_blob_refs(partition, blob_id);
CREATE TABLE sync_tombstones(
  partition TEXT NOT NULL, tbl TEXT NOT NULL, row_id TEXT NOT NULL,
  commit_seq BIGINT NOT NULL,
  PRIMARY KEY(partition, tbl, row_id)
);

-- ---------------------------------------------------------------- part 2
-- Schema marker: one row per registered schema version (history kept, the
-- current version is the highest). `ir` is the IR exactly as registered
-- (jsonb), `app_schema` the Postgres schema holding the app tables.
CREATE TABLE sync_schema_versions(
  version BIGINT PRIMARY KEY,
  ir JSONB NOT NULL,
  app_schema TEXT NOT NULL,
  registered_at_ms BIGINT NOT NULL
);
-- One row per table of the CURRENT version: its Postgres placement and its
-- codec layout `[{"name","type","nullable"}, …]` in IR column order (the
-- layout stored payloads are encoded under). A table retired by a version bump
-- (allow_drop) is deleted from here.
CREATE TABLE sync_schema_tables(
  tbl TEXT PRIMARY KEY,
  version BIGINT NOT NULL,
  app_schema TEXT NOT NULL,
  app_table TEXT NOT NULL,
  layout JSONB NOT NULL
);
-- The host scope resolver (§3.2): at most one row. Registered functions are
-- stored by their schema-qualified signature as text (`public.f(text,text)`),
-- resolved with `to_regprocedure` when loaded: a dump restores them by name, and
-- not `regprocedure`, because pg_upgrade refuses any cluster with a reg* column
-- in a user table (function OIDs are not preserved).
CREATE TABLE sync_scope_resolver(
  id INTEGER PRIMARY KEY CHECK (id = 1),
  resolver TEXT NOT NULL
);
-- Write validators (§6.7): at most one host function per IR table
-- (`syncular.set_write_validator`), stored by signature as the resolver.
CREATE TABLE sync_write_validators(
  tbl TEXT PRIMARY KEY,
  validator TEXT NOT NULL
);
-- The whole-commit validator (§6.8): at most one row (`syncular.set_commit_validator`).
CREATE TABLE sync_commit_validator(
  id INTEGER PRIMARY KEY CHECK (id = 1),
  validator TEXT NOT NULL
);
-- The reaction planner (§6.9): at most one row (`syncular.set_reaction_planner`).
CREATE TABLE sync_reaction_planner(
  id INTEGER PRIMARY KEY CHECK (id = 1),
  planner TEXT NOT NULL
);
-- The key that signs the NOTIFY payloads gateways trust (any role may NOTIFY any
-- channel): at most one row, 32 random bytes, created by the first commit or
-- `syncular.notification_key()` (not here, so a dump restores its row without
-- conflict). Readable by the extension owner only.
CREATE TABLE sync_notification_key(
  id INTEGER PRIMARY KEY CHECK (id = 1),
  key BYTEA NOT NULL
);

-- Auth leases (§7.3): one row per (partition, client_id), HMAC-SHA256-signed
-- under the key below (`crate::engine::leases`); written only while
-- `syncular.lease_ttl` > 0. `revoked_at_ms` is set by `syncular.revoke_lease`.
CREATE TABLE sync_auth_leases(
  partition TEXT NOT NULL,
  client_id TEXT NOT NULL,
  lease_id TEXT NOT NULL,
  actor_id TEXT NOT NULL,
  allowed_scopes JSONB NOT NULL,
  issued_at_ms BIGINT NOT NULL,
  expires_at_ms BIGINT NOT NULL,
  revoked_at_ms BIGINT,
  signature BYTEA NOT NULL,
  PRIMARY KEY(partition, client_id)
);
CREATE UNIQUE INDEX sync_auth_leases_by_id
  ON sync_auth_leases(partition, lease_id);
-- The key that signs the lease records: at most one row, 32 random bytes,
-- created by the first lease issued (`syncular.rotate_lease_key()` replaces
-- it). Readable by the extension owner only.
CREATE TABLE sync_lease_key(
  id INTEGER PRIMARY KEY CHECK (id = 1),
  key BYTEA NOT NULL
);
-- The blob store (§5.9.2): content-addressed bytes PER PARTITION (a blob id is
-- never a capability across tenants), durable until the orphan sweep
-- (`syncular.blob_sweep_orphans`). Bytes live in `sync_blob_chunks`, at most
-- 1 MiB per row (never one huge datum; downloads stream chunk by chunk),
-- stored uncompressed (EXTERNAL: content address = stored bytes, §5.9.5).
CREATE TABLE sync_blobs(
  partition TEXT NOT NULL, blob_id TEXT NOT NULL,
  byte_length BIGINT NOT NULL, chunk_count INTEGER NOT NULL,
  uploaded_at_ms BIGINT NOT NULL,
  PRIMARY KEY(partition, blob_id)
);
CREATE INDEX sync_blobs_by_upload ON sync_blobs(uploaded_at_ms);
CREATE TABLE sync_blob_chunks(
  partition TEXT NOT NULL, blob_id TEXT NOT NULL, idx INTEGER NOT NULL,
  bytes BYTEA NOT NULL,
  PRIMARY KEY(partition, blob_id, idx)
);
ALTER TABLE sync_blob_chunks ALTER COLUMN bytes SET STORAGE EXTERNAL;

-- Bootstrap segments (§5.1–§5.5): a cache, not durable state. Bytes are
-- immutable and stored once per content address within a partition
-- (`segment_id` = "sha256:" + hex of the bytes; PER PARTITION like blobs, so
-- a segment id is never a capability across tenants and Citus colocates it),
-- in chunks of at most 1 MiB stored uncompressed (EXTERNAL: the stored bytes
-- ARE the content address, §5.8). `sync_segment_publications` is the mutable
-- record: one row per context the bytes were published under, each with its
-- own expiry; download and reuse select the one publication matching the
-- caller's partition, live log epoch and scope digest, never a union.
-- `from_start` = the page starts at the table start (`row_cursor` is then '');
-- `page_rows` = the page window (clamped limitSnapshotRows; 0 for an image).
-- Not dumped by pg_dump (no pg_extension_config_dump): segments are rebuilt
-- on demand, and a restored database has a new log epoch anyway.
CREATE TABLE sync_segments(
  partition TEXT NOT NULL, segment_id TEXT NOT NULL,
  media_type SMALLINT NOT NULL, byte_length BIGINT NOT NULL,
  chunk_count INTEGER NOT NULL, created_at_ms BIGINT NOT NULL,
  PRIMARY KEY(partition, segment_id)
);
CREATE TABLE sync_segment_chunks(
  partition TEXT NOT NULL, segment_id TEXT NOT NULL, idx INTEGER NOT NULL,
  bytes BYTEA NOT NULL,
  PRIMARY KEY(partition, segment_id, idx)
);
ALTER TABLE sync_segment_chunks ALTER COLUMN bytes SET STORAGE EXTERNAL;
CREATE TABLE sync_segment_publications(
  partition TEXT NOT NULL, log_epoch TEXT NOT NULL, tbl TEXT NOT NULL,
  schema_version INTEGER NOT NULL, media_type SMALLINT NOT NULL,
  scope_digest TEXT NOT NULL, as_of_commit_seq BIGINT NOT NULL,
  from_start BOOLEAN NOT NULL, row_cursor TEXT NOT NULL, page_rows INTEGER NOT NULL,
  segment_id TEXT NOT NULL, next_row_cursor TEXT, row_count BIGINT NOT NULL,
  published_at_ms BIGINT NOT NULL, expires_at_ms BIGINT NOT NULL,
  PRIMARY KEY(partition, log_epoch, tbl, schema_version, media_type, scope_digest,
              as_of_commit_seq, from_start, row_cursor, page_rows)
);
CREATE INDEX sync_segment_publications_by_segment
  ON sync_segment_publications(partition, segment_id);
CREATE INDEX sync_segment_publications_by_expiry
  ON sync_segment_publications(expires_at_ms);
-- Keys that sign §5.4 native segment URLs: the newest row signs, every row
-- verifies (rotation keeps the previous key until its URLs have expired).
-- Readable by the extension owner only.
CREATE TABLE sync_segment_url_keys(
  key_id BIGINT PRIMARY KEY, key BYTEA NOT NULL, created_at_ms BIGINT NOT NULL
);

-- The object-store tier (issue 28; docs/src/operate/object-store.md): segment and blob bytes in an
-- S3-compatible bucket, handed to clients as presigned URLs minted here (SigV4, pure computation).
-- Postgres stays the source of truth for what exists and who may read it; the network I/O is done
-- by a mover process (syncular-gateway --object-store-…), which reports through
-- syncular.object_store_* functions. `sync_object_store` is its one configuration row (no secret:
-- the mover hands over per-day derived SigV4 signing keys, `sync_object_store_keys`, readable by
-- the extension owner only); `healthy_until_ms` is the mover's heartbeat — past it, nothing is
-- presigned and every byte is served from Postgres again. `partition_salt` keys the partition's
-- token in blob object keys (clients never learn a partition id); `scanned_at_ms` = the work queue's
-- last whole-table scan (copies and deletions older than its 2-minute window); `mover_fingerprint`
-- names the mover configuration that owns the row (a mover with another one is refused).
CREATE TABLE sync_object_store(
  id BOOLEAN PRIMARY KEY DEFAULT true CHECK (id),
  endpoint TEXT NOT NULL, bucket TEXT NOT NULL, region TEXT NOT NULL, key_prefix TEXT NOT NULL,
  access_key_id TEXT NOT NULL, url_ttl_s INTEGER NOT NULL, partition_salt BYTEA NOT NULL,
  healthy_until_ms BIGINT NOT NULL, updated_at_ms BIGINT NOT NULL, scanned_at_ms BIGINT NOT NULL DEFAULT 0,
  mover_fingerprint TEXT NOT NULL DEFAULT ''
);
CREATE TABLE sync_object_store_keys(
  day TEXT PRIMARY KEY, access_key_id TEXT NOT NULL, signing_key BYTEA NOT NULL,
  created_at_ms BIGINT NOT NULL
);
-- A segment's bytes stored at `{prefix}seg/sha256/{hex}` (content-addressed, so one object serves
-- every partition that stores the same bytes): present = the mover PUT exactly these bytes and saw
-- `etag`; `checked_at_ms` = its last HEAD. Deleted when the object is, or found missing/changed.
CREATE TABLE sync_segment_objects(
  segment_id TEXT PRIMARY KEY, byte_length BIGINT NOT NULL, etag TEXT NOT NULL,
  stored_at_ms BIGINT NOT NULL, checked_at_ms BIGINT NOT NULL
);
CREATE INDEX sync_segment_objects_by_check ON sync_segment_objects(checked_at_ms);
CREATE INDEX sync_segments_by_segment ON sync_segments(segment_id);
CREATE INDEX sync_segments_by_created ON sync_segments(created_at_ms);
-- A blob's bytes at `{prefix}blob/{partition token}/sha256/{hex}`: copied from Postgres by the
-- mover (`in_postgres`), or uploaded by the client with a presigned PUT and verified by the mover
-- (length and SHA-256) before its `sync_blobs` row was written (`in_postgres` false: the bucket
-- holds the only copy).
CREATE TABLE sync_blob_objects(
  partition TEXT NOT NULL, blob_id TEXT NOT NULL, byte_length BIGINT NOT NULL, etag TEXT NOT NULL,
  in_postgres BOOLEAN NOT NULL, stored_at_ms BIGINT NOT NULL, checked_at_ms BIGINT NOT NULL,
  PRIMARY KEY(partition, blob_id)
);
CREATE INDEX sync_blob_objects_by_check ON sync_blob_objects(checked_at_ms);
-- Presigned uploads granted and not yet verified (§5.9.3), each to a key of its own (`staging_key`,
-- `{prefix}up/…`; the mover copies verified bytes to the content key): a push referencing one waits
-- (syncular.blob_pending, retryable) instead of failing with blob.not_found; the mover HEADs and
-- hashes the object (`next_check_at_ms`) and turns it into a blob, or drops the grant once
-- `expires_at_ms` + the grace passed with no (valid) object.
CREATE TABLE sync_blob_grants(
  partition TEXT NOT NULL, blob_id TEXT NOT NULL, byte_length BIGINT NOT NULL,
  granted_at_ms BIGINT NOT NULL, expires_at_ms BIGINT NOT NULL, next_check_at_ms BIGINT NOT NULL,
  checks INTEGER NOT NULL, staging_key TEXT NOT NULL,
  PRIMARY KEY(partition, blob_id)
);
CREATE INDEX sync_blob_grants_by_check ON sync_blob_grants(next_check_at_ms);

-- ROUND_FAILURE reports (wire version 3, §1.5): a client names the code of its
-- last round that failed where the server could not see it (a transport
-- error, a decode failure) on its next request. Per client and code: how
-- many reports and the server clock of the last one. Written only by a
-- request that carries a report (never on the hot path of other rounds);
-- deleted with the partition. Read with `syncular.round_failures(partition)`.
CREATE TABLE sync_round_failures(
  partition TEXT NOT NULL, client_id TEXT NOT NULL, code TEXT NOT NULL,
  reports BIGINT NOT NULL, last_reported_at_ms BIGINT NOT NULL,
  PRIMARY KEY(partition, client_id, code)
);

-- ---------------------------------------------------------------- part 3
SELECT pg_catalog.pg_extension_config_dump('sync_partitions', '');
SELECT pg_catalog.pg_extension_config_dump('sync_partition_registry', '');
SELECT pg_catalog.pg_extension_config_dump('sync_row_scopes', '');
SELECT pg_catalog.pg_extension_config_dump('sync_commits', '');
SELECT pg_catalog.pg_extension_config_dump('sync_changes', '');
SELECT pg_catalog.pg_extension_config_dump('sync_change_scopes', '');
SELECT pg_catalog.pg_extension_config_dump('sync_push_results', '');
SELECT pg_catalog.pg_extension_config_dump('sync_reactions', '');
SELECT pg_catalog.pg_extension_config_dump('sync_clients', '');
SELECT pg_catalog.pg_extension_config_dump('sync_blob_refs', '');
SELECT pg_catalog.pg_extension_config_dump('sync_tombstones', '');
SELECT pg_catalog.pg_extension_config_dump('sync_round_failures', '');
SELECT pg_catalog.pg_extension_config_dump('sync_schema_versions', '');
SELECT pg_catalog.pg_extension_config_dump('sync_schema_tables', '');
SELECT pg_catalog.pg_extension_config_dump('sync_scope_resolver', '');
SELECT pg_catalog.pg_extension_config_dump('sync_write_validators', '');
SELECT pg_catalog.pg_extension_config_dump('sync_commit_validator', '');
SELECT pg_catalog.pg_extension_config_dump('sync_reaction_planner', '');
SELECT pg_catalog.pg_extension_config_dump('sync_notification_key', '');
SELECT pg_catalog.pg_extension_config_dump('sync_auth_leases', '');
SELECT pg_catalog.pg_extension_config_dump('sync_lease_key', '');
SELECT pg_catalog.pg_extension_config_dump('sync_blobs', '');
SELECT pg_catalog.pg_extension_config_dump('sync_blob_chunks', '');
SELECT pg_catalog.pg_extension_config_dump('sync_object_store', '');
SELECT pg_catalog.pg_extension_config_dump('sync_blob_objects', '');
SELECT pg_catalog.pg_extension_config_dump('sync_blob_grants', '');
