-- syncular 0.1.0 → 0.2.0: realtime in SQL (SPEC §8), the log's lifecycle (§4.6, §2.1), §10.1 JSON in every
-- error's DETAIL (no catalog change), the §8.7 `connection_client_id`
-- argument of the sync functions, and signed NOTIFY payloads. Definitions as `cargo pgrx schema` writes
-- them for 0.2.0; privileges repeat sql/privileges.sql's rule (EXECUTE
-- revoked from PUBLIC, granted to syncular_gateway).
SET LOCAL search_path TO syncular, pg_catalog;

-- The key that signs the NOTIFY payloads gateways trust (row created on first use).
CREATE TABLE syncular.sync_notification_key(
  id INTEGER PRIMARY KEY CHECK (id = 1),
  key BYTEA NOT NULL
);
SELECT pg_catalog.pg_extension_config_dump('syncular.sync_notification_key', '');

-- The resolver is stored by its schema-qualified signature as text, not
-- `regprocedure` (pg_upgrade refuses reg* columns in user tables). With
-- search_path = pg_catalog, regprocedure's text form qualifies every function
-- outside pg_catalog.
SET LOCAL search_path TO pg_catalog;
ALTER TABLE syncular.sync_scope_resolver ALTER COLUMN resolver TYPE pg_catalog.text USING resolver::pg_catalog.text;
SET LOCAL search_path TO syncular, pg_catalog;

-- issue 13: durable reactions — the planner's registration (SPEC §6.9), read with the schema too.
CREATE TABLE syncular.sync_reaction_planner(
  id INTEGER PRIMARY KEY CHECK (id = 1),
  planner TEXT NOT NULL
);
SELECT pg_catalog.pg_extension_config_dump('syncular.sync_reaction_planner', '');

-- Write validators (SPEC §6.7), read with the schema (so before anything below loads it).
CREATE TABLE syncular.sync_write_validators(
  tbl TEXT PRIMARY KEY,
  validator TEXT NOT NULL
);
SELECT pg_catalog.pg_extension_config_dump('syncular.sync_write_validators', '');
CREATE TABLE syncular.sync_commit_validator(
  id INTEGER PRIMARY KEY CHECK (id = 1),
  validator TEXT NOT NULL
);
SELECT pg_catalog.pg_extension_config_dump('syncular.sync_commit_validator', '');

-- The commit payload is now signed (it reads the key): no longer IMMUTABLE.
CREATE OR REPLACE FUNCTION syncular."commit_notification_payload"(
	"partition" TEXT,
	"commit_seq" bigint
) RETURNS TEXT
STRICT VOLATILE SECURITY DEFINER PARALLEL UNSAFE
SET search_path TO pg_catalog, pg_temp
LANGUAGE c
AS 'MODULE_PATHNAME', 'commit_notification_payload_wrapper';

-- sync / push / pull gain `connection_client_id text DEFAULT NULL`. A new
-- trailing defaulted argument is a new signature, and keeping the old one
-- would make every 4-argument call ambiguous: drop and recreate.
DROP FUNCTION syncular.sync(text, text, bytea, jsonb);
DROP FUNCTION syncular.push(text, text, bytea, jsonb);
DROP FUNCTION syncular.pull(text, text, bytea, jsonb);

CREATE FUNCTION syncular."sync"(
	"partition" TEXT,
	"actor_id" TEXT,
	"request" bytea,
	"allowed_scopes" jsonb DEFAULT NULL,
	"connection_client_id" TEXT DEFAULT NULL
) RETURNS bytea
VOLATILE SECURITY DEFINER PARALLEL UNSAFE
SET search_path TO pg_catalog, pg_temp
LANGUAGE c
AS 'MODULE_PATHNAME', 'sync_wrapper';

CREATE FUNCTION syncular."push"(
	"partition" TEXT,
	"actor_id" TEXT,
	"request" bytea,
	"allowed_scopes" jsonb DEFAULT NULL,
	"connection_client_id" TEXT DEFAULT NULL
) RETURNS bytea
VOLATILE SECURITY DEFINER PARALLEL UNSAFE
SET search_path TO pg_catalog, pg_temp
LANGUAGE c
AS 'MODULE_PATHNAME', 'push_wrapper';

CREATE FUNCTION syncular."pull"(
	"partition" TEXT,
	"actor_id" TEXT,
	"request" bytea,
	"allowed_scopes" jsonb DEFAULT NULL,
	"connection_client_id" TEXT DEFAULT NULL
) RETURNS bytea
VOLATILE SECURITY DEFINER PARALLEL UNSAFE
SET search_path TO pg_catalog, pg_temp
LANGUAGE c
AS 'MODULE_PATHNAME', 'pull_wrapper';

CREATE FUNCTION syncular."realtime_open"(
	"partition" TEXT,
	"actor_id" TEXT,
	"client_id" TEXT,
	"allowed_scopes" jsonb DEFAULT NULL
) RETURNS jsonb
VOLATILE SECURITY DEFINER PARALLEL UNSAFE
SET search_path TO pg_catalog, pg_temp
LANGUAGE c
AS 'MODULE_PATHNAME', 'realtime_open_wrapper';

CREATE FUNCTION syncular."realtime_deltas"(
	"partition" TEXT,
	"groups" jsonb,
	"max_delta_bytes" INT DEFAULT 1048576,
	"through_seq" bigint DEFAULT NULL
) RETURNS TABLE (
	"group_index" INT,
	"kind" TEXT,
	"cursor" bigint,
	"delta" bytea
)
STABLE SECURITY DEFINER PARALLEL UNSAFE
SET search_path TO pg_catalog, pg_temp
LANGUAGE c
AS 'MODULE_PATHNAME', 'realtime_deltas_wrapper';

