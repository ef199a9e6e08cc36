// Every SQL statement of the gateway: one sync round in ONE transaction (persist before
// acknowledging: the bytes once COMMIT returned), and the realtime
// calls realtime_open / realtime_deltas / realtime_ack / error_response. Values are always bound.
import { Pool, PoolConfig } from 'pg';
import { fromPg, withRetry } from './errors';
import { requestShape } from './framing';

/** node-postgres settings from a libpq `key=value` string or a postgres:// URL. */
export function pgConfig(url: string, applicationName: string): PoolConfig {
  if (/^postgres(ql)?:\/\//.test(url)) return { connectionString: url, application_name: applicationName, connectionTimeoutMillis: 10_000 };
  const out: Record<string, unknown> = { application_name: applicationName, connectionTimeoutMillis: 10_000 };
  for (const [, key, , quoted, plain] of url.matchAll(/(\w+)\s*=\s*('((?:[^'\\]|\\.)*)'|(\S*))/g)) {
    const value = quoted !== undefined ? quoted.replace(/\\(.)/g, '$1') : plain;
    if (key === 'connect_timeout') out.connectionTimeoutMillis = Number(value) * 1000;
    else if (key !== 'application_name') out[key === 'dbname' ? 'database' : key] = value;
  }
  return out;
}

export interface RoundArgs { partition: string; actorId: string; request: Buffer; allowedScopes: unknown | null; clientId?: string }
const json = (v: unknown) => (v == null ? null : JSON.stringify(v));

/** One SSP2 round in one transaction, the bytes once COMMIT returned: `sync` with pushes and a pull
 *  (or frames that do not scan: it answers their error), `push` without a pull, `pull` without pushes
 *  (bookkeeping writes only: synchronous_commit off). The response is buffered whole. */
export function runRound(pool: Pool, a: RoundArgs): Promise<Buffer> {
  const shape = requestShape(a.request), fn = !shape || (shape.push && shape.pull) ? 'sync' : shape.push ? 'push' : 'pull';
  const params = [a.partition, a.actorId, a.request, json(a.allowedScopes), ...(a.clientId === undefined ? [] : [a.clientId])];
  const sql = `SELECT syncular.${fn}($1::text, $2::text, $3::bytea, $4::jsonb${a.clientId === undefined ? '' : ', $5::text'}) AS r`;
  return withRetry(async () => {
    const c = await pool.connect();
    let broken = false;
    try {
      await c.query(fn === 'pull' ? 'BEGIN; SET LOCAL synchronous_commit TO off' : 'BEGIN');
      const bytes: Buffer = (await c.query(sql, params)).rows[0].r;
      await c.query('COMMIT');
      return bytes;
    } catch (e) {
      await c.query('ROLLBACK').catch(() => { broken = true; });
      throw fromPg(e);
    } finally { c.release(broken); }
  });
}

const one = async (pool: Pool, sql: string, params: unknown[]) => (await withRetry(() => pool.query(sql, params))).rows;

export interface Opened { sessionId: string; cursor: number; latestCursor: number; requiresSync: boolean; wireVersion: number; logEpoch: string;
  schemaVersion: number; registrations: unknown[]; scopeKeys: string[]; leaseExpiresAtMs?: number }
export interface DeltaRow { group_index: number; kind: string; cursor: string; delta: Buffer | null }

export const realtimeOpen = async (pool: Pool, partition: string, actor: string, clientId: string, scopes: unknown | null): Promise<Opened> =>
  (await one(pool, 'SELECT syncular.realtime_open($1::text, $2::text, $3::text, $4::jsonb) AS o', [partition, actor, clientId, json(scopes)]))[0].o;
export const realtimeDeltas = (pool: Pool, partition: string, groups: string, maxDeltaBytes: number, through: number): Promise<DeltaRow[]> =>
  one(pool, 'SELECT group_index, kind, cursor, delta FROM syncular.realtime_deltas($1::text, $2::jsonb, $3::integer, $4::bigint)',
    [partition, groups, maxDeltaBytes, through]);
export const realtimeAck = async (pool: Pool, partition: string, acks: object[]): Promise<number> =>
  (await one(pool, 'SELECT syncular.realtime_ack($1::text, $2::jsonb) AS n', [partition, JSON.stringify(acks)]))[0].n;
export const errorResponse = async (pool: Pool, partition: string, wire: number, error: object): Promise<Buffer> =>
  (await one(pool, 'SELECT syncular.error_response($1::text, $2::integer, $3::jsonb) AS b', [partition, wire, JSON.stringify(error)]))[0].b;
