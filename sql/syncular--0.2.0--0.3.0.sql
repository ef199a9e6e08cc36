-- syncular 0.2.0 → 0.3.0: wire version 3 (syncular-client 0.49.x) beside 1 and 2 — per-column
-- versions on every app table, sparse upserts, column-level conflicts, ROUND_FAILURE reports.
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
