// WebSocket {mount}/realtime (SSP2 §8) on the session rules (docs/src/sql/realtime.md): a session
// keeps the state text realtime_connect / realtime_reload / realtime_pass answered (opaque) and its
// resume rule, and sends what the answers say. Sessions live in partitions; each partition has one
// worker that handles its events in LISTEN order: consecutive commit notifications coalesce into ONE
// realtime_pass call with the partition's distinct states (one row, one encoded delta, per state),
// capped at the highest notified commitSeq; a host refresh (syncular_scopes) runs after the commits
// notified before it and before any notified after it.
import { createHmac, timingSafeEqual } from 'crypto';
import type { IncomingMessage } from 'http';
import type { Duplex } from 'stream';
import { Client, Pool } from 'pg';
import WebSocket, { WebSocketServer } from 'ws';
import { utf8, type Authenticate, type Identity } from './auth';
import * as db from './db';
import { ApiError, apiError, fromPg, rawResponse } from './errors';
import { FramingError, RequestScanner, roundChunks, TAG_ROUND } from './framing';
import type { Logger, Metrics } from './metrics';

export interface HubOptions {
  gatewayId: string; maxDeltaBytes: number; maxSessions: number; maxSessionsPerClient: number; maxSessionsPerActor: number;
  maxBodyBytes: number; heartbeatSecs: number; idleTimeoutSecs: number; writeTimeoutSecs: number; ackFlushMs: number;
  presenceMaxBytes: number; presenceMinIntervalMs: number; shutdownGraceSecs: number;
}
type Reason = 'connect' | 'round-end' | 'host';
class Session {
  state = ''; resume: db.Resume = null; logEpoch = ''; scopeKeys = new Set<string>(); acked = -1; // what the rules answered last
  inRound = false; // a round is in flight until its END: wake-ups, no 0x00, no second round (§8.7)
  roundEnd: { state: string; resume: db.Resume; logEpoch: string } | null = null; // the round-end reload's answer, kept at END
  busy = 0; // the connect reload not finished: the session sits out passes meanwhile
  generation = 0; refreshIssued = 0; refreshApplied = 0; // bumped by rounds, reloads, scopes notifications; reload tickets
  closing = false; timers: NodeJS.Timeout[] = [];
  rate = new Map<string, { last: number; pending?: object; timer?: NodeJS.Timeout }>(); // presence rate cap per scope key
  constructor(readonly id: number, readonly partition: string, readonly actorId: string, readonly clientId: string,
              readonly allowedScopes: unknown | null, readonly ws: WebSocket, readonly scanner: RequestScanner) {}
  /** Keeps a reload's answer. Another logEpoch is another timeline: the old one's acks are forgotten. */
  adopt(a: { state: string; resume: db.Resume; logEpoch: string }) {
    if (a.logEpoch !== this.logEpoch) this.acked = -1;
    Object.assign(this, { state: a.state, resume: a.resume, logEpoch: a.logEpoch, generation: this.generation + 1 });
  }
}
type Work = ['commit', number] | ['pass'] | ['scopes', string | null] | ['resync'];
type Peer = { actorId: string; clientId: string; doc: object };

class Partition {
  sessions = new Map<number, Session>();
  queue: Work[] = [];
  running = false; joining = 0; through = 0; timeline = '';
  epoch = 0; actorEpochs = new Map<string, number>(); // bumped by host refreshes: a session opened before one reloads
  constructor(readonly name: string) {}
  epochOf(actor: string) { return `${this.epoch}/${this.actorEpochs.get(actor) ?? 0}`; }
  /** A new logEpoch is a new timeline (restore, rotation, drop): its log restarts at `latest`. */
  restartTimeline(epoch: string, latest: number) {
    if (this.timeline && this.timeline !== epoch) this.through = latest;
    this.timeline = epoch;
  }
}

const now = () => Date.now(), sleep = (ms: number) => new Promise(r => setTimeout(r, ms));
const LONE = /[\uD800-\uDBFF](?![\uDC00-\uDFFF])|(?<![\uD800-\uDBFF])[\uDC00-\uDFFF]/;
/** JSON a serde reader (the Rust gateway, the clients) takes too: finite numbers, well-formed strings, depth ≤ 127. */
const portable = (v: unknown, depth = 0): boolean => typeof v === 'number' ? Number.isFinite(v) : typeof v === 'string' ? !LONE.test(v)
  : !v || typeof v !== 'object' || (depth < 127 && Object.entries(v).every(([k, x]) => !LONE.test(k) && portable(x, depth + 1)));
