-- members.sql — the catalog of extension `syncular` as sorted text lines, one fact per line.
--
-- Used by scripts/lifecycle-check to compare two installs (CREATE after DROP, or
-- ALTER EXTENSION UPDATE against a fresh CREATE). No OIDs appear, so installs in
-- different databases compare with a plain diff. Covers: the extension row and its
-- pg_dump config tables, every member object (pg_describe_object), relations with
-- columns (position among live columns, type, nullability, default, identity,
-- generation, collation, ACL), indexes, constraints, triggers, policies, views,
-- sequences, functions (signature, result, language, volatility, strictness,
-- security, parallel safety, cost, config, argument defaults, body hash, ACL),
-- types (enum labels, composite attributes, domain constraints) and the
-- extension's schema with its ACL.
WITH ext AS (
    SELECT e.oid, e.extname, e.extversion, e.extrelocatable, e.extnamespace, e.extconfig, e.extcondition
      FROM pg_catalog.pg_extension e
     WHERE e.extname = 'syncular'
), member AS (
    SELECT d.classid, d.objid
      FROM pg_catalog.pg_depend d JOIN ext ON d.refobjid = ext.oid
     WHERE d.refclassid = 'pg_catalog.pg_extension'::pg_catalog.regclass AND d.deptype = 'e'
), rel AS (
    SELECT c.* FROM pg_catalog.pg_class c
      JOIN member m ON m.classid = 'pg_catalog.pg_class'::pg_catalog.regclass AND m.objid = c.oid
), fn AS (
    SELECT p.* FROM pg_catalog.pg_proc p
      JOIN member m ON m.classid = 'pg_catalog.pg_proc'::pg_catalog.regclass AND m.objid = p.oid
), typ AS (
    SELECT t.* FROM pg_catalog.pg_type t
      JOIN member m ON m.classid = 'pg_catalog.pg_type'::pg_catalog.regclass AND m.objid = t.oid
), fact(line) AS (
    SELECT 'extension ' || extname || ' version=' || extversion || ' relocatable=' || extrelocatable
           || ' schema=' || extnamespace::pg_catalog.regnamespace::text
      FROM ext
    UNION ALL
    SELECT 'schema ' || pg_catalog.quote_ident(n.nspname) || ' owner=' || pg_catalog.pg_get_userbyid(n.nspowner)
           || ' acl=' || COALESCE(n.nspacl::text, '')
      FROM pg_catalog.pg_namespace n JOIN ext ON n.oid = ext.extnamespace
    UNION ALL
    SELECT 'config_dump ' || u.tbl::pg_catalog.regclass::text || ' condition=' || COALESCE(u.cond, '')
      FROM ext, LATERAL unnest(ext.extconfig, ext.extcondition) AS u(tbl, cond)
    UNION ALL
    SELECT 'member ' || pg_catalog.pg_describe_object(m.classid, m.objid, 0) FROM member m
    UNION ALL
    SELECT 'relation ' || c.oid::pg_catalog.regclass::text || ' kind=' || c.relkind::text
           || ' persistence=' || c.relpersistence::text || ' rls=' || c.relrowsecurity || '/' || c.relforcerowsecurity
           || ' options=' || COALESCE(c.reloptions::text, '') || ' owner=' || pg_catalog.pg_get_userbyid(c.relowner)
           || ' acl=' || COALESCE(c.relacl::text, '')
      FROM rel c
    UNION ALL
    SELECT 'column ' || a.attrelid::pg_catalog.regclass::text
           || ' #' || pg_catalog.row_number() OVER (PARTITION BY a.attrelid ORDER BY a.attnum)
           || ' ' || pg_catalog.quote_ident(a.attname) || ' ' || pg_catalog.format_type(a.atttypid, a.atttypmod)
           || CASE WHEN a.attnotnull THEN ' not null' ELSE '' END
           || COALESCE(' default ' || pg_catalog.pg_get_expr(ad.adbin, ad.adrelid), '')
           || ' identity=' || a.attidentity::text || ' generated=' || a.attgenerated::text
           || COALESCE(' collate ' || co.collname, '') || ' acl=' || COALESCE(a.attacl::text, '')
      FROM pg_catalog.pg_attribute a
      JOIN rel c ON c.oid = a.attrelid
      JOIN pg_catalog.pg_type at ON at.oid = a.atttypid
      LEFT JOIN pg_catalog.pg_attrdef ad ON ad.adrelid = a.attrelid AND ad.adnum = a.attnum
      LEFT JOIN pg_catalog.pg_collation co ON co.oid = a.attcollation AND a.attcollation <> at.typcollation
     WHERE a.attnum > 0 AND NOT a.attisdropped
    UNION ALL
    SELECT 'index ' || pg_catalog.pg_get_indexdef(i.indexrelid)
      FROM pg_catalog.pg_index i JOIN rel c ON c.oid = i.indrelid
    UNION ALL
    SELECT 'constraint ' || con.conrelid::pg_catalog.regclass::text || ' ' || pg_catalog.quote_ident(con.conname)
           || ' ' || pg_catalog.pg_get_constraintdef(con.oid)
      FROM pg_catalog.pg_constraint con JOIN rel c ON c.oid = con.conrelid
    UNION ALL
    SELECT 'trigger ' || pg_catalog.pg_get_triggerdef(t.oid)
      FROM pg_catalog.pg_trigger t JOIN rel c ON c.oid = t.tgrelid
     WHERE NOT t.tgisinternal
    UNION ALL
    SELECT 'policy ' || p.polrelid::pg_catalog.regclass::text || ' ' || pg_catalog.quote_ident(p.polname)
           || ' cmd=' || p.polcmd::text || ' permissive=' || p.polpermissive
           || ' roles=' || p.polroles::pg_catalog.regrole[]::text
           || ' using=' || COALESCE(pg_catalog.pg_get_expr(p.polqual, p.polrelid), '')
           || ' check=' || COALESCE(pg_catalog.pg_get_expr(p.polwithcheck, p.polrelid), '')
      FROM pg_catalog.pg_policy p JOIN rel c ON c.oid = p.polrelid
    UNION ALL
    SELECT 'view ' || c.oid::pg_catalog.regclass::text || ' ' || pg_catalog.pg_get_viewdef(c.oid)
      FROM rel c WHERE c.relkind IN ('v', 'm')
    UNION ALL
    SELECT 'sequence ' || s.seqrelid::pg_catalog.regclass::text || ' type=' || pg_catalog.format_type(s.seqtypid, NULL)
           || ' start=' || s.seqstart || ' increment=' || s.seqincrement || ' min=' || s.seqmin
           || ' max=' || s.seqmax || ' cache=' || s.seqcache || ' cycle=' || s.seqcycle
      FROM pg_catalog.pg_sequence s JOIN rel c ON c.oid = s.seqrelid
    UNION ALL
    SELECT 'function ' || p.oid::pg_catalog.regprocedure::text
           || ' args=(' || pg_catalog.pg_get_function_arguments(p.oid) || ')'
           || ' returns=' || COALESCE(pg_catalog.pg_get_function_result(p.oid), '')
           || ' kind=' || p.prokind::text || ' language=' || l.lanname || ' volatility=' || p.provolatile::text
           || ' strict=' || p.proisstrict || ' security_definer=' || p.prosecdef || ' leakproof=' || p.proleakproof
           || ' parallel=' || p.proparallel::text || ' cost=' || p.procost || ' rows=' || p.prorows
           || ' config=' || COALESCE(p.proconfig::text, '')
           || ' body=' || CASE WHEN l.lanname IN ('c', 'internal') THEN p.prosrc ELSE pg_catalog.md5(p.prosrc) END
           || ' library=' || COALESCE(p.probin, '') || ' owner=' || pg_catalog.pg_get_userbyid(p.proowner)
           || ' acl=' || COALESCE(p.proacl::text, '')
      FROM fn p JOIN pg_catalog.pg_language l ON l.oid = p.prolang
    UNION ALL
    SELECT 'type ' || pg_catalog.format_type(t.oid, NULL) || ' typtype=' || t.typtype::text
           || ' base=' || COALESCE(pg_catalog.format_type(NULLIF(t.typbasetype, 0), NULL), '')
           || ' not_null=' || t.typnotnull || ' default=' || COALESCE(t.typdefault, '')
           || ' owner=' || pg_catalog.pg_get_userbyid(t.typowner) || ' acl=' || COALESCE(t.typacl::text, '')
      FROM typ t
    UNION ALL
    SELECT 'enum ' || pg_catalog.format_type(e.enumtypid, NULL)
           || ' #' || pg_catalog.row_number() OVER (PARTITION BY e.enumtypid ORDER BY e.enumsortorder)
           || ' ' || e.enumlabel
      FROM pg_catalog.pg_enum e JOIN typ t ON t.oid = e.enumtypid
    UNION ALL
    SELECT 'attribute ' || pg_catalog.format_type(t.oid, NULL)
           || ' #' || pg_catalog.row_number() OVER (PARTITION BY a.attrelid ORDER BY a.attnum)
           || ' ' || pg_catalog.quote_ident(a.attname) || ' ' || pg_catalog.format_type(a.atttypid, a.atttypmod)
      FROM typ t JOIN pg_catalog.pg_attribute a ON a.attrelid = t.typrelid
     WHERE t.typrelid <> 0 AND a.attnum > 0 AND NOT a.attisdropped
    UNION ALL
    SELECT 'domain_constraint ' || pg_catalog.format_type(t.oid, NULL) || ' ' || pg_catalog.quote_ident(con.conname)
           || ' ' || pg_catalog.pg_get_constraintdef(con.oid)
      FROM typ t JOIN pg_catalog.pg_constraint con ON con.contypid = t.oid
)
SELECT line FROM fact ORDER BY line COLLATE "C";