CREATE FUNCTION syncular."realtime_ack"(
	"partition" TEXT,
	"acks" jsonb
) RETURNS INT
VOLATILE SECURITY DEFINER PARALLEL UNSAFE
SET search_path TO pg_catalog, pg_temp
LANGUAGE c
AS 'MODULE_PATHNAME', 'realtime_ack_wrapper';

CREATE FUNCTION syncular."refresh_scopes"(
	"partition" TEXT,
	"actor_id" TEXT DEFAULT NULL
) RETURNS void
VOLATILE SECURITY DEFINER PARALLEL UNSAFE
SET search_path TO pg_catalog, pg_temp
LANGUAGE c
AS 'MODULE_PATHNAME', 'refresh_scopes_wrapper';

CREATE FUNCTION syncular."realtime_scopes_payload"(
	"partition" TEXT,
	"actor_id" TEXT DEFAULT NULL
) RETURNS TEXT
VOLATILE SECURITY DEFINER PARALLEL UNSAFE
SET search_path TO pg_catalog, pg_temp
LANGUAGE c
AS 'MODULE_PATHNAME', 'realtime_scopes_payload_wrapper';

CREATE FUNCTION syncular."notification_key"() RETURNS bytea
STRICT VOLATILE SECURITY DEFINER PARALLEL UNSAFE
SET search_path TO pg_catalog, pg_temp
LANGUAGE c
AS 'MODULE_PATHNAME', 'notification_key_wrapper';

CREATE FUNCTION syncular."error_response"(
	"partition" TEXT,
	"wire_version" INT,
	"error" jsonb
) RETURNS bytea
STABLE SECURITY DEFINER PARALLEL UNSAFE
SET search_path TO pg_catalog, pg_temp
LANGUAGE c
AS 'MODULE_PATHNAME', 'error_response_wrapper';

DO $syncular_privileges$
DECLARE
  fn pg_catalog.regprocedure;
BEGIN
  FOREACH fn IN ARRAY ARRAY[
    'syncular.sync(text,text,bytea,jsonb,text)',
    'syncular.push(text,text,bytea,jsonb,text)',
    'syncular.pull(text,text,bytea,jsonb,text)',
    'syncular.realtime_open(text,text,text,jsonb)',
    'syncular.realtime_deltas(text,jsonb,integer,bigint)',
    'syncular.realtime_ack(text,jsonb)',
    'syncular.refresh_scopes(text,text)',
    'syncular.realtime_scopes_payload(text,text)',
    'syncular.error_response(text,integer,jsonb)',
    'syncular.notification_key()',
    'syncular.commit_notification_payload(text,bigint)'
  ]::pg_catalog.regprocedure[]
  LOOP
    EXECUTE pg_catalog.format('REVOKE ALL ON FUNCTION %s FROM PUBLIC', fn);
    EXECUTE pg_catalog.format('GRANT EXECUTE ON FUNCTION %s TO syncular_gateway', fn);
  END LOOP;
END
$syncular_privileges$;

-- Plain SQL writes become commits (README "Writing with plain SQL"): the
-- capture trigger functions and the admin function installing them.
CREATE FUNCTION syncular.capture_statement_start() RETURNS trigger LANGUAGE c SECURITY DEFINER
  SET search_path = pg_catalog, pg_temp AS 'MODULE_PATHNAME', 'capture_statement_start_wrapper';
CREATE FUNCTION syncular.capture_row() RETURNS trigger LANGUAGE c SECURITY DEFINER
  SET search_path = pg_catalog, pg_temp AS 'MODULE_PATHNAME', 'capture_row_wrapper';
CREATE FUNCTION syncular.capture_statement() RETURNS trigger LANGUAGE c SECURITY DEFINER
  SET search_path = pg_catalog, pg_temp AS 'MODULE_PATHNAME', 'capture_statement_wrapper';
CREATE FUNCTION syncular.capture_truncate() RETURNS trigger LANGUAGE c SECURITY DEFINER
  SET search_path = pg_catalog, pg_temp AS 'MODULE_PATHNAME', 'capture_truncate_wrapper';
CREATE FUNCTION syncular."install_capture_triggers"() RETURNS INT
STRICT VOLATILE
LANGUAGE c
AS 'MODULE_PATHNAME', 'install_capture_triggers_wrapper';

-- Admin functions: EXECUTE stays with the owner (sql/privileges.sql `admin`).
REVOKE ALL ON FUNCTION syncular.capture_statement_start() FROM PUBLIC;
REVOKE ALL ON FUNCTION syncular.capture_row() FROM PUBLIC;
REVOKE ALL ON FUNCTION syncular.capture_statement() FROM PUBLIC;
REVOKE ALL ON FUNCTION syncular.capture_truncate() FROM PUBLIC;
REVOKE ALL ON FUNCTION syncular.install_capture_triggers() FROM PUBLIC;

-- App tables registered under 0.1.0 get their capture triggers now.
DO $syncular_capture$
BEGIN
  IF EXISTS (SELECT 1 FROM syncular.sync_schema_versions) THEN
    PERFORM syncular.install_capture_triggers();
  END IF;
END
$syncular_capture$;

-- The log's lifecycle (README "The log's lifecycle"): pruning with the SSP2
-- §4.6 floors, epoch rotation, partition removal, statistics. Admin-only.
CREATE FUNCTION syncular."advance_horizon"(
	"partition" TEXT
) RETURNS bigint
VOLATILE SECURITY DEFINER PARALLEL UNSAFE
SET search_path TO pg_catalog, pg_temp
LANGUAGE c
AS 'MODULE_PATHNAME', 'advance_horizon_wrapper';

