// createGateway(options): the request handler and the upgrade handler to mount into any Node HTTP
// server — POST {mount}/sync, GET {mount}/realtime (WebSocket), GET /healthz and /metrics at the
// root — and close(). Every error is §10.1 JSON with the status of its category.
import { randomUUID } from 'crypto';
import type { IncomingMessage, ServerResponse } from 'http';
import type { Duplex } from 'stream';
import { promisify } from 'util';
import { gunzip, gzip } from 'zlib';
import { Pool } from 'pg';
import { WebSocketServer } from 'ws';
import { authenticator, AuthOptions } from './auth';
import { pgConfig, runRound } from './db';
import { ApiError, apiError, fromPg } from './errors';
import { Logger, Metrics, stderrLogger } from './metrics';
import { Hub, HubOptions } from './realtime';
import { serveSegment } from './segments';

/** `databaseUrl` (libpq key=value or postgres:// URL; never logged) and the settings of
 *  syncular-gateway's flags of the same names (camelCase); DEFAULTS holds the defaults. */
export type GatewayOptions = Partial<AuthOptions & HubOptions & typeof DEFAULTS> & {
  databaseUrl: string; notifyDatabaseUrls?: string[]; logger?: Logger;
};

/** `handle` calls `next` (if given) for a path that is not the gateway's; `upgrade` is false (socket untouched)
 *  for a path other than {mount}/realtime; `ready` resolves once the first LISTEN connection is up (listen
 *  after it: a session joined before could miss a refresh); `close` lets rounds finish, closes sockets 1001,
 *  writes pending acks. */
export interface Gateway {
  handle(req: IncomingMessage, res: ServerResponse, next?: () => void): void;
  upgrade(req: IncomingMessage, socket: Duplex, head: Buffer): boolean;
  ready: Promise<void>; close(): Promise<void>; metrics: Metrics;
}

export const DEFAULTS = {
  mount: '/', auth: 'jwt' as 'dev' | 'jwt', defaultPartition: 'default', jwtLeewaySecs: 30, jwtActorClaim: 'sub', poolSize: 16,
  maxBodyBytes: 8 << 20, maxDeltaBytes: 1 << 20, maxSessions: 10_000, maxSessionsPerClient: 4, maxSessionsPerActor: 32,
  writeTimeoutSecs: 30, heartbeatSecs: 30, ackFlushMs: 1000, presenceMaxBytes: 16 << 10, presenceMinIntervalMs: 50,
  wsMaxMessageBytes: (8 << 20) + 1, idleTimeoutSecs: 90, shutdownGraceSecs: 10,
};
const SSP2 = 'application/vnd.syncular.sync.v2';