/** The `reason` of a wake-up text the rules built (metrics label). */
const wakeReason = (text: string) => ['catchup-required', 'delta-too-large', 'reset-required'].find(r => text.includes(r)) ?? 'other';
/** Strict unpadded base64url of non-empty UTF-8 text; null otherwise. */
function unb64(s: string | undefined): string | null {
  const b = Buffer.from(s ?? '', 'base64url');
  try { return s && b.toString('base64url') === s ? utf8.decode(b) || null : null; } catch { return null; }
}
/** The body of a signed notification payload whose tag verifies (docs/src/sql/realtime.md). */
export function verifyPayload(key: Buffer, channel: string, payload: string): string | null {
  const i = payload.lastIndexOf(':'), body = payload.slice(0, i), tag = Buffer.from(payload.slice(i + 1), 'base64url');
  if (i < 0 || payload.length - i !== 23 || tag.length !== 16) return null;
  return timingSafeEqual(createHmac('sha256', key).update(`${channel}\n${body}`).digest().subarray(0, 16), tag) ? body : null;
}

export class Hub {
  readonly partitions = new Map<string, Partition>();
  readonly listenUp: boolean[] = [];
  readonly ready: Promise<void>;
  shutting = false;
  private slots = new Map<string, number>(); private total = 0; private nextId = 1; private rounds = 0; private stopped = false;
  private listeners: (Client | null)[] = []; private markReady!: () => void; private ackTimer: NodeJS.Timeout;
  private acks = new Map<string, Map<string, { actorId: string; cursor: number; logEpoch: string }>>(); // partition -> clientId -> newest
  private presence = new Map<string, Map<number, Peer>>(); // partition \0 scope key -> session id -> peer
  constructor(private pool: Pool, private o: HubOptions, private metrics: Metrics, private log: Logger,
              private auth: Authenticate, listenUrls: string[], private wss: WebSocketServer) {
    this.ready = new Promise(r => { this.markReady = r; });
    listenUrls.forEach((url, node) => { this.listenUp.push(false); void this.listen(url, node); });
    this.ackTimer = setInterval(() => void this.flushAcks(), o.ackFlushMs);
  }
  get sessionCount() { return this.total; }
  private get deltaBudget() { return Math.max(this.o.maxDeltaBytes, 256 * 1024) * 2; }
  /** The upgrade: every refusal is HTTP JSON before upgrading (§8.1); then realtime_connect. */
  async upgrade(req: IncomingMessage, socket: Duplex, head: Buffer, url: URL): Promise<void> {
    const refuse = (e: ApiError) => {
      this.metrics.inc('errors_total', { code: e.code });
      this.metrics.inc('http_requests_total', { route: '/realtime', status: e.status });
      socket.end(rawResponse(e));
    };
    socket.on('error', () => socket.destroy());
    const clientId = url.searchParams.get('clientId');
    const key = req.headers['sec-websocket-key'] ?? '', version = req.headers['sec-websocket-version'];
    if (req.url?.includes('%00')) return refuse(apiError('sync.invalid_request', 'the request target holds a NUL (%00)'));
    try { decodeURIComponent(url.search); } catch { // URLSearchParams would read invalid UTF-8 as U+FFFD: ids would collide
      return refuse(apiError('sync.invalid_request', 'the query string is not percent-encoded UTF-8'));
    }
    if (req.headers.upgrade?.toLowerCase() !== 'websocket' || Buffer.from(key, 'base64').toString('base64') !== key
      || Buffer.byteLength(key, 'base64') !== 16 || (version !== '13' && version !== '8') || !clientId)
      return refuse(apiError('sync.invalid_request', 'a WebSocket upgrade (RFC 6455) with the query parameter clientId is required (§8.1)'));
    let id: Identity;
    try { id = await this.auth(req.headers, url.searchParams.get('access_token')); } catch (e) { return refuse(fromPg(e)); }
    if (this.shutting) return refuse(apiError('syncular.unavailable', 'the gateway is shutting down'));
    const keys = [`c\0${id.partition}\0${id.actorId}\0${clientId}`, `a\0${id.partition}\0${id.actorId}`];
    if ((this.slots.get(keys[0]) ?? 0) >= this.o.maxSessionsPerClient || (this.slots.get(keys[1]) ?? 0) >= this.o.maxSessionsPerActor
      || this.total >= this.o.maxSessions) return refuse(apiError('sync.websocket_connection_limit', 'realtime session limit reached'));
    const count = (by: number) => { this.total += by; keys.forEach(k => { const n = (this.slots.get(k) ?? 0) + by; n ? this.slots.set(k, n) : this.slots.delete(k); }); };
    count(1);
    // The partition exists from now on, so the commits notified while the session opens are recorded.
    const p = this.partitions.get(id.partition) ?? this.partitions.set(id.partition, new Partition(id.partition)).get(id.partition)!;
    p.joining++;
    const epoch = p.epochOf(id.actorId);
    let opened: db.Connected | undefined, error: unknown;
    try { opened = await db.realtimeConnect(this.pool, id.partition, id.actorId, clientId, id.allowedScopes); } catch (e) { error = e; }
    let served = false; // a handshake ws refuses (it never calls back) gives the slot back when its socket closes
    const release = () => { if (!served) { served = true; count(-1); p.joining--; this.forget(p); } };
    if (!opened || socket.destroyed) return release(), opened ? undefined : refuse(fromPg(error));
    socket.once('close', release);
    this.wss.handleUpgrade(req, socket, head, ws => (served = true) && this.serve(ws, id, clientId, opened!, p, epoch, () => count(-1)).catch(e => {
      this.log('error', 'session failed', { error: (e as Error).message });
      ws.terminate();
    }));
  }
  private async serve(ws: WebSocket, id: Identity, clientId: string, opened: db.Connected, p: Partition, epoch: string, release: () => void) {
    const s = new Session(this.nextId++, id.partition, id.actorId, clientId, id.allowedScopes, ws, new RequestScanner(this.o.maxBodyBytes));
    Object.assign(s, { state: opened.state, resume: opened.resume, logEpoch: opened.logEpoch, scopeKeys: new Set(opened.scopeKeys) });
    const idle = setTimeout(() => this.end(s, 1001, 'idle timeout'), this.o.idleTimeoutSecs * 1000);
    let stuckSince = now(), lastBuffered = 0;
    s.timers.push(idle, setInterval(() => { // §8.5 heartbeat + ping; a socket that does not drain is dropped
      if (ws.bufferedAmount === 0 || ws.bufferedAmount < lastBuffered) stuckSince = now();
      lastBuffered = ws.bufferedAmount;
      if (now() - stuckSince > this.o.writeTimeoutSecs * 1000) return ws.terminate();
      this.sendText(s, JSON.stringify({ event: 'heartbeat', data: { timestamp: now() } }));
      ws.ping();
    }, this.o.heartbeatSecs * 1000));
    ws.on('error', () => undefined); // ws itself closes on broken frames (1002), bad UTF-8 (1007), size (1009)
    ws.on('close', () => this.remove(s, p, release));
    ws.on('pong', () => idle.refresh());
    ws.on('message', (data: WebSocket.RawData, binary) => { idle.refresh(); binary ? this.onBinary(s, data as Buffer) : this.onText(s, data.toString()); });
    this.sendText(s, opened.hello);
    p.restartTimeline(s.logEpoch, opened.latestCursor);
    p.sessions.set(s.id, s); p.joining--; // before any wait: the socket's close event (always later) finds it here
    this.metrics.inc('sessions_open');
    if (this.shutting) this.end(s, 1001, 'gateway shutting down');
    for (const key of s.scopeKeys) this.snapshot(s, key);
    // A host refresh of this actor came in while realtime_connect ran: its answer may hold revoked
    // registrations, so reload before the session's first pass (later ones reach it as host reloads).
    const reload = p.epochOf(s.actorId) !== epoch;
    if (reload) { s.busy++; await this.reload(s, 'connect'); s.busy--; }
    if (reload || p.through > opened.latestCursor) this.schedule(p, ['pass']);
    // A JWT's exp, and the auth lease's (§7.3.3), close the session (1008).
    if (id.expiresAtMs) this.closeAt(s, id.expiresAtMs, 'sync.auth_required: the credential expired; reconnect with a fresh one');
    if (opened.leaseExpiresAtMs) this.closeAt(s, opened.leaseExpiresAtMs, 'sync.auth_lease_required: the auth lease expired');
  }
  /** Ends the session at `at` (ms) — unless it is closing already (its timers are cleared then). */
  private closeAt(s: Session, at: number, reason: string) {
    if (s.closing) return;
    const left = at - now();
    s.timers.push(setTimeout(() => (left > 2 ** 30 ? this.closeAt(s, at, reason) : this.end(s, 1008, reason)), Math.min(left, 2 ** 30)));
  }
  /** The socket closed (once): the session leaves its partition and its presence. */
  private remove(s: Session, p: Partition, release: () => void) {
    s.closing = true;
    s.timers.forEach(t => clearTimeout(t));
    release();
    p.sessions.delete(s.id);
    this.metrics.inc('sessions_open', {}, -1);
    for (const k of this.presence.keys()) if (k.startsWith(`${s.partition}\0`)) this.leave(s, k.slice(s.partition.length + 1));
    s.rate.forEach(r => clearTimeout(r.timer));
    this.forget(p);
  }
  private forget(p: Partition) {
    if (!p.sessions.size && !p.joining && !p.running && this.partitions.get(p.name) === p) this.partitions.delete(p.name);
  }
  /** Closes the socket (once) with `code`; a peer that does not answer the close is dropped after 2 s. */
  end(s: Session, code: number, reason: string) {
    if (s.closing) return;
    s.closing = true;
    s.ws.close(code, reason);
    s.timers.push(setTimeout(() => s.ws.terminate(), 2000));
  }
  private sendText(s: Session, text: string) {
    if (s.closing) return;
    if (s.ws.bufferedAmount > 2 * this.deltaBudget) return this.end(s, 1008, 'outbound queue overflow: the client does not read');
    s.ws.send(text);
  }
  /** Sends a wake-up text the rules built (and counts it). */
  private wake(s: Session, text: string) {
    this.metrics.inc('wakes_total', { reason: wakeReason(text) });
    this.sendText(s, text);
  }
  /** Text: acks and presence publishes (§8.1: unknown events and types are tolerated; malformed known ones close 1007). */
  private onText(s: Session, text: string) {
    let v: any, d: any;
    try { v = JSON.parse(text); } catch { /* malformed */ }
    const malformed = !v || typeof v !== 'object' || Array.isArray(v) || !portable(v) || ('type' in v
      ? typeof v.type !== 'string' || (v.type === 'ack' && !Number.isSafeInteger(v.cursor))
      : typeof v.event !== 'string' || (['hello', 'sync', 'heartbeat', 'presence'].includes(v.event)
        && (!(d = v.data) || typeof d !== 'object' || Array.isArray(d) || (v.event === 'presence' && (typeof d.scopeKey !== 'string'
          || !d.scopeKey || 'kind' in d || 'error' in d || d.doc === undefined || (d.doc !== null && (typeof d.doc !== 'object' || Array.isArray(d.doc))))))));
    if (malformed) return this.end(s, 1007, 'malformed control message (§8.1)');
    if (v.type === 'ack') this.ack(s, v.cursor);
    else if (v.event === 'presence') this.publish(s, d.scopeKey, d.doc);
  }
  /** Binary: 0x01 chunks of a round's request (§8.7); anything else breaks the stream. */
  private onBinary(s: Session, data: Buffer) {
    if (!data.length || data[0] !== TAG_ROUND) return this.end(s, 1002, 'unexpected channel tag (§8.7)');
    if (s.inRound) return this.end(s, 1002, 'sync round begun while a response stream is in flight (§8.7)');
    try {
      const request = s.scanner.push(data.subarray(1));
      if (request) this.round(s, request).catch(e => { this.log('error', 'round failed', { error: (e as Error).message }); this.end(s, 1011, 'internal error'); });
    } catch (e) {
      const big = e instanceof FramingError && e.tooLarge;
      this.end(s, big ? 1009 : 1002, big ? 'sync request over the size limit' : 'unframed or pipelined sync round stream (§8.7)');
    }
  }
  /** §8.2 ack: the highest is kept; once it reaches the resume rule's cursor the session keeps the
   *  rule's state (deltas resume). Folded (MAX per client) and written in batches. */
  private ack(s: Session, cursor: number) {
    this.metrics.inc('acks_received_total');
    if (cursor < 0) return;
    s.acked = Math.max(s.acked, cursor);
    if (s.resume && s.acked >= s.resume.cursor) { s.state = s.resume.state; s.resume = null; }
    this.addAck(s.partition, s.clientId, { actorId: s.actorId, cursor, logEpoch: s.logEpoch });
  }
  private addAck(partition: string, clientId: string, a: { actorId: string; cursor: number; logEpoch: string }) {
    const byClient = this.acks.get(partition) ?? this.acks.set(partition, new Map()).get(partition)!, prev = byClient.get(clientId);
    const same = prev && prev.actorId === a.actorId && prev.logEpoch === a.logEpoch;
    byClient.set(clientId, { ...a, cursor: same ? Math.max(prev.cursor, a.cursor) : a.cursor });
  }
  /** One syncular.realtime_ack per partition; a transient failure keeps the acks for the next flush. */
  async flushAcks() {
    const batch = this.acks;
    this.acks = new Map();
    for (const [partition, clients] of batch) {
      const acks = [...clients].map(([clientId, a]) => ({ clientId, ...a }));
      try { this.metrics.inc('acks_persisted_total', {}, await db.realtimeAck(this.pool, partition, acks)); } catch (raw) {
        const e = fromPg(raw);
        this.metrics.inc('errors_total', { code: e.code });
        if (e.transient) for (const { clientId, ...a } of acks) this.addAck(partition, clientId, a);
      }
    }
  }
  /** A §8.7 round: the POST /sync code with the connection's clientId; failures via error_response;
   *  ≤ 64 KiB 0x01 chunks ending at END. realtime_reload(…, 'round-end', wire) runs while they stream
   *  (its scope keys before END, its state kept at END); then a pass: commits made during the round
   *  (woken for meanwhile) arrive as deltas. */
  private async round(s: Session, request: Buffer) {
    const wire = request.readUInt16LE(4);
    s.inRound = true; s.roundEnd = null; s.generation++; this.rounds++;
    try {
      let response: Buffer, outcome = 'ok';
      try {
        response = await db.runRound(this.pool, { partition: s.partition, actorId: s.actorId, request, allowedScopes: s.allowedScopes, clientId: s.clientId });
      } catch (raw) {
        const e = fromPg(raw);
        this.metrics.inc('errors_total', { code: e.code });
        outcome = 'error';
        try { response = await db.errorResponse(this.pool, s.partition, wire, e.toJSON()); } catch {
          return this.end(s, 1011, 'the round failed and no error response could be built');
        }
      }
      this.metrics.inc('rounds_total', { binding: 'socket', outcome });
      const chunks = roundChunks(response);
      const reloaded = this.reload(s, 'round-end', wire);
      for (let i = 0; i < chunks.length; i++) {
        // Backpressure: wait for the socket to drain; a socket that does not is dropped.
        for (const until = now() + this.o.writeTimeoutSecs * 1000; s.ws.bufferedAmount > 1 << 20 && !s.closing; await sleep(10))
          if (now() > until) return s.ws.terminate();
        if (s.closing) return;
        if (i === chunks.length - 1) {
          await reloaded;
          const end = s.roundEnd as Session['roundEnd']; // set by the reload meanwhile
          if (end) { s.adopt(end); s.roundEnd = null; }
          s.inRound = false;
        }
        s.ws.send(Buffer.concat([Buffer.of(TAG_ROUND), chunks[i]]));
      }
    } finally {
      s.inRound = false; this.rounds--;
      const p = this.partitions.get(s.partition);
      if (p && !s.busy) this.schedule(p, ['pass']);
    }
  }
  /** realtime_reload: keeps the state when `changed`, sends `send`, swaps the presence grant; the
   *  newest reload wins. A failed 'round-end' keeps the state; a failed 'connect' or 'host' closes
   *  the session (fail-closed). Scopes frozen in the credential cannot be re-resolved: closed too. */
  private async reload(s: Session, reason: Reason, wire?: number): Promise<number | void> {
    const count = (outcome: string) => this.metrics.inc('refreshes_total', { mode: reason, outcome });
    const fail = (why: string, code = 1011) => { count('closed'); this.end(s, code, why); };
    if (reason !== 'round-end' && s.allowedScopes) return fail('sync.auth_required: scopes changed; reconnect with a fresh credential', 1008);
    const ticket = ++s.refreshIssued, p = this.partitions.get(s.partition);
    const a = await db.realtimeReload(this.pool, s.partition, s.actorId, s.clientId, s.allowedScopes, s.state, reason, wire)
      .catch(e => void this.log('warn', `${reason} reload failed`, { code: fromPg(e).code }));
    if (a && p) p.restartTimeline(a.logEpoch, a.latestCursor);
    if (ticket <= s.refreshApplied) return count('stale'), a?.latestCursor;
    s.refreshApplied = ticket;
    if (!a) return reason === 'round-end' ? count('kept') : fail('registration reload failed (fail-closed)');
    count(a.emptied ? 'emptied' : 'applied');
    // A round's answer is kept at its END, changed or not (passes may have woken the session since).
    if (reason === 'round-end' && s.inRound) s.roundEnd = { state: a.state, resume: a.resume, logEpoch: a.logEpoch };
    else if (a.changed) s.adopt(a);
    a.send.forEach(text => this.wake(s, text));
    const old = s.scopeKeys;
    s.scopeKeys = new Set(a.scopeKeys);
    for (const key of old) if (!s.scopeKeys.has(key)) this.leave(s, key);
    for (const key of s.scopeKeys) if (!old.has(key)) this.snapshot(s, key);
    return a.latestCursor;
  }
  private schedule(p: Partition, w: Work) {
    p.queue.push(w);
    if (!p.running) void this.work(p);
  }
  /** The partition's worker, in notification order: consecutive commits coalesce into one pass capped
   *  at the highest commitSeq notified; a host refresh reloads its sessions after the commits notified
   *  before it and is followed by a pass; so is a resync after a LISTEN (re)connect, which reloads
   *  every session and raises the cap to the smallest latestCursor read (notifications were lost). */
  private async work(p: Partition) {
    p.running = true;
    try {
      for (let w = p.queue.shift(); w; w = p.queue.shift()) {
        if (w[0] === 'scopes' || w[0] === 'resync') {
          const actor = w[0] === 'scopes' ? w[1] : null;
          const latest = await this.reloadMany([...p.sessions.values()].filter(s => actor === null || s.actorId === actor));
          if (w[0] === 'resync' && latest !== undefined) p.through = Math.max(p.through, latest);
          p.queue.unshift(['pass']);
          continue;
        }
        let through = Math.max(p.through, w[0] === 'commit' ? w[1] : 0);
        for (let n; (n = p.queue[0]) && (n[0] === 'commit' || n[0] === 'pass'); p.queue.shift()) if (n[0] === 'commit') through = Math.max(through, n[1]);
        await this.pass(p, p.through = through);
      }
    } catch (e) { this.log('error', 'partition worker failed', { error: (e as Error).message }); }
    finally { p.running = false; this.forget(p); }
  }
  /** Host-reloads sessions, 8 at a time; the smallest latestCursor the reloads read. */
  private async reloadMany(sessions: Session[]): Promise<number | undefined> {
    const latest: number[] = [];
    for (let i = 0; i < sessions.length; i += 8)
      for (const l of await Promise.all(sessions.slice(i, i + 8).map(s => this.reload(s, 'host')))) if (l !== undefined) latest.push(l);
    return latest.length ? Math.min(...latest) : undefined;
  }
  /** One realtime_pass call with the distinct states of the partition's sessions (flagged in_round for
   *  a round in flight: wake-ups only), capped at `through`; each session of a row keeps its state and
   *  gets its messages. */
  private async pass(p: Partition, through: number) {
    const groups = new Map<string, { s: Session; gen: number }[]>();
    for (const s of p.sessions.values()) {
      const key = (s.inRound ? 'r' : 'n') + s.state;
      if (!s.closing && !s.busy) (groups.get(key) ?? groups.set(key, []).get(key)!).push({ s, gen: s.generation });
    }
    if (!groups.size) return;
    const keys = [...groups.keys()], states = keys.map(k => k.slice(1)), members = [...groups.values()], started = now();
    this.metrics.inc('delta_calls_total');
    let rows: db.PassRow[];
    try {
      rows = await db.realtimePass(this.pool, p.name, `[${states.join(',')}]`, keys.map(k => k[0] === 'r'), this.o.maxDeltaBytes, through);
    } catch (raw) {
      const e = fromPg(raw);
      this.metrics.inc('errors_total', { code: e.code });
      this.log('error', 'realtime_pass failed', { code: e.code });
      if (e.transient) setTimeout(() => this.schedule(p, ['pass']), 500); // the states did not move: nothing is lost
      else for (const { s } of members.flat()) this.end(s, 1011, 'realtime deltas could not be computed'); // the client reconnects
      return;
    } finally {
      this.metrics.inc('delta_call_seconds_sum', {}, (now() - started) / 1000);
      this.metrics.inc('delta_call_seconds_count');
    }
    let rerun = false;
    for (const row of rows) {
      for (const { s, gen } of members[row.index] ?? []) {
        // An ack, a reload or a round changed the session while the call ran: the next pass recomputes.
        if (s.state !== states[row.index] || s.generation !== gen || s.busy || s.inRound !== (keys[row.index][0] === 'r')) { rerun = true; continue; }
        Object.assign(s, { state: row.state, resume: row.resume });
        if (row.message && !s.closing && !s.inRound && s.ws.bufferedAmount + row.message.length <= this.deltaBudget) {
          s.ws.send(row.message); // one buffer for the whole row
          this.metrics.inc('deltas_sent_total');
        } else if (row.message && row.overflow) { // the socket is backed up: a wake-up instead
          Object.assign(s, { state: row.overflow.state, resume: row.overflow.resume });
          this.wake(s, row.overflow.control);
        } else if (row.message) this.end(s, 1011, 'a delta could not be delivered');
        if (row.control) this.wake(s, row.control);
      }
    }
    if (rerun) this.schedule(p, ['pass']);
  }
  /** §8.6 presence, local to this gateway: authorized by the session's scopeKeys, latest-wins rate cap. */
  private publish(s: Session, key: string, doc: object | null) {
    const reject = (error: string) => {
      this.metrics.inc('presence_events_total', { kind: 'rejected' });
      this.sendText(s, JSON.stringify({ event: 'presence', data: { scopeKey: key, error, timestamp: now() } }));
    };
    if (!s.scopeKeys.has(key)) return reject('presence.forbidden');
    if (doc === null) return this.leave(s, key);
    if (Buffer.byteLength(JSON.stringify(doc)) > this.o.presenceMaxBytes) return reject('presence.too_large');
    const r = s.rate.get(key) ?? s.rate.set(key, { last: 0 }).get(key)!, wait = r.last + this.o.presenceMinIntervalMs - now();
    if (this.o.presenceMinIntervalMs > 0 && wait > 0) {
      r.pending = doc;
      r.timer ??= setTimeout(() => {
        const pending = r.pending;
        r.timer = r.pending = undefined;
        if (pending && !s.closing && s.scopeKeys.has(key)) this.fanout(s, key, pending);
      }, wait);
      return;
    }
    clearTimeout(r.timer); // the window is over: a document held for its end (a late timer) must not follow this one
    r.timer = r.pending = undefined;
    this.fanout(s, key, doc);
  }
  private fanout(s: Session, key: string, doc: object) {
    const k = `${s.partition}\0${key}`, peers = this.presence.get(k) ?? this.presence.set(k, new Map()).get(k)!;
    const kind = peers.has(s.id) ? 'update' : 'join', peer = { actorId: s.actorId, clientId: s.clientId, doc };
    peers.set(s.id, peer);
    s.rate.get(key)!.last = now();
    this.deliver(s, key, kind, peer);
  }
  private leave(s: Session, key: string) {
    clearTimeout(s.rate.get(key)?.timer);
    s.rate.delete(key);
    const k = `${s.partition}\0${key}`, peers = this.presence.get(k), peer = peers?.get(s.id);
    if (!peers || !peer) return;
    peers.delete(s.id);
    if (!peers.size) this.presence.delete(k);
    this.deliver(s, key, 'leave', peer);
  }
  private deliver(from: Session, key: string, kind: string, peer: Peer) {
    const msg = { event: 'presence', data: { scopeKey: key, kind, ...peer, doc: kind === 'leave' ? null : peer.doc, timestamp: now() } };
    const to = [...this.partitions.get(from.partition)?.sessions.values() ?? []].filter(s => s !== from && s.scopeKeys.has(key));
    to.forEach(s => this.sendText(s, JSON.stringify(msg)));
    if (to.length) this.metrics.inc('presence_events_total', { kind });
  }
  private snapshot(s: Session, key: string) {
    for (const [id, peer] of this.presence.get(`${s.partition}\0${key}`) ?? [])
      if (id !== s.id) this.sendText(s, JSON.stringify({ event: 'presence', data: { scopeKey: key, kind: 'join', ...peer, timestamp: now() } }));
  }
  /** One LISTEN connection per node, reconnected with backoff; each (re)connect reads the key first
   *  and resynchronizes every session (notifications may have been lost meanwhile). */
  private async listen(url: string, node: number) {
    for (let backoff = 100, before = false; !this.stopped; backoff = Math.min(backoff * 2, 5000)) {
      const c = new Client(db.pgConfig(url, `syncular-gateway-listen-${this.o.gatewayId}`));
      const lost = new Promise<void>(done => { c.on('error', () => done()); c.on('end', () => done()); });
      try {
        await c.connect();
        const key: Buffer = (await c.query('SELECT syncular.notification_key() AS k')).rows[0].k;
        c.on('notification', n => this.dispatch(key, n.channel, n.payload ?? ''));
        await c.query('LISTEN syncular_commit; LISTEN syncular_scopes');
        if (before) this.metrics.inc('listen_reconnects_total');
        this.log('info', before ? 'LISTEN connection re-established: resynchronizing sessions' : 'LISTEN connection established', { node });
        before = true; backoff = 100;
        this.listeners[node] = c; this.listenUp[node] = true;
        this.metrics.set(`listen_connections_up{node="${node}"}`, 1);
        for (const p of this.partitions.values()) { p.epoch++; this.schedule(p, ['resync']); }
        this.markReady();
        await lost;
      } catch (e) { this.log('warn', 'LISTEN connection failed', { node, error: (e as Error).message }); }
      this.listenUp[node] = false; this.listeners[node] = null;
      this.metrics.set(`listen_connections_up{node="${node}"}`, 0);
      c.end().catch(() => undefined);
      if (!this.stopped) await sleep(backoff);
    }
  }
  /** Acts on a notification only when its tag verifies with the notification key (any role may NOTIFY). */
  private dispatch(key: Buffer, channel: string, payload: string) {
    const [a, b, extra] = verifyPayload(key, channel, payload)?.split(':') ?? [];
    const partition = unb64(a), actor = b === undefined ? null : unb64(b), p = this.partitions.get(partition ?? '');
    if (channel === 'syncular_commit' && partition && /^[1-9]\d{0,15}$/.test(b ?? '') && extra === undefined) {
      if (p) this.schedule(p, ['commit', Number(b)]);
    } else if (channel === 'syncular_scopes' && partition && extra === undefined && (b === undefined || actor)) {
      if (!p) return;
      if (actor) p.actorEpochs.set(actor, (p.actorEpochs.get(actor) ?? 0) + 1); else p.epoch++;
      for (const s of p.sessions.values()) if (!actor || s.actorId === actor) s.generation++;
      this.schedule(p, ['scopes', actor]);
    } else {
      this.metrics.inc('notifications_rejected_total', { channel });
      this.log('warn', 'notification dropped: its tag does not verify', { channel, len: payload.length });
    }
  }
  /** Shutdown: refuse new sessions, let rounds finish (grace), close sockets 1001, write pending acks. */
  async close() {
    this.shutting = true;
    for (const until = now() + this.o.shutdownGraceSecs * 1000; this.rounds > 0 && now() < until;) await sleep(20);
    for (const p of this.partitions.values()) for (const s of p.sessions.values()) this.end(s, 1001, 'gateway shutting down');
    for (const until = now() + 3000; this.total > 0 && now() < until;) await sleep(20);
    clearInterval(this.ackTimer);
    await this.flushAcks();
    this.stopped = true;
    await Promise.all(this.listeners.map(c => c?.end().catch(() => undefined)));
  }
}
