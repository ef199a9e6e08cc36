-- syncular 0.2.0 → 0.3.0: wire version 3 (syncular-client 0.49.x) beside 1 and 2 — per-column
-- versions on every app table, sparse upserts, column-level conflicts, ROUND_FAILURE reports;
-- the realtime session rules; the object-store tier (presigned segment and blob URLs, the mover).
-- Definitions as `cargo pgrx schema` writes them for 0.3.0; privileges repeat sql/privileges.sql's
-- rule (EXECUTE revoked from PUBLIC, granted to syncular_gateway; admin functions: revoked only).
SET LOCAL search_path TO syncular, pg_catalog;

-- Per-column versions (wire version 3): every registered app table gains `_sync_column_versions`
-- (bytea; LEB128 `(ordinal, version)` pairs above 1). NULL means every column sits at the row's
-- `_sync_version`, which is what existing rows get — no table rewrite. App tables are not extension
-- members; a table missing here (dropped by hand) is left alone and `register_schema` adds the
-- column when it next adopts or re-registers the table.
DO $syncular_column_versions$
DECLARE
  t record;
BEGIN
  FOR t IN SELECT st.app_schema, st.app_table FROM syncular.sync_schema_tables st ORDER BY st.tbl LOOP
    IF pg_catalog.to_regclass(pg_catalog.format('%I.%I', t.app_schema, t.app_table)) IS NOT NULL
       AND NOT EXISTS (
         SELECT 1 FROM pg_catalog.pg_attribute a
          WHERE a.attrelid = pg_catalog.format('%I.%I', t.app_schema, t.app_table)::pg_catalog.regclass
            AND a.attname = '_sync_column_versions' AND NOT a.attisdropped) THEN
      EXECUTE pg_catalog.format('ALTER TABLE %I.%I ADD COLUMN _sync_column_versions pg_catalog.bytea',
                                t.app_schema, t.app_table);
    END IF;
  END LOOP;
END
$syncular_column_versions$;

-- ROUND_FAILURE reports (wire version 3, §1.5), per client and code.
CREATE TABLE syncular.sync_round_failures(
  partition TEXT NOT NULL, client_id TEXT NOT NULL, code TEXT NOT NULL,
  reports BIGINT NOT NULL, last_reported_at_ms BIGINT NOT NULL,
  PRIMARY KEY(partition, client_id, code)
);
SELECT pg_catalog.pg_extension_config_dump('syncular.sync_round_failures', '');

-- syncular.round_failures(partition): the reports per client and code (admin: REVOKE only).
CREATE FUNCTION syncular."round_failures"(
	"partition" TEXT
) RETURNS TABLE (
	"client_id" TEXT,
	"code" TEXT,
	"reports" bigint,
	"last_reported_at_ms" bigint
)
STABLE SECURITY DEFINER PARALLEL UNSAFE
SET search_path TO pg_catalog, pg_temp
LANGUAGE c
AS 'MODULE_PATHNAME', 'round_failures_wrapper';
REVOKE ALL ON FUNCTION syncular.round_failures(text) FROM PUBLIC;

-- The session rules of realtime (docs/src/sql/realtime.md "Session rules"): a gateway keeps each
-- session's state verbatim and sends what these answer (gateway functions: granted).
CREATE FUNCTION syncular."realtime_connect"(
	"partition" TEXT,
	"actor_id" TEXT,
	"client_id" TEXT,
	"allowed_scopes" jsonb DEFAULT NULL
) RETURNS jsonb
VOLATILE SECURITY DEFINER PARALLEL UNSAFE
SET search_path TO pg_catalog, pg_temp
LANGUAGE c
AS 'MODULE_PATHNAME', 'realtime_connect_wrapper';
REVOKE ALL ON FUNCTION syncular.realtime_connect(text, text, text, jsonb) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION syncular.realtime_connect(text, text, text, jsonb) TO syncular_gateway;

CREATE FUNCTION syncular."realtime_reload"(
	"partition" TEXT,
	"actor_id" TEXT,
	"client_id" TEXT,
	"allowed_scopes" jsonb,
	"state" jsonb,
	"reason" TEXT,
	"wire_version" INT DEFAULT NULL
) RETURNS jsonb
VOLATILE SECURITY DEFINER PARALLEL UNSAFE
SET search_path TO pg_catalog, pg_temp
LANGUAGE c
AS 'MODULE_PATHNAME', 'realtime_reload_wrapper';
REVOKE ALL ON FUNCTION syncular.realtime_reload(text, text, text, jsonb, jsonb, text, integer) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION syncular.realtime_reload(text, text, text, jsonb, jsonb, text, integer) TO syncular_gateway;

