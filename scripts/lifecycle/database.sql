-- database.sql — every user-created object of the current database (and every
-- non-builtin role) as sorted text lines, without OIDs.
--
-- Used by scripts/lifecycle-check for the residue check: the lines taken before
-- CREATE EXTENSION must equal the lines taken after DROP EXTENSION. Objects with
-- OID >= 16384 (FirstNormalObjectId) were created after initdb; TOAST objects are
-- skipped (they follow their table). Also listed: the ACLs of every non-system
-- schema and of the database (a GRANT on a pre-existing object is residue too),
-- per-database role settings, and for each role the number of objects of this
-- database that reference it (pg_shdepend).
WITH fact(line) AS (
    SELECT 'schema ' || pg_catalog.quote_ident(n.nspname) || ' owner=' || pg_catalog.pg_get_userbyid(n.nspowner)
           || ' acl=' || COALESCE(n.nspacl::text, '')
      FROM pg_catalog.pg_namespace n
     WHERE n.nspname NOT IN ('pg_catalog', 'information_schema', 'pg_toast')
       AND n.nspname NOT LIKE 'pg\_temp\_%' AND n.nspname NOT LIKE 'pg\_toast\_temp\_%'
    UNION ALL
    SELECT 'database acl=' || COALESCE(d.datacl::text, '')
      FROM pg_catalog.pg_database d WHERE d.datname = pg_catalog.current_database()
    UNION ALL
    SELECT 'object ' || pg_catalog.pg_describe_object(o.classid, o.objid, 0)
      FROM (
            SELECT 'pg_catalog.pg_class'::pg_catalog.regclass, c.oid FROM pg_catalog.pg_class c
             WHERE c.oid >= 16384 AND c.relnamespace <> 'pg_toast'::pg_catalog.regnamespace
               AND c.relkind <> 't'
            UNION ALL SELECT 'pg_catalog.pg_proc'::pg_catalog.regclass, oid FROM pg_catalog.pg_proc WHERE oid >= 16384
            UNION ALL SELECT 'pg_catalog.pg_type'::pg_catalog.regclass, t.oid FROM pg_catalog.pg_type t
             WHERE t.oid >= 16384 AND t.typnamespace <> 'pg_toast'::pg_catalog.regnamespace
            UNION ALL SELECT 'pg_catalog.pg_namespace'::pg_catalog.regclass, oid FROM pg_catalog.pg_namespace
             WHERE oid >= 16384 AND nspname NOT LIKE 'pg\_temp\_%' AND nspname NOT LIKE 'pg\_toast\_temp\_%'
            UNION ALL SELECT 'pg_catalog.pg_constraint'::pg_catalog.regclass, oid FROM pg_catalog.pg_constraint WHERE oid >= 16384
            UNION ALL SELECT 'pg_catalog.pg_trigger'::pg_catalog.regclass, oid FROM pg_catalog.pg_trigger WHERE oid >= 16384
            UNION ALL SELECT 'pg_catalog.pg_rewrite'::pg_catalog.regclass, oid FROM pg_catalog.pg_rewrite WHERE oid >= 16384
            UNION ALL SELECT 'pg_catalog.pg_attrdef'::pg_catalog.regclass, oid FROM pg_catalog.pg_attrdef WHERE oid >= 16384
            UNION ALL SELECT 'pg_catalog.pg_operator'::pg_catalog.regclass, oid FROM pg_catalog.pg_operator WHERE oid >= 16384
            UNION ALL SELECT 'pg_catalog.pg_opclass'::pg_catalog.regclass, oid FROM pg_catalog.pg_opclass WHERE oid >= 16384
            UNION ALL SELECT 'pg_catalog.pg_opfamily'::pg_catalog.regclass, oid FROM pg_catalog.pg_opfamily WHERE oid >= 16384
            UNION ALL SELECT 'pg_catalog.pg_cast'::pg_catalog.regclass, oid FROM pg_catalog.pg_cast WHERE oid >= 16384
            UNION ALL SELECT 'pg_catalog.pg_conversion'::pg_catalog.regclass, oid FROM pg_catalog.pg_conversion WHERE oid >= 16384
            UNION ALL SELECT 'pg_catalog.pg_collation'::pg_catalog.regclass, oid FROM pg_catalog.pg_collation WHERE oid >= 16384
            UNION ALL SELECT 'pg_catalog.pg_language'::pg_catalog.regclass, oid FROM pg_catalog.pg_language WHERE oid >= 16384
            UNION ALL SELECT 'pg_catalog.pg_am'::pg_catalog.regclass, oid FROM pg_catalog.pg_am WHERE oid >= 16384
            UNION ALL SELECT 'pg_catalog.pg_event_trigger'::pg_catalog.regclass, oid FROM pg_catalog.pg_event_trigger WHERE oid >= 16384
            UNION ALL SELECT 'pg_catalog.pg_policy'::pg_catalog.regclass, oid FROM pg_catalog.pg_policy WHERE oid >= 16384
            UNION ALL SELECT 'pg_catalog.pg_publication'::pg_catalog.regclass, oid FROM pg_catalog.pg_publication WHERE oid >= 16384
            UNION ALL SELECT 'pg_catalog.pg_statistic_ext'::pg_catalog.regclass, oid FROM pg_catalog.pg_statistic_ext WHERE oid >= 16384
            UNION ALL SELECT 'pg_catalog.pg_ts_config'::pg_catalog.regclass, oid FROM pg_catalog.pg_ts_config WHERE oid >= 16384
            UNION ALL SELECT 'pg_catalog.pg_ts_dict'::pg_catalog.regclass, oid FROM pg_catalog.pg_ts_dict WHERE oid >= 16384
            UNION ALL SELECT 'pg_catalog.pg_ts_parser'::pg_catalog.regclass, oid FROM pg_catalog.pg_ts_parser WHERE oid >= 16384
            UNION ALL SELECT 'pg_catalog.pg_ts_template'::pg_catalog.regclass, oid FROM pg_catalog.pg_ts_template WHERE oid >= 16384
            UNION ALL SELECT 'pg_catalog.pg_foreign_data_wrapper'::pg_catalog.regclass, oid FROM pg_catalog.pg_foreign_data_wrapper WHERE oid >= 16384
            UNION ALL SELECT 'pg_catalog.pg_foreign_server'::pg_catalog.regclass, oid FROM pg_catalog.pg_foreign_server WHERE oid >= 16384
            UNION ALL SELECT 'pg_catalog.pg_user_mapping'::pg_catalog.regclass, oid FROM pg_catalog.pg_user_mapping WHERE oid >= 16384
            UNION ALL SELECT 'pg_catalog.pg_default_acl'::pg_catalog.regclass, oid FROM pg_catalog.pg_default_acl WHERE oid >= 16384
            UNION ALL SELECT 'pg_catalog.pg_extension'::pg_catalog.regclass, oid FROM pg_catalog.pg_extension WHERE oid >= 16384
            UNION ALL SELECT 'pg_catalog.pg_transform'::pg_catalog.regclass, oid FROM pg_catalog.pg_transform WHERE oid >= 16384
           ) AS o(classid, objid)
    UNION ALL
    SELECT 'column ' || a.attrelid::pg_catalog.regclass::text || ' ' || pg_catalog.quote_ident(a.attname)
           || ' ' || pg_catalog.format_type(a.atttypid, a.atttypmod)
      FROM pg_catalog.pg_attribute a JOIN pg_catalog.pg_class c ON c.oid = a.attrelid
     WHERE c.oid >= 16384 AND c.relkind <> 't' AND a.attnum > 0 AND NOT a.attisdropped
       AND c.relnamespace <> 'pg_toast'::pg_catalog.regnamespace
    UNION ALL
    SELECT 'role ' || pg_catalog.quote_ident(r.rolname) || ' super=' || r.rolsuper || ' login=' || r.rolcanlogin
           || ' inherit=' || r.rolinherit || ' createrole=' || r.rolcreaterole || ' createdb=' || r.rolcreatedb
           || ' replication=' || r.rolreplication || ' bypassrls=' || r.rolbypassrls
           || ' member_of=' || COALESCE((SELECT pg_catalog.string_agg(g.rolname, ',' ORDER BY g.rolname)
                                           FROM pg_catalog.pg_auth_members am
                                           JOIN pg_catalog.pg_roles g ON g.oid = am.roleid
                                          WHERE am.member = r.oid), '')
           || ' referenced_here=' || (SELECT pg_catalog.count(*) FROM pg_catalog.pg_shdepend s
                                       JOIN pg_catalog.pg_database d ON d.oid = s.dbid
                                      WHERE s.refclassid = 'pg_catalog.pg_authid'::pg_catalog.regclass
                                        AND s.refobjid = r.oid AND d.datname = pg_catalog.current_database())
      FROM pg_catalog.pg_roles r WHERE r.oid >= 16384
    UNION ALL
    SELECT 'role_setting role=' || COALESCE(pg_catalog.pg_get_userbyid(s.setrole), '') || ' ' || s.setconfig::text
      FROM pg_catalog.pg_db_role_setting s
      JOIN pg_catalog.pg_database d ON d.oid = s.setdatabase
     WHERE d.datname = pg_catalog.current_database()
)
SELECT line FROM fact ORDER BY line COLLATE "C";
