// Every SQL statement of the gateway: one sync round in ONE statement (persist before
// acknowledging: the bytes once its COMMIT returned), the segment downloads, and the realtime calls — the
// session rules realtime_connect / realtime_reload / realtime_pass, realtime_ack, error_response. Values are always
// bound; session states travel as the JSON text Postgres prints (`::text` out, `$n::text::jsonb` in).
import { Pool, PoolConfig } from 'pg';
import { fromPg, withRetry } from './errors';

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

/** One SSP2 round: ONE statement in its own implicit transaction, so the bytes arrive once its COMMIT
 *  did (durably with pushes, asynchronously without: syncular.gateway_round decides). Buffered whole. */
export const runRound = (pool: Pool, a: RoundArgs): Promise<Buffer> => withRetry(async () => (await pool.query(
  'SELECT syncular.gateway_round($1::text, $2::text, $3::bytea, $4::jsonb, $5::text) AS r',
  [a.partition, a.actorId, a.request, json(a.allowedScopes), a.clientId ?? null])).rows[0].r);

const rows = async (pool: Pool, sql: string, params: unknown[]) => (await withRetry(() => pool.query(sql, params))).rows;

/** A resume rule: once the client's highest ack is ≥ cursor, keep `state`. States are opaque JSON texts. */
export type Resume = { cursor: number; state: string } | null;
export interface Connected { state: string; resume: Resume; hello: string; sessionId: string; scopeKeys: string[]; latestCursor: number;
  logEpoch: string; leaseExpiresAtMs?: number }
export interface Reloaded { state: string; resume: Resume; send: string[]; scopeKeys: string[]; latestCursor: number; logEpoch: string;
  changed: boolean; emptied: boolean }
export interface PassRow { index: number; state: string; message: Buffer | null; control: string | null; resume: Resume;
  overflow: { state: string; control: string; resume: Resume } | null }

// Each state as the text Postgres prints for it (jsonb::text), carried as a JSON string.
const resume = (r: string) => `CASE WHEN jsonb_typeof(${r}) = 'object' THEN jsonb_build_object('cursor', ${r}->'cursor', 'state', (${r}->'state')::text) END`;
const answer = async <T>(pool: Pool, call: string, params: unknown[]): Promise<T> => (await rows(pool,
  `SELECT a || jsonb_build_object('state', (a->'state')::text, 'resume', ${resume("a->'resume'")}) AS a FROM ${call} a`, params))[0].a;
export const realtimeConnect = (pool: Pool, partition: string, actor: string, clientId: string, scopes: unknown | null) =>
  answer<Connected>(pool, 'syncular.realtime_connect($1::text, $2::text, $3::text, $4::jsonb)', [partition, actor, clientId, json(scopes)]);
export const realtimeReload = (pool: Pool, partition: string, actor: string, clientId: string, scopes: unknown | null, state: string,
  reason: string, wire?: number) => answer<Reloaded>(pool,
  'syncular.realtime_reload($1::text, $2::text, $3::text, $4::jsonb, $5::text::jsonb, $6::text, $7::integer)',
  [partition, actor, clientId, json(scopes), state, reason, wire ?? null]);
export const realtimePass = (pool: Pool, partition: string, states: string, inRound: boolean[], maxDeltaBytes: number, through: number): Promise<PassRow[]> =>
  rows(pool, `SELECT state_index AS index, state::text AS state, message, control, ${resume('resume')} AS resume,
      CASE WHEN overflow IS NOT NULL THEN jsonb_build_object('state', (overflow->'state')::text, 'control', overflow->'control',
        'resume', ${resume("overflow->'resume'")}) END AS overflow
    FROM syncular.realtime_pass($1::text, $2::text::jsonb, $3::integer, $4::bigint, $5::boolean[])`, [partition, states, maxDeltaBytes, through, inRound]);
export const realtimeAck = async (pool: Pool, partition: string, acks: object[]): Promise<number> =>
  (await rows(pool, 'SELECT syncular.realtime_ack($1::text, $2::jsonb) AS n', [partition, JSON.stringify(acks)]))[0].n;
export const errorResponse = async (pool: Pool, partition: string, wire: number, error: object): Promise<Buffer> =>
  (await rows(pool, 'SELECT syncular.error_response($1::text, $2::integer, $3::jsonb) AS b', [partition, wire, JSON.stringify(error)]))[0].b;

/** A segment download (§5.4, §5.5): opened by host auth + scopes header, or by a signed URL's token (which names the partition). */
export type SegmentMeta = { segmentId: string; byteLength: number; chunkCount: number; partition?: string; urlExpiresAtMs?: number };
export const segmentOpen = async (pool: Pool, partition: string, actor: string, id: string, scopes: string, allowed: unknown | null): Promise<SegmentMeta> =>
  (await rows(pool, 'SELECT syncular.segment_open($1::text, $2::text, $3::text, $4::text, $5::jsonb) AS m', [partition, actor, id, scopes, json(allowed)]))[0].m;
export const segmentOpenSigned = async (pool: Pool, id: string, token: string): Promise<SegmentMeta> =>
  (await rows(pool, 'SELECT syncular.segment_open_signed($1::text, $2::text) AS m', [id, token]))[0].m;
export const segmentChunk = async (pool: Pool, partition: string, id: string, idx: number): Promise<Buffer> =>
  (await pool.query('SELECT syncular.segment_chunk($1::text, $2::text, $3::integer) AS c', [partition, id, idx])).rows[0].c;