CREATE FUNCTION syncular."prune_batch"(
	"partition" TEXT,
	"max_rows" INT DEFAULT 10000
) RETURNS TABLE (
	"commits" bigint,
	"changes" bigint,
	"change_scopes" bigint,
	"tombstones" bigint,
	"push_results" bigint,
	"clients" bigint,
	"fence_busy" bool,
	"done" bool
)
VOLATILE SECURITY DEFINER PARALLEL UNSAFE
SET search_path TO pg_catalog, pg_temp
LANGUAGE c
AS 'MODULE_PATHNAME', 'prune_batch_wrapper';

CREATE FUNCTION syncular."rotate_log_epoch"(
	"partition" TEXT DEFAULT NULL
) RETURNS TABLE (
	"partition" TEXT,
	"log_epoch" TEXT,
	"clients_deleted" bigint
)
VOLATILE SECURITY DEFINER PARALLEL UNSAFE
SET search_path TO pg_catalog, pg_temp
LANGUAGE c
AS 'MODULE_PATHNAME', 'rotate_log_epoch_wrapper';

CREATE FUNCTION syncular."drop_partition_batch"(
	"partition" TEXT,
	"max_rows" INT DEFAULT 10000
) RETURNS TABLE (
	"rows_deleted" bigint,
	"done" bool
)
VOLATILE SECURITY DEFINER PARALLEL UNSAFE
SET search_path TO pg_catalog, pg_temp
LANGUAGE c
AS 'MODULE_PATHNAME', 'drop_partition_batch_wrapper';

CREATE FUNCTION syncular."partition_stats"(
	"partition" TEXT DEFAULT NULL
) RETURNS TABLE (
	"partition" TEXT,
	"log_epoch" TEXT,
	"epoch_required" bool,
	"last_seen_ms" bigint,
	"max_commit_seq" bigint,
	"horizon_seq" bigint,
	"prune_target" bigint,
	"retained_commits" bigint,
	"log_bytes" bigint,
	"oldest_commit_age_ms" bigint,
	"app_rows" bigint,
	"clients" bigint,
	"active_clients" bigint,
	"laggard_client_id" TEXT,
	"laggard_cursor" bigint,
	"laggard_last_seen_ms" bigint,
	"push_results" bigint
)
VOLATILE SECURITY DEFINER PARALLEL UNSAFE
SET search_path TO pg_catalog, pg_temp
LANGUAGE c
AS 'MODULE_PATHNAME', 'partition_stats_wrapper';

-- The procedures, as sql/lifecycle.sql defines them.
-- Prunes `partition` (NULL: every partition): advances its horizon to what
-- the SSP2 §4.6 floors allow, then deletes the log at or below it, expired
-- push outcomes and expired client records, `batch_rows` at a time.
-- Returns how many partitions, commits, push outcomes and client records.
CREATE PROCEDURE syncular.prune(
  partition text DEFAULT NULL,
  batch_rows integer DEFAULT 10000,
  INOUT partitions integer DEFAULT NULL,
  INOUT commits bigint DEFAULT NULL,
  INOUT push_results bigint DEFAULT NULL,
  INOUT clients bigint DEFAULT NULL)
LANGUAGE plpgsql
AS $syncular_prune$
DECLARE
  names text[];
  p text;
  b record;
  busy integer;
BEGIN
  IF batch_rows IS NULL OR batch_rows < 1 THEN
    RAISE EXCEPTION 'syncular.invalid_argument: argument batch_rows must be at least 1, got %', batch_rows
      USING ERRCODE = '22023';
  END IF;
  partitions := 0; commits := 0; push_results := 0; clients := 0;
  SELECT pg_catalog.array_agg(s.partition ORDER BY s.partition) INTO names
    FROM syncular.sync_partitions s
   WHERE prune.partition IS NULL OR s.partition = prune.partition;
  FOREACH p IN ARRAY COALESCE(names, ARRAY[]::text[]) LOOP
    PERFORM syncular.advance_horizon(p);
    COMMIT;
    busy := 0;
    LOOP
      SELECT * INTO b FROM syncular.prune_batch(p, batch_rows);
      COMMIT;
      commits := commits + b.commits;
      push_results := push_results + b.push_results;
      clients := clients + b.clients;
      EXIT WHEN b.done;
      IF b.fence_busy THEN
        busy := busy + 1;
        IF busy >= 50 THEN
          RAISE WARNING 'syncular.prune: partition % skipped: a transaction has been reading its log for over 10 s', p;
          EXIT;
        END IF;
      ELSE
        busy := 0;
      END IF;
    END LOOP;
    partitions := partitions + 1;
  END LOOP;
END
$syncular_prune$;

-- Deletes every row of `partition` in every app table and sync_* table,
-- `batch_rows` at a time; returns how many rows. Afterwards the partition
-- is unknown (the next request creates it anew, with a fresh log epoch).
CREATE PROCEDURE syncular.drop_partition(
  partition text,
  batch_rows integer DEFAULT 10000,
  INOUT rows_deleted bigint DEFAULT NULL)
LANGUAGE plpgsql
AS $syncular_drop_partition$
DECLARE
  b record;
BEGIN
  rows_deleted := 0;
  LOOP
    SELECT * INTO STRICT b FROM syncular.drop_partition_batch(drop_partition.partition, batch_rows);
    COMMIT;
    rows_deleted := rows_deleted + b.rows_deleted;
    -- Not until a batch deletes nothing: a live gateway's reload may already have created the
    -- partition anew, and deleting it again would notify (and reload) again.
    EXIT WHEN b.done;
  END LOOP;
