// GET {mount}/segments/{id} (SSP2 §5.4, §5.5, §5.8), as the reference gateway: the direct endpoint (host auth
// and X-Syncular-Scopes; syncular.segment_open re-authorizes every download) or a signed URL (?st=: the whole
// grant, no host auth read). The chunks follow, one syncular.segment_chunk call each, read as the client drains
// them. 304 for the ETag, after authorization; gzip on the direct endpoint when asked, a signed URL's bytes
// verbatim and cacheable for the URL's lifetime.
import type { IncomingMessage, ServerResponse } from 'http';
import { pipeline } from 'stream/promises';
import { createGzip } from 'zlib';
import type { Pool } from 'pg';
import { header, type Authenticate } from './auth';
import { SegmentMeta, segmentChunk, segmentOpen, segmentOpenSigned } from './db';
import { apiError } from './errors';

/** `rawId`: the path segment, still percent-encoded. */
export async function serveSegment(pool: Pool, auth: Authenticate, req: IncomingMessage, res: ServerResponse, rawId: string, token: string | null) {
  const id = (() => { try { return decodeURIComponent(rawId); } catch { throw apiError('sync.not_found', 'no such segment'); } })();
  let meta: SegmentMeta, partition: string;
  if (token !== null) partition = (meta = await segmentOpenSigned(pool, id, token)).partition ?? '';
  else {
    const who = await auth(req.headers), scopes = header(req.headers, 'x-syncular-scopes');
    if (typeof scopes !== 'string') throw apiError('sync.forbidden', "a segment download needs X-Syncular-Scopes (UTF-8): the canonical JSON of the subscription's requested scopes (§5.5)");
    meta = await segmentOpen(pool, partition = who.partition, who.actorId, id, scopes, who.allowedScopes);
  }
  const etag = `"${meta.segmentId}"`, zip = token === null && /\bgzip\b/.test(String(req.headers['accept-encoding'] ?? ''));
  const headers: Record<string, string> = token === null ? { etag, 'cache-control': 'private, max-age=0', vary: 'Authorization, X-Syncular-Scopes, Accept-Encoding' }
    : { etag, 'cache-control': meta.urlExpiresAtMs ? `public, max-age=${Math.max(0, Math.floor((meta.urlExpiresAtMs - Date.now()) / 1000))}, immutable` : 'no-store' };
  if (String(req.headers['if-none-match'] ?? '').split(',').some(t => ['*', etag, `W/${etag}`].includes(t.trim()))) return void res.writeHead(304, headers).end();
  res.writeHead(200, { ...headers, 'content-type': 'application/octet-stream', ...(zip ? { 'content-encoding': 'gzip' } : { 'content-length': String(meta.byteLength) }) });
  const chunks = (async function* () { for (let idx = 0; idx < meta.chunkCount; idx++) yield await segmentChunk(pool, partition, meta.segmentId, idx); })();
  await (zip ? pipeline(chunks, createGzip(), res) : pipeline(chunks, res)).catch(() => res.destroy()); // a failed chunk ends the body early
}
