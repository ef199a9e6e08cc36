-- syncular 0.1.0 → 0.2.0: realtime in SQL (SPEC §8), §10.1 JSON in every
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
