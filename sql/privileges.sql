-- syncular: privileges (runs last in the install script: `finalize`).
--
-- Procedures (sql/lifecycle.sql) are routines too: `ON ROUTINE` covers both.
-- Whoever can call the sync functions can claim any actor and any allowed
-- scopes, so EXECUTE is revoked from PUBLIC on EVERY function of schema
-- syncular and granted back only to the role `syncular_gateway` — except the
-- administrative functions listed in `admin` below, which stay with the
-- extension owner and superusers.
--
-- `syncular_gateway` is created (NOLOGIN) when missing. Roles are
-- cluster-wide: DROP EXTENSION does not drop it, and a second database reuses
-- it. Grant it to the login role your gateway uses:
--   GRANT syncular_gateway TO my_gateway_login;
--
-- Upgrade scripts (sql/syncular--A--B.sql) that add functions must repeat the
-- REVOKE/GRANT for them (CI diffs privileges of a fresh install vs upgrade).
DO $syncular_privileges$
DECLARE
  admin CONSTANT text[] := ARRAY[
    'register_schema',
    'set_scope_resolver',
    '_set_scope_resolver_oid',
    'set_write_validator',
    '_set_write_validator_oid',
    'set_commit_validator',
    '_set_commit_validator_oid',
    'set_reaction_planner',
    '_set_reaction_planner_oid',
    'retry_dead_letter_reaction',
    'prune_reactions',
    'list_reactions',
    'install_capture_triggers',
    'capture_statement_start',
    'capture_row',
    'capture_statement',
    'capture_truncate',
    'advance_horizon',
    'prune_batch',
    'prune',
    'rotate_log_epoch',
    'drop_partition_batch',
    'drop_partition',
    'partition_stats',
    'distribute',
    'drop_extension_guard',
    'revoke_lease',
    'clear_lease_revocation',
    'leases',
    'round_failures',
    'rotate_lease_key',
    'blob_sweep_orphans',
    'rotate_segment_url_key',
    'segment_sweep',
    'segment_signed_url'
  ];
  fn record;
BEGIN
  IF NOT EXISTS (SELECT 1 FROM pg_catalog.pg_roles WHERE rolname = 'syncular_gateway') THEN
    CREATE ROLE syncular_gateway NOLOGIN;
  END IF;
  EXECUTE 'GRANT USAGE ON SCHEMA syncular TO syncular_gateway';
  FOR fn IN
    SELECT p.oid::pg_catalog.regprocedure AS sig, p.proname
      FROM pg_catalog.pg_proc p
     WHERE p.pronamespace = 'syncular'::pg_catalog.regnamespace
  LOOP
    EXECUTE pg_catalog.format('REVOKE ALL ON ROUTINE %s FROM PUBLIC', fn.sig);
    IF NOT (fn.proname = ANY (admin)) THEN
      EXECUTE pg_catalog.format('GRANT EXECUTE ON ROUTINE %s TO syncular_gateway', fn.sig);
    END IF;
  END LOOP;
END
$syncular_privileges$;
