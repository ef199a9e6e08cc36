// GET {mount}/segments/{id} (SSP2 §5.4, §5.5, §5.8), as the reference gateway: the direct endpoint (host auth
// and X-Syncular-Scopes; syncular.segment_open re-authorizes every download) or a signed URL (?st=: the whole
// grant, no host auth read; syncular.segment_open_signed). The chunks follow from syncular.segment_chunk, one
// pool query each, read as the client drains them. 304 for the ETag, after authorization; gzip on the direct
// endpoint when asked, a signed URL's bytes verbatim and cacheable for the URL's lifetime.
import type { IncomingMessage, ServerResponse } from 'http';
import { Readable } from 'stream';
import { pipeline } from 'stream/promises';
import { createGzip } from 'zlib';
import type { Pool } from 'pg';
import type { Authenticate } from './auth';
import { apiError, withRetry } from './errors';

type Meta = { segmentId: string; byteLength: number; chunkCount: number; partition?: string; urlExpiresAtMs?: number };
const open = async (pool: Pool, sql: string, params: unknown[]): Promise<Meta> => (await withRetry(() => pool.query(sql, params))).rows[0].m;

export async function serveSegment(pool: Pool, auth: Authenticate, req: IncomingMessage, res: ServerResponse, id: string, token: string | null) {
  let meta: Meta, partition: string;
  if (token !== null) {
    meta = await open(pool, 'SELECT syncular.segment_open_signed($1::text, $2::text) AS m', [id, token]);
    partition = meta.partition ?? '';
  } else {
    const who = await auth(req.headers), scopes = req.headers['x-syncular-scopes'];
    if (typeof scopes !== 'string') throw apiError('sync.forbidden', "a segment download needs X-Syncular-Scopes: the canonical JSON of the subscription's requested scopes (§5.5)");
    meta = await open(pool, 'SELECT syncular.segment_open($1::text, $2::text, $3::text, $4::text, $5::jsonb) AS m',
      [who.partition, who.actorId, id, Buffer.from(scopes, 'latin1').toString('utf8'), who.allowedScopes == null ? null : JSON.stringify(who.allowedScopes)]);
    partition = who.partition;
  }
  const etag = `"${meta.segmentId}"`, zip = token === null && /\bgzip\b/.test(String(req.headers['accept-encoding'] ?? ''));
  const headers: Record<string, string> = { etag, 'cache-control': token === null ? 'private, max-age=0'
    : meta.urlExpiresAtMs ? `public, max-age=${Math.max(0, Math.floor((meta.urlExpiresAtMs - Date.now()) / 1000))}, immutable` : 'no-store' };
  if (token === null) headers.vary = 'Authorization, X-Syncular-Scopes, Accept-Encoding';
  if (String(req.headers['if-none-match'] ?? '').split(',').some(t => ['*', etag, `W/${etag}`].includes(t.trim()))) return void res.writeHead(304, headers).end();
  res.writeHead(200, { ...headers, 'content-type': 'application/octet-stream', ...(zip ? { 'content-encoding': 'gzip' } : { 'content-length': String(meta.byteLength) }) });
  const chunks = Readable.from((async function* () {
    for (let idx = 0; idx < meta.chunkCount; idx++) {
      yield (await pool.query('SELECT syncular.segment_chunk($1::text, $2::text, $3::integer) AS c', [partition, meta.segmentId, idx])).rows[0].c;
    }
  })());
  await (zip ? pipeline(chunks, createGzip(), res) : pipeline(chunks, res)).catch(() => res.destroy()); // a failed chunk ends the body early
}
