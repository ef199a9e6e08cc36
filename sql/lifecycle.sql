-- syncular: the lifecycle procedures (docs/src/sql/lifecycle.md). They
-- loop over the bounded batch functions of src/api/lifecycle.rs and COMMIT
-- after every batch, so a concurrent push or pull never waits for more than
-- one batch. A procedure that commits must be CALLed outside a transaction
-- block, and can be neither SECURITY DEFINER nor carry a SET clause: these
-- are SECURITY INVOKER (the batch functions they call are the privileged
-- part) and name every object with its schema.

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