export function createGateway(options: GatewayOptions): Gateway {
  const o = { ...DEFAULTS, gatewayId: randomUUID(), ...Object.fromEntries(Object.entries(options).filter(([, v]) => v !== undefined)) } as
    typeof DEFAULTS & HubOptions & AuthOptions & GatewayOptions;
  const log = o.logger ?? stderrLogger(), metrics = new Metrics(), auth = authenticator(o);
  const pool = new Pool({ ...pgConfig(o.databaseUrl, `syncular-gateway-${o.gatewayId}`), max: o.poolSize });
  pool.on('error', e => log('warn', 'idle database connection failed', { error: e.message }));
  const wss = new WebSocketServer({ noServer: true, maxPayload: o.wsMaxMessageBytes, perMessageDeflate: false });
  const hub = new Hub(pool, o, metrics, log, auth, o.notifyDatabaseUrls?.length ? o.notifyDatabaseUrls : [o.databaseUrl], wss);
  const mount = o.mount.replace(/^\/+|\/+$/g, '') ? `/${o.mount.replace(/^\/+|\/+$/g, '')}` : '';

  const send = (res: ServerResponse, status: number, type: string, body: string | Buffer, headers: Record<string, string> = {}) =>
    res.writeHead(status, { 'content-type': type, 'cache-control': 'no-store', 'content-length': Buffer.byteLength(body), ...headers }).end(body);
  const fail = (res: ServerResponse, e: ApiError) => {
    metrics.inc('errors_total', { code: e.code });
    send(res, e.status, 'application/json', JSON.stringify(e.toJSON()));
  };

  /** The body, gunzipped when sent gzip; 413 beyond maxBodyBytes, transferred or decoded. */
  async function body(req: IncomingMessage): Promise<Buffer> {
    const parts: Buffer[] = [], tooLarge = () => apiError('sync.invalid_request', `request body larger than ${o.maxBodyBytes} bytes`, 413);
    let size = 0;
    for await (const chunk of req) if ((size += chunk.length) <= o.maxBodyBytes) parts.push(chunk); // read whole: no reset
    if (size > o.maxBodyBytes) throw tooLarge();
    if (!req.headers['content-encoding'] || req.headers['content-encoding'] === 'identity') return Buffer.concat(parts);
    return promisify(gunzip)(Buffer.concat(parts), { maxOutputLength: o.maxBodyBytes }).catch(e => {
      throw e instanceof RangeError || e?.code === 'ERR_BUFFER_TOO_LARGE' ? tooLarge() : apiError('sync.invalid_request', 'request body could not be read (not valid gzip)');
    });
  }

  async function sync(req: IncomingMessage, res: ServerResponse) {
    const type = (req.headers['content-type'] ?? '').split(';')[0].trim().toLowerCase(), enc = req.headers['content-encoding'] ?? 'identity';
    if (type !== SSP2) return fail(res, apiError('sync.invalid_request', `Content-Type must be ${SSP2} (§1.1)`, 415));
    if (enc !== 'identity' && enc !== 'gzip') return fail(res, apiError('sync.invalid_request', 'unsupported Content-Encoding (accepted: gzip, identity)', 415));
    let outcome = 'error';
    try {
      const id = await auth(req.headers);
      const response = await runRound(pool, { partition: id.partition, actorId: id.actorId, request: await body(req), allowedScopes: id.allowedScopes });
      outcome = 'ok';
      const zip = /\bgzip\b/.test(String(req.headers['accept-encoding'] ?? ''));
      send(res, 200, SSP2, zip ? await promisify(gzip)(response) : response, zip ? { 'content-encoding': 'gzip', vary: 'accept-encoding' } : {});
    } catch (e) { fail(res, fromPg(e)); } finally { metrics.inc('rounds_total', { binding: 'http', outcome }); }
  }

  async function healthz(res: ServerResponse) {
    const database = await pool.query('SELECT 1').then(() => true, () => false), listenDown = hub.listenUp.flatMap((up, i) => (up ? [] : [i]));
    const ok = database && !listenDown.length && !hub.shutting;
    send(res, ok ? 200 : 503, 'application/json', JSON.stringify({ status: ok ? 'ok' : 'unavailable', database, listen: !listenDown.length,
      listenDown, sessions: hub.sessionCount, gatewayId: o.gatewayId, gateway: 'node',
      auth: o.auth === 'dev' ? 'dev (UNSAFE: actor and partition are taken from request headers; never expose this gateway)' : 'jwt' }));
  }

  /** The request target as a URL, null when it does not parse (`http://[x`): a request never throws. */
  const target = (req: IncomingMessage) => { try { return new URL(req.url ?? '/', 'http://gateway'); } catch { return null; } };
  function handle(req: IncomingMessage, res: ServerResponse, next?: () => void) {
    const url = target(req);
    if (!url || req.url?.includes('%00')) return fail(res, apiError('sync.invalid_request', 'malformed request target (or a NUL, %00, in it)'));
    const path = url.pathname;
    const segment = path.startsWith(`${mount}/segments/`) ? /^[^/]+$/.exec(path.slice(mount.length + 10)) : null;
    const route = ['/healthz', '/metrics'].includes(path) ? path : [`${mount}/sync`, `${mount}/realtime`].includes(path) ? path.slice(mount.length)
      : segment ? '/segments/{id}' : null;
    if (!route && next) return next();
    res.on('finish', () => metrics.inc('http_requests_total', { route: route ?? 'unmatched', status: res.statusCode }));
    if (route && (req.method === 'HEAD' ? 'GET' : req.method) !== (route === '/sync' ? 'POST' : 'GET'))
      return res.setHeader('allow', route === '/sync' ? 'POST' : 'GET, HEAD'), fail(res, apiError('sync.invalid_request', 'method not allowed on this route', 405));
    if (route === '/sync' || route === '/healthz' || segment) {
      const work = route === '/sync' ? sync(req, res) : route === '/healthz' ? healthz(res)
        : serveSegment(pool, auth, req, res, segment![0], url.searchParams.get('st'));
      return void work.catch(e => (res.headersSent ? res.destroy() : fail(res, fromPg(e))));
    }
    if (route === '/metrics') return send(res, 200, 'text/plain; version=0.0.4', metrics.render());
    fail(res, route ? apiError('sync.invalid_request', 'expected a WebSocket upgrade (§8.1)') : apiError('sync.not_found', 'no such route'));
  }

  function upgrade(req: IncomingMessage, socket: Duplex, head: Buffer): boolean {
    const url = target(req);
    if (url?.pathname !== `${mount}/realtime`) return false;
    hub.upgrade(req, socket, head, url).catch(e => { log('error', 'upgrade failed', { error: (e as Error).message }); socket.destroy(); });
    return true;
  }

  const close = () => hub.close().then(() => pool.end()).catch(() => undefined);
  return { handle, upgrade, close, ready: hub.ready, metrics };
}