CREATE FUNCTION syncular."realtime_pass"(
	"partition" TEXT,
	"states" jsonb,
	"max_delta_bytes" INT DEFAULT 1048576,
	"through_seq" bigint DEFAULT NULL,
	"in_round" bool[] DEFAULT NULL
) RETURNS TABLE (
	"state_index" INT,
	"state" jsonb,
	"message" bytea,
	"control" TEXT,
	"resume" jsonb,
	"overflow" jsonb
)
STABLE SECURITY DEFINER PARALLEL UNSAFE
SET search_path TO pg_catalog, pg_temp
LANGUAGE c
AS 'MODULE_PATHNAME', 'realtime_pass_wrapper';
REVOKE ALL ON FUNCTION syncular.realtime_pass(text, jsonb, integer, bigint, boolean[]) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION syncular.realtime_pass(text, jsonb, integer, bigint, boolean[]) TO syncular_gateway;

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
CREATE TABLE syncular.sync_object_store(
  id BOOLEAN PRIMARY KEY DEFAULT true CHECK (id),
  endpoint TEXT NOT NULL, bucket TEXT NOT NULL, region TEXT NOT NULL, key_prefix TEXT NOT NULL,
  access_key_id TEXT NOT NULL, url_ttl_s INTEGER NOT NULL, partition_salt BYTEA NOT NULL,
  healthy_until_ms BIGINT NOT NULL, updated_at_ms BIGINT NOT NULL, scanned_at_ms BIGINT NOT NULL DEFAULT 0,
  mover_fingerprint TEXT NOT NULL DEFAULT ''
);
CREATE TABLE syncular.sync_object_store_keys(
  day TEXT PRIMARY KEY, access_key_id TEXT NOT NULL, signing_key BYTEA NOT NULL,
  created_at_ms BIGINT NOT NULL
);
-- A segment's bytes stored at `{prefix}seg/sha256/{hex}` (content-addressed, so one object serves
-- every partition that stores the same bytes): present = the mover PUT exactly these bytes and saw
-- `etag`; `checked_at_ms` = its last HEAD. Deleted when the object is, or found missing/changed.
CREATE TABLE syncular.sync_segment_objects(
  segment_id TEXT PRIMARY KEY, byte_length BIGINT NOT NULL, etag TEXT NOT NULL,
  stored_at_ms BIGINT NOT NULL, checked_at_ms BIGINT NOT NULL
);
CREATE INDEX sync_segment_objects_by_check ON syncular.sync_segment_objects(checked_at_ms);
CREATE INDEX sync_segments_by_segment ON syncular.sync_segments(segment_id);
CREATE INDEX sync_segments_by_created ON syncular.sync_segments(created_at_ms);
-- A blob's bytes at `{prefix}blob/{partition token}/sha256/{hex}`: copied from Postgres by the
-- mover (`in_postgres`), or uploaded by the client with a presigned PUT and verified by the mover
-- (length and SHA-256) before its `sync_blobs` row was written (`in_postgres` false: the bucket
-- holds the only copy).
CREATE TABLE syncular.sync_blob_objects(
  partition TEXT NOT NULL, blob_id TEXT NOT NULL, byte_length BIGINT NOT NULL, etag TEXT NOT NULL,
  in_postgres BOOLEAN NOT NULL, stored_at_ms BIGINT NOT NULL, checked_at_ms BIGINT NOT NULL,
  PRIMARY KEY(partition, blob_id)
);
CREATE INDEX sync_blob_objects_by_check ON syncular.sync_blob_objects(checked_at_ms);
-- Presigned uploads granted and not yet verified (§5.9.3), each to a key of its own (`staging_key`,
-- `{prefix}up/…`; the mover copies verified bytes to the content key): a push referencing one waits
-- (syncular.blob_pending, retryable) instead of failing with blob.not_found; the mover HEADs and
-- hashes the object (`next_check_at_ms`) and turns it into a blob, or drops the grant once
-- `expires_at_ms` + the grace passed with no (valid) object.
CREATE TABLE syncular.sync_blob_grants(
  partition TEXT NOT NULL, blob_id TEXT NOT NULL, byte_length BIGINT NOT NULL,
  granted_at_ms BIGINT NOT NULL, expires_at_ms BIGINT NOT NULL, next_check_at_ms BIGINT NOT NULL,
  checks INTEGER NOT NULL, staging_key TEXT NOT NULL,
  PRIMARY KEY(partition, blob_id)
);
CREATE INDEX sync_blob_grants_by_check ON syncular.sync_blob_grants(next_check_at_ms);

SELECT pg_catalog.pg_extension_config_dump('syncular.sync_object_store', '');
SELECT pg_catalog.pg_extension_config_dump('syncular.sync_blob_objects', '');
SELECT pg_catalog.pg_extension_config_dump('syncular.sync_blob_grants', '');