END
$syncular_drop_partition$;

-- Admin routines: EXECUTE stays with the owner (sql/privileges.sql `admin`).
REVOKE ALL ON FUNCTION syncular.advance_horizon(text) FROM PUBLIC;
REVOKE ALL ON FUNCTION syncular.prune_batch(text, integer) FROM PUBLIC;
REVOKE ALL ON FUNCTION syncular.rotate_log_epoch(text) FROM PUBLIC;
REVOKE ALL ON FUNCTION syncular.drop_partition_batch(text, integer) FROM PUBLIC;
REVOKE ALL ON FUNCTION syncular.partition_stats(text) FROM PUBLIC;
REVOKE ALL ON PROCEDURE syncular.prune(text, integer, integer, bigint, bigint, bigint) FROM PUBLIC;
REVOKE ALL ON PROCEDURE syncular.drop_partition(text, integer, bigint) FROM PUBLIC;

-- Scaling out with Citus (README "Scaling out with Citus"): distribute the sync tables. Admin only.
CREATE FUNCTION syncular."distribute"() RETURNS TABLE (
	"log_tables" INT,
	"reference_tables" INT,
	"app_tables" INT
)
STRICT VOLATILE PARALLEL UNSAFE
SET search_path TO pg_catalog, pg_temp
LANGUAGE c
AS 'MODULE_PATHNAME', 'distribute_wrapper';
REVOKE ALL ON FUNCTION syncular.distribute() FROM PUBLIC;

-- DROP EXTENSION once the tables are Citus tables: drop them (and their shards) first.
CREATE FUNCTION syncular.drop_extension_guard() RETURNS event_trigger
LANGUAGE c AS 'MODULE_PATHNAME', 'syncular_drop_extension_guard_wrapper';
CREATE EVENT TRIGGER syncular_drop_extension ON ddl_command_start
  WHEN TAG IN ('DROP EXTENSION') EXECUTE FUNCTION syncular.drop_extension_guard();
REVOKE ALL ON FUNCTION syncular.drop_extension_guard() FROM PUBLIC;

-- Write validators (SPEC §6.7): one host function per synced table. Admin only.
-- (The table is created at the top.)
CREATE FUNCTION syncular."_set_write_validator_oid"(
	"tbl" TEXT,
	"function" oid
) RETURNS void
VOLATILE
LANGUAGE c
AS 'MODULE_PATHNAME', 'set_write_validator_oid_wrapper';
CREATE FUNCTION syncular.set_write_validator(tbl text, fn pg_catalog.regprocedure) RETURNS void
LANGUAGE sql VOLATILE
AS $$ SELECT syncular._set_write_validator_oid($1, $2::pg_catalog.oid) $$;
COMMENT ON FUNCTION syncular.set_write_validator(text, pg_catalog.regprocedure) IS
  'Registers the write validator (write jsonb) returns jsonb of a synced table (SPEC 6.7); NULL removes it.';
REVOKE ALL ON FUNCTION syncular._set_write_validator_oid(text, oid) FROM PUBLIC;
REVOKE ALL ON FUNCTION syncular.set_write_validator(text, pg_catalog.regprocedure) FROM PUBLIC;

-- The whole-commit validator (SPEC §6.8). Admin only. (The table is created at the top.)
CREATE FUNCTION syncular."_set_commit_validator_oid"(
	"function" oid
) RETURNS void
VOLATILE
LANGUAGE c
AS 'MODULE_PATHNAME', 'set_commit_validator_oid_wrapper';
CREATE FUNCTION syncular.set_commit_validator(fn pg_catalog.regprocedure) RETURNS void
LANGUAGE sql VOLATILE
AS $$ SELECT syncular._set_commit_validator_oid($1::pg_catalog.oid) $$;
COMMENT ON FUNCTION syncular.set_commit_validator(pg_catalog.regprocedure) IS
  'Registers the whole-commit validator (commit jsonb) returns jsonb (SPEC 6.8); NULL removes it.';
REVOKE ALL ON FUNCTION syncular._set_commit_validator_oid(oid) FROM PUBLIC;
REVOKE ALL ON FUNCTION syncular.set_commit_validator(pg_catalog.regprocedure) FROM PUBLIC;