CREATE FUNCTION syncular."object_store_blob_chunk"(
	"partition" TEXT,
	"blob_id" TEXT,
	"idx" INT
) RETURNS bytea
VOLATILE SECURITY DEFINER PARALLEL UNSAFE
SET search_path TO pg_catalog, pg_temp
LANGUAGE c
AS 'MODULE_PATHNAME', 'object_store_blob_chunk_wrapper';
REVOKE ALL ON FUNCTION syncular.object_store_blob_chunk(text, text, integer) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION syncular.object_store_blob_chunk(text, text, integer) TO syncular_gateway;

CREATE FUNCTION syncular."object_store_configure"(
	"endpoint" TEXT,
	"bucket" TEXT,
	"region" TEXT,
	"key_prefix" TEXT,
	"access_key_id" TEXT,
	"url_ttl_s" INT DEFAULT 900,
	"mover_fingerprint" TEXT DEFAULT ''
) RETURNS void
VOLATILE SECURITY DEFINER PARALLEL UNSAFE
SET search_path TO pg_catalog, pg_temp
LANGUAGE c
AS 'MODULE_PATHNAME', 'object_store_configure_wrapper';
REVOKE ALL ON FUNCTION syncular.object_store_configure(text, text, text, text, text, integer, text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION syncular.object_store_configure(text, text, text, text, text, integer, text) TO syncular_gateway;

CREATE FUNCTION syncular."object_store_heartbeat"(
	"healthy_for_ms" bigint,
	"mover_fingerprint" TEXT DEFAULT ''
) RETURNS bool
VOLATILE SECURITY DEFINER PARALLEL UNSAFE
SET search_path TO pg_catalog, pg_temp
LANGUAGE c
AS 'MODULE_PATHNAME', 'object_store_heartbeat_wrapper';
REVOKE ALL ON FUNCTION syncular.object_store_heartbeat(bigint, text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION syncular.object_store_heartbeat(bigint, text) TO syncular_gateway;

CREATE FUNCTION syncular."object_store_report"(
	"item" jsonb
) RETURNS TEXT
VOLATILE SECURITY DEFINER PARALLEL UNSAFE
SET search_path TO pg_catalog, pg_temp
LANGUAGE c
AS 'MODULE_PATHNAME', 'object_store_report_wrapper';
REVOKE ALL ON FUNCTION syncular.object_store_report(jsonb) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION syncular.object_store_report(jsonb) TO syncular_gateway;

CREATE FUNCTION syncular."object_store_signing_keys"(
	"keys" jsonb,
	"mover_fingerprint" TEXT DEFAULT ''
) RETURNS bigint
VOLATILE SECURITY DEFINER PARALLEL UNSAFE
SET search_path TO pg_catalog, pg_temp
LANGUAGE c
AS 'MODULE_PATHNAME', 'object_store_signing_keys_wrapper';
REVOKE ALL ON FUNCTION syncular.object_store_signing_keys(jsonb, text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION syncular.object_store_signing_keys(jsonb, text) TO syncular_gateway;

CREATE FUNCTION syncular."object_store_work"(
	"max_items" INT DEFAULT 100,
	"check_after_ms" bigint DEFAULT 60000,
	"scan_after_ms" bigint DEFAULT 60000
) RETURNS SETOF jsonb
VOLATILE SECURITY DEFINER PARALLEL UNSAFE
SET search_path TO pg_catalog, pg_temp
LANGUAGE c
AS 'MODULE_PATHNAME', 'object_store_work_wrapper';
REVOKE ALL ON FUNCTION syncular.object_store_work(integer, bigint, bigint) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION syncular.object_store_work(integer, bigint, bigint) TO syncular_gateway;

-- A gateway's whole round as one statement (docs/src/sql/sync.md): syncular.sync, committed
-- with synchronous_commit off when the request carries no PUSH_COMMIT and the statement runs in
-- its own implicit transaction.
CREATE FUNCTION syncular."gateway_round"(
	"partition" TEXT,
	"actor_id" TEXT,
	"request" bytea,
	"allowed_scopes" jsonb DEFAULT NULL,
	"connection_client_id" TEXT DEFAULT NULL,
	"max_response_bytes" INT DEFAULT NULL
) RETURNS bytea
VOLATILE SECURITY DEFINER PARALLEL UNSAFE
SET search_path TO pg_catalog, pg_temp
LANGUAGE c
AS 'MODULE_PATHNAME', 'gateway_round_wrapper';
REVOKE ALL ON FUNCTION syncular.gateway_round(text, text, bytea, jsonb, text, integer) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION syncular.gateway_round(text, text, bytea, jsonb, text, integer) TO syncular_gateway;