-- issue 13: auth leases (SPEC §7.3). Tables, then the admin-only functions.
CREATE TABLE syncular.sync_auth_leases(
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
  ON syncular.sync_auth_leases(partition, lease_id);
CREATE TABLE syncular.sync_lease_key(
  id INTEGER PRIMARY KEY CHECK (id = 1),
  key BYTEA NOT NULL
);
SELECT pg_catalog.pg_extension_config_dump('syncular.sync_auth_leases', '');
SELECT pg_catalog.pg_extension_config_dump('syncular.sync_lease_key', '');
CREATE FUNCTION syncular."revoke_lease"(
	"partition" TEXT,
	"lease_id" TEXT
) RETURNS bool
VOLATILE SECURITY DEFINER PARALLEL UNSAFE
SET search_path TO pg_catalog, pg_temp
LANGUAGE c
AS 'MODULE_PATHNAME', 'revoke_lease_wrapper';
CREATE FUNCTION syncular."clear_lease_revocation"(
	"partition" TEXT,
	"lease_id" TEXT
) RETURNS bool
VOLATILE SECURITY DEFINER PARALLEL UNSAFE
SET search_path TO pg_catalog, pg_temp
LANGUAGE c
AS 'MODULE_PATHNAME', 'clear_lease_revocation_wrapper';
CREATE FUNCTION syncular."leases"(
	"partition" TEXT
) RETURNS TABLE (
	"client_id" TEXT,
	"lease_id" TEXT,
	"actor_id" TEXT,
	"allowed_scopes" jsonb,
	"issued_at_ms" bigint,
	"expires_at_ms" bigint,
	"revoked_at_ms" bigint,
	"signature_valid" bool
)
STABLE SECURITY DEFINER PARALLEL UNSAFE
SET search_path TO pg_catalog, pg_temp
LANGUAGE c
AS 'MODULE_PATHNAME', 'leases_wrapper';
CREATE FUNCTION syncular."rotate_lease_key"() RETURNS void
STRICT VOLATILE SECURITY DEFINER PARALLEL UNSAFE
SET search_path TO pg_catalog, pg_temp
LANGUAGE c
AS 'MODULE_PATHNAME', 'rotate_lease_key_wrapper';
-- Admin only (sql/privileges.sql `admin`).
REVOKE ALL ON FUNCTION syncular.revoke_lease(text, text) FROM PUBLIC;
REVOKE ALL ON FUNCTION syncular.clear_lease_revocation(text, text) FROM PUBLIC;
REVOKE ALL ON FUNCTION syncular.leases(text) FROM PUBLIC;
REVOKE ALL ON FUNCTION syncular.rotate_lease_key() FROM PUBLIC;

-- issue 13: blobs (SPEC §5.9) — the blob store in the database, per partition (sync_blobs,
-- sync_blob_chunks: 1 MiB chunks stored uncompressed), uploads hashed in the extension, download
-- authorization from the reference index (sync_blob_refs, unchanged), the orphan sweep.
CREATE TABLE syncular.sync_blobs(
  partition TEXT NOT NULL, blob_id TEXT NOT NULL,
  byte_length BIGINT NOT NULL, chunk_count INTEGER NOT NULL,
  uploaded_at_ms BIGINT NOT NULL,
  PRIMARY KEY(partition, blob_id)
);
CREATE INDEX sync_blobs_by_upload ON syncular.sync_blobs(uploaded_at_ms);
CREATE TABLE syncular.sync_blob_chunks(
  partition TEXT NOT NULL, blob_id TEXT NOT NULL, idx INTEGER NOT NULL,
  bytes BYTEA NOT NULL,
  PRIMARY KEY(partition, blob_id, idx)
);
ALTER TABLE syncular.sync_blob_chunks ALTER COLUMN bytes SET STORAGE EXTERNAL;
SELECT pg_catalog.pg_extension_config_dump('syncular.sync_blobs', '');
SELECT pg_catalog.pg_extension_config_dump('syncular.sync_blob_chunks', '');

CREATE FUNCTION syncular."blob_open"(
	"partition" TEXT,
	"actor_id" TEXT,
	"blob_id" TEXT,
	"allowed_scopes" jsonb DEFAULT NULL
) RETURNS jsonb
VOLATILE SECURITY DEFINER PARALLEL UNSAFE
SET search_path TO pg_catalog, pg_temp
LANGUAGE c
AS 'MODULE_PATHNAME', 'blob_open_wrapper';

CREATE FUNCTION syncular."blob_put"(
	"partition" TEXT,
	"blob_id" TEXT,
	"bytes" bytea
) RETURNS jsonb
VOLATILE SECURITY DEFINER PARALLEL UNSAFE
SET search_path TO pg_catalog, pg_temp
LANGUAGE c
AS 'MODULE_PATHNAME', 'blob_put_wrapper';

CREATE FUNCTION syncular."blob_read"(
	"partition" TEXT,
	"actor_id" TEXT,
	"blob_id" TEXT,
	"chunk" INT,
	"allowed_scopes" jsonb DEFAULT NULL
) RETURNS bytea
VOLATILE SECURITY DEFINER PARALLEL UNSAFE
SET search_path TO pg_catalog, pg_temp
LANGUAGE c
AS 'MODULE_PATHNAME', 'blob_read_wrapper';

CREATE FUNCTION syncular."blob_sweep_orphans"(
	"older_than_ms" bigint DEFAULT 86400000,
	"max_rows" INT DEFAULT 1000,
	"partition" TEXT DEFAULT NULL
) RETURNS bigint
VOLATILE SECURITY DEFINER PARALLEL UNSAFE
SET search_path TO pg_catalog, pg_temp
LANGUAGE c
AS 'MODULE_PATHNAME', 'blob_sweep_orphans_wrapper';

CREATE FUNCTION syncular."blob_upload_append"(
	"partition" TEXT,
	"blob_id" TEXT,
	"bytes" bytea
) RETURNS bigint
VOLATILE SECURITY DEFINER PARALLEL UNSAFE
SET search_path TO pg_catalog, pg_temp
LANGUAGE c
AS 'MODULE_PATHNAME', 'blob_upload_append_wrapper';

CREATE FUNCTION syncular."blob_upload_begin"(
	"partition" TEXT,
	"blob_id" TEXT,
	"byte_length" bigint DEFAULT NULL
) RETURNS bool
VOLATILE SECURITY DEFINER PARALLEL UNSAFE
SET search_path TO pg_catalog, pg_temp
LANGUAGE c
AS 'MODULE_PATHNAME', 'blob_upload_begin_wrapper';

CREATE FUNCTION syncular."blob_upload_finish"(
	"partition" TEXT,
	"blob_id" TEXT
) RETURNS jsonb
VOLATILE SECURITY DEFINER PARALLEL UNSAFE
SET search_path TO pg_catalog, pg_temp
LANGUAGE c
AS 'MODULE_PATHNAME', 'blob_upload_finish_wrapper';

CREATE FUNCTION syncular."blob_upload_grant"(
	"partition" TEXT,
	"blob_id" TEXT,
	"byte_length" bigint
) RETURNS jsonb
VOLATILE SECURITY DEFINER PARALLEL UNSAFE
SET search_path TO pg_catalog, pg_temp
LANGUAGE c
AS 'MODULE_PATHNAME', 'blob_upload_grant_wrapper';

REVOKE ALL ON FUNCTION syncular.blob_put(text, text, bytea) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION syncular.blob_put(text, text, bytea) TO syncular_gateway;
REVOKE ALL ON FUNCTION syncular.blob_upload_begin(text, text, bigint) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION syncular.blob_upload_begin(text, text, bigint) TO syncular_gateway;
REVOKE ALL ON FUNCTION syncular.blob_upload_append(text, text, bytea) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION syncular.blob_upload_append(text, text, bytea) TO syncular_gateway;
REVOKE ALL ON FUNCTION syncular.blob_upload_finish(text, text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION syncular.blob_upload_finish(text, text) TO syncular_gateway;
REVOKE ALL ON FUNCTION syncular.blob_upload_grant(text, text, bigint) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION syncular.blob_upload_grant(text, text, bigint) TO syncular_gateway;
REVOKE ALL ON FUNCTION syncular.blob_open(text, text, text, jsonb) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION syncular.blob_open(text, text, text, jsonb) TO syncular_gateway;
REVOKE ALL ON FUNCTION syncular.blob_read(text, text, text, integer, jsonb) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION syncular.blob_read(text, text, text, integer, jsonb) TO syncular_gateway;
-- Admin: EXECUTE stays with the owner.
REVOKE ALL ON FUNCTION syncular.blob_sweep_orphans(bigint, integer, text) FROM PUBLIC;

-- issue 13: durable reactions (SPEC §6.9; README "Durable reactions"). The planner's registration is
-- admin only (its table is created at the top); the worker functions are granted to syncular_gateway;
-- the operator functions (retry_dead_letter_reaction, prune_reactions, list_reactions) are admin only.
CREATE FUNCTION syncular."_set_reaction_planner_oid"(
	"function" oid
) RETURNS void
VOLATILE
LANGUAGE c
AS 'MODULE_PATHNAME', 'set_reaction_planner_oid_wrapper';
CREATE FUNCTION syncular.set_reaction_planner(fn pg_catalog.regprocedure) RETURNS void
LANGUAGE sql VOLATILE
AS $$ SELECT syncular._set_reaction_planner_oid($1::pg_catalog.oid) $$;
COMMENT ON FUNCTION syncular.set_reaction_planner(pg_catalog.regprocedure) IS
  'Registers the reaction planner (commit jsonb) returns jsonb (SPEC 6.9); NULL removes it.';
CREATE FUNCTION syncular."claim_reactions"(
	"partition" TEXT,
	"lease_owner" TEXT,
	"types" TEXT[],
	"max_rows" INT DEFAULT 10,
	"lease_ms" bigint DEFAULT 30000
) RETURNS TABLE (
	"idempotency_key" TEXT,
	"type" TEXT,
	"version" INT,
	"payload" jsonb,
	"source_client_id" TEXT,
	"source_client_commit_id" TEXT,
	"source_commit_seq" bigint,
	"created_at_ms" bigint,
	"available_at_ms" bigint,
	"status" TEXT,
	"attempts" INT,
	"max_attempts" INT,
	"lease_owner" TEXT,
	"lease_expires_at_ms" bigint,
	"completed_at_ms" bigint,
	"last_failure" jsonb
)
VOLATILE SECURITY DEFINER PARALLEL UNSAFE
SET search_path TO pg_catalog, pg_temp
LANGUAGE c
AS 'MODULE_PATHNAME', 'claim_reactions_wrapper';
CREATE FUNCTION syncular."extend_reaction_lease"(
	"partition" TEXT,
	"idempotency_key" TEXT,
	"lease_owner" TEXT,
	"lease_ms" bigint DEFAULT 30000
) RETURNS bigint
VOLATILE SECURITY DEFINER PARALLEL UNSAFE
SET search_path TO pg_catalog, pg_temp
LANGUAGE c
AS 'MODULE_PATHNAME', 'extend_reaction_lease_wrapper';
CREATE FUNCTION syncular."complete_reaction"(
	"partition" TEXT,
	"idempotency_key" TEXT,
	"lease_owner" TEXT
) RETURNS bool
VOLATILE SECURITY DEFINER PARALLEL UNSAFE
SET search_path TO pg_catalog, pg_temp
LANGUAGE c
AS 'MODULE_PATHNAME', 'complete_reaction_wrapper';
CREATE FUNCTION syncular."fail_reaction"(
	"partition" TEXT,
	"idempotency_key" TEXT,
	"lease_owner" TEXT,
	"code" TEXT,
	"details" jsonb DEFAULT NULL,
	"permanent" bool DEFAULT false,
	"initial_backoff_ms" bigint DEFAULT 1000,
	"max_backoff_ms" bigint DEFAULT 300000
) RETURNS TEXT
VOLATILE SECURITY DEFINER PARALLEL UNSAFE
SET search_path TO pg_catalog, pg_temp
LANGUAGE c
AS 'MODULE_PATHNAME', 'fail_reaction_wrapper';
CREATE FUNCTION syncular."retry_dead_letter_reaction"(
	"partition" TEXT,
	"idempotency_key" TEXT
) RETURNS bool
VOLATILE SECURITY DEFINER PARALLEL UNSAFE
SET search_path TO pg_catalog, pg_temp
LANGUAGE c
AS 'MODULE_PATHNAME', 'retry_dead_letter_reaction_wrapper';
CREATE FUNCTION syncular."prune_reactions"(
	"partition" TEXT,
	"completed_retention_ms" bigint DEFAULT 2592000000,
	"dead_letter_retention_ms" bigint DEFAULT 7776000000,
	"max_rows" INT DEFAULT 1000
) RETURNS TABLE (
	"completed" bigint,
	"dead_lettered" bigint,
	"may_have_more" bool
)
VOLATILE SECURITY DEFINER PARALLEL UNSAFE
SET search_path TO pg_catalog, pg_temp
LANGUAGE c
AS 'MODULE_PATHNAME', 'prune_reactions_wrapper';
CREATE FUNCTION syncular."list_reactions"(
	"partition" TEXT,
	"status" TEXT DEFAULT NULL,
	"max_rows" INT DEFAULT 100
) RETURNS TABLE (
	"idempotency_key" TEXT,
	"type" TEXT,
	"version" INT,
	"payload" jsonb,
	"source_client_id" TEXT,
	"source_client_commit_id" TEXT,
	"source_commit_seq" bigint,
	"created_at_ms" bigint,
	"available_at_ms" bigint,
	"status" TEXT,
	"attempts" INT,
	"max_attempts" INT,
	"lease_owner" TEXT,
	"lease_expires_at_ms" bigint,
	"completed_at_ms" bigint,
	"last_failure" jsonb
)
VOLATILE SECURITY DEFINER PARALLEL UNSAFE
SET search_path TO pg_catalog, pg_temp
LANGUAGE c
AS 'MODULE_PATHNAME', 'list_reactions_wrapper';
DO $syncular_privileges$
DECLARE
  fn pg_catalog.regprocedure;
BEGIN
  FOREACH fn IN ARRAY ARRAY[
    'syncular._set_reaction_planner_oid(oid)',
    'syncular.set_reaction_planner(pg_catalog.regprocedure)',
    'syncular.claim_reactions(text,text,text[],integer,bigint)',
    'syncular.extend_reaction_lease(text,text,text,bigint)',
    'syncular.complete_reaction(text,text,text)',
    'syncular.fail_reaction(text,text,text,text,jsonb,boolean,bigint,bigint)',
    'syncular.retry_dead_letter_reaction(text,text)',
    'syncular.prune_reactions(text,bigint,bigint,integer)',
    'syncular.list_reactions(text,text,integer)'
  ]::pg_catalog.regprocedure[]
  LOOP
    EXECUTE pg_catalog.format('REVOKE ALL ON FUNCTION %s FROM PUBLIC', fn);
  END LOOP;
  FOREACH fn IN ARRAY ARRAY[
    'syncular.claim_reactions(text,text,text[],integer,bigint)',
    'syncular.extend_reaction_lease(text,text,text,bigint)',
    'syncular.complete_reaction(text,text,text)',
    'syncular.fail_reaction(text,text,text,text,jsonb,boolean,bigint,bigint)'
  ]::pg_catalog.regprocedure[]
  LOOP
    EXECUTE pg_catalog.format('GRANT EXECUTE ON FUNCTION %s TO syncular_gateway', fn);
  END LOOP;
END
$syncular_privileges$;

-- issue 12: segment storage (SPEC §5.1–§5.5) — tables only; functions follow per seam.
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
CREATE TABLE syncular.sync_segments(
  partition TEXT NOT NULL, segment_id TEXT NOT NULL,
  media_type SMALLINT NOT NULL, byte_length BIGINT NOT NULL,
  chunk_count INTEGER NOT NULL, created_at_ms BIGINT NOT NULL,
  PRIMARY KEY(partition, segment_id)
);
CREATE TABLE syncular.sync_segment_chunks(
  partition TEXT NOT NULL, segment_id TEXT NOT NULL, idx INTEGER NOT NULL,
  bytes BYTEA NOT NULL,
  PRIMARY KEY(partition, segment_id, idx)
);
ALTER TABLE syncular.sync_segment_chunks ALTER COLUMN bytes SET STORAGE EXTERNAL;
CREATE TABLE syncular.sync_segment_publications(
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
  ON syncular.sync_segment_publications(partition, segment_id);
CREATE INDEX sync_segment_publications_by_expiry
  ON syncular.sync_segment_publications(expires_at_ms);
-- Keys that sign §5.4 native segment URLs: the newest row signs, every row
-- verifies (rotation keeps the previous key until its URLs have expired).
-- Readable by the extension owner only.
CREATE TABLE syncular.sync_segment_url_keys(
  key_id BIGINT PRIMARY KEY, key BYTEA NOT NULL, created_at_ms BIGINT NOT NULL
);

-- issue 12: signed segment URLs and segment expiry / GC (SPEC §5.4 native scheme, §5.1, §5.5;
-- README "Signed segment URLs", "Segment expiry and garbage collection"). segment_open_signed is
-- granted to syncular_gateway; rotate_segment_url_key, segment_signed_url and segment_sweep are admin only.
CREATE FUNCTION syncular."segment_open_signed"(
	"segment_id" TEXT,
	"token" TEXT
) RETURNS jsonb
VOLATILE SECURITY DEFINER PARALLEL UNSAFE
SET search_path TO pg_catalog, pg_temp
LANGUAGE c
AS 'MODULE_PATHNAME', 'segment_open_signed_wrapper';

CREATE FUNCTION syncular."rotate_segment_url_key"(
	"drop_previous" bool DEFAULT false
) RETURNS bigint
VOLATILE SECURITY DEFINER PARALLEL UNSAFE
SET search_path TO pg_catalog, pg_temp
LANGUAGE c
AS 'MODULE_PATHNAME', 'rotate_segment_url_key_wrapper';

CREATE FUNCTION syncular."segment_sweep"(
	"max_rows" INT DEFAULT 1000,
	"grace_ms" bigint DEFAULT 3600000
) RETURNS jsonb
VOLATILE SECURITY DEFINER PARALLEL UNSAFE
SET search_path TO pg_catalog, pg_temp
LANGUAGE c
AS 'MODULE_PATHNAME', 'segment_sweep_wrapper';

CREATE FUNCTION syncular."segment_signed_url"(
	"partition" TEXT,
	"segment_id" TEXT,
	"scope_digest" TEXT
) RETURNS jsonb
VOLATILE SECURITY DEFINER PARALLEL UNSAFE
SET search_path TO pg_catalog, pg_temp
LANGUAGE c
AS 'MODULE_PATHNAME', 'segment_signed_url_wrapper';

REVOKE ALL ON FUNCTION syncular.segment_open_signed(text, text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION syncular.segment_open_signed(text, text) TO syncular_gateway;
-- Admin: EXECUTE stays with the owner.
REVOKE ALL ON FUNCTION syncular.rotate_segment_url_key(boolean) FROM PUBLIC;
REVOKE ALL ON FUNCTION syncular.segment_sweep(integer, bigint) FROM PUBLIC;
REVOKE ALL ON FUNCTION syncular.segment_signed_url(text, text, text) FROM PUBLIC;

-- issue 12: stored segments — delivery by reference and the re-authorized download (SPEC §5.5):
-- syncular.segment (whole), syncular.segment_open + syncular.segment_chunk (streamed), gateway-callable.
CREATE FUNCTION syncular."segment"(
	"partition" TEXT,
	"actor_id" TEXT,
	"segment_id" TEXT,
	"requested_scopes" TEXT,
	"allowed_scopes" jsonb DEFAULT NULL
) RETURNS bytea
VOLATILE SECURITY DEFINER PARALLEL UNSAFE
SET search_path TO pg_catalog, pg_temp
LANGUAGE c
AS 'MODULE_PATHNAME', 'segment_wrapper';

CREATE FUNCTION syncular."segment_open"(
	"partition" TEXT,
	"actor_id" TEXT,
	"segment_id" TEXT,
	"requested_scopes" TEXT,
	"allowed_scopes" jsonb DEFAULT NULL
) RETURNS jsonb
VOLATILE SECURITY DEFINER PARALLEL UNSAFE
SET search_path TO pg_catalog, pg_temp
LANGUAGE c
AS 'MODULE_PATHNAME', 'segment_open_wrapper';

CREATE FUNCTION syncular."segment_chunk"(
	"partition" TEXT,
	"segment_id" TEXT,
	"idx" INT
) RETURNS bytea
VOLATILE SECURITY DEFINER PARALLEL UNSAFE
SET search_path TO pg_catalog, pg_temp
LANGUAGE c
AS 'MODULE_PATHNAME', 'segment_chunk_wrapper';

REVOKE ALL ON FUNCTION syncular.segment(text, text, text, text, jsonb) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION syncular.segment(text, text, text, text, jsonb) TO syncular_gateway;
REVOKE ALL ON FUNCTION syncular.segment_open(text, text, text, text, jsonb) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION syncular.segment_open(text, text, text, text, jsonb) TO syncular_gateway;
REVOKE ALL ON FUNCTION syncular.segment_chunk(text, text, integer) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION syncular.segment_chunk(text, text, integer) TO syncular_gateway;

-- issue 12: streaming pull (SPEC §1.4; README "Streaming rounds"): the
-- value-per-call forms of syncular.sync / syncular.pull, for the gateway.
CREATE FUNCTION syncular."sync_stream"(
	"partition" TEXT,
	"actor_id" TEXT,
	"request" bytea,
	"allowed_scopes" jsonb DEFAULT NULL,
	"connection_client_id" TEXT DEFAULT NULL
) RETURNS SETOF bytea
VOLATILE SECURITY DEFINER PARALLEL UNSAFE
SET search_path TO pg_catalog, pg_temp
LANGUAGE c
AS 'MODULE_PATHNAME', 'sync_stream_wrapper';

CREATE FUNCTION syncular."pull_stream"(
	"partition" TEXT,
	"actor_id" TEXT,
	"request" bytea,
	"allowed_scopes" jsonb DEFAULT NULL,
	"connection_client_id" TEXT DEFAULT NULL
) RETURNS SETOF bytea
VOLATILE SECURITY DEFINER PARALLEL UNSAFE
SET search_path TO pg_catalog, pg_temp
LANGUAGE c
AS 'MODULE_PATHNAME', 'pull_stream_wrapper';

REVOKE ALL ON FUNCTION syncular.sync_stream(text, text, bytea, jsonb, text) FROM PUBLIC;
REVOKE ALL ON FUNCTION syncular.pull_stream(text, text, bytea, jsonb, text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION syncular.sync_stream(text, text, bytea, jsonb, text) TO syncular_gateway;
GRANT EXECUTE ON FUNCTION syncular.pull_stream(text, text, bytea, jsonb, text) TO syncular_gateway;
