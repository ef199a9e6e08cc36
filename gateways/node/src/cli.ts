// syncular-gateway-node: the flags of syncular-gateway (each with its SYNCULAR_GATEWAY_* environment
// twin), a Node HTTP server with the gateway mounted, `listening on http://ADDR` once the first LISTEN
// connection is up, exit 0 after a graceful shutdown on SIGTERM/SIGINT; 2 on bad flags, 1 on a failure.
import { createServer, ServerOptions } from 'http';
import type { AddressInfo } from 'net';
import { parseArgs } from 'util';
import { createGateway } from './gateway';
import { apiError, rawResponse } from './errors';
import { stderrLogger } from './metrics';

// [flag, kind]: `n` a number, `p` a number ≥ 1 (the Rust gateway's range), `s` a string, `l` repeatable
// (its env twin comma-separated), `-` accepted and ignored: tuning of the Rust gateway's queues,
// connection cap and relay (docs/src/operate/gateway-node.md).
const FLAGS: Record<string, 'n' | 'p' | 's' | 'l' | '-'> = {
  'database-url': 's', 'notify-database-url': 'l', listen: 's', mount: 's', auth: 's', 'default-partition': 's', 'jwt-algorithm': 's',
  'jwt-secret-file': 's', 'jwt-public-key-file': 's', 'jwt-leeway-secs': 'n', 'jwt-issuer': 's', 'jwt-audience': 's', 'jwt-actor-claim': 's',
  'jwt-partition-claim': 's', 'jwt-scopes-claim': 's', 'pool-size': 'n', 'max-body-bytes': 'n', 'max-delta-bytes': 'n', 'max-sessions': 'n',
  'max-sessions-per-client': 'n', 'max-sessions-per-actor': 'n', 'write-timeout-secs': 'n', 'heartbeat-secs': 'n', 'ack-flush-ms': 'n',
  'presence-max-bytes': 'n', 'presence-min-interval-ms': 'n', 'ws-max-message-bytes': 'n', 'idle-timeout-secs': 'n', 'shutdown-grace-secs': 'n',
  'gateway-id': 's', 'log-format': 's', 'log-filter': 's', 'round-buffer-bytes': '-', 'session-queue': '-', 'max-connections': '-',
  'http-header-read-timeout-secs': 'p', 'http-idle-timeout-secs': 'p', 'request-timeout-secs': 'n', 'presence-heartbeat-secs': '-',
};
const ENV: Record<string, string> = { 'notify-database-url': 'NOTIFY_DATABASE_URLS', 'gateway-id': 'ID', 'log-filter': 'LOG' };
const envName = (flag: string) => `SYNCULAR_GATEWAY_${ENV[flag] ?? flag.toUpperCase().replace(/-/g, '_')}`;

function usage(code: number, message?: string): never {
  if (message) process.stderr.write(`syncular-gateway-node: error: ${message}\n`);
  (code ? process.stderr : process.stdout).write('usage: syncular-gateway-node --database-url URL [--listen IP:PORT] [--auth dev|jwt] [flags]\n'
    + `flags (each also SYNCULAR_GATEWAY_<FLAG>): ${Object.keys(FLAGS).map(f => `--${f}`).join(' ')}\n`);
  process.exit(code);
}

function parse(args: string[]): Record<string, any> {
  let given: Record<string, unknown>;
  try {
    given = parseArgs({ args, strict: true, options: { help: { type: 'boolean' },
      ...Object.fromEntries(Object.entries(FLAGS).map(([f, k]) => [f, { type: 'string', multiple: k === 'l' }])) } }).values;
  } catch (e) { return usage(2, (e as Error).message); }
  if (given.help) usage(0);
  const out: Record<string, unknown> = {}, jwt: string[] = [];
  for (const [flag, kind] of Object.entries(FLAGS)) {
    const env = process.env[envName(flag)];
    const value = given[flag] ?? (env === undefined ? undefined : kind === 'l' ? env.split(',').map(v => v.trim()).filter(Boolean) : env);
    if (value === undefined || kind === '-') continue;
    if (flag.startsWith('jwt-')) jwt.push(`--${flag}`);
    const num = kind === 'n' || kind === 'p';
    if (num && !/^\d+$/.test(value as string)) usage(2, `--${flag}: ${JSON.stringify(value)} is not a non-negative integer`);
    if (kind === 'p' && Number(value) === 0) usage(2, `--${flag}: 0 is not in 1..`);
    out[flag.replace(/-(\w)/g, (_, c: string) => c.toUpperCase()) + (kind === 'l' ? 's' : '')] = num ? Number(value) : value;
  }
  if (!out.databaseUrl) usage(2, 'the following required argument was not provided: --database-url');
  if (out.auth !== undefined && out.auth !== 'dev' && out.auth !== 'jwt') usage(2, `--auth: ${JSON.stringify(out.auth)} is not dev or jwt`);
  if (out.auth === 'dev' && jwt.length) usage(2, `--auth dev (UNSAFE: trusts the x-syncular-actor header) cannot be combined with JWT `
    + `settings (${jwt.join(', ')}, from the command line or SYNCULAR_GATEWAY_JWT_* variables): they would be ignored`);
  if ((out.maxDeltaBytes as number) < 64) usage(2, '--max-delta-bytes must be at least 64');
  return out;
}

async function main() {
  const o = parse(process.argv.slice(2)), log = stderrLogger(o.logFilter ?? 'info', o.logFormat === 'json');
  if (o.auth === 'dev') process.stderr.write('syncular-gateway-node: UNSAFE: --auth dev trusts the x-syncular-actor / x-syncular-partition headers of every request; never expose this gateway\n');
  const [, host, port] = /^\[?(.*?)\]?:(\d+)$/.exec(o.listen ?? '127.0.0.1:8080') ?? usage(2, `--listen: ${JSON.stringify(o.listen)} is not ip:port`);
  const gw = createGateway({ ...o, databaseUrl: o.databaseUrl, logger: log });
  // The HTTP timeouts as the Rust gateway's flags set them (a slow head, a silent body, an idle connection).
  const server = createServer({ connectionsCheckingInterval: 500, requireHostHeader: false } as ServerOptions, (req, res) => gw.handle(req, res));
  const secs = (v: number | undefined, d: number) => Math.min((v ?? d) * 1000, 2 ** 30); // under Node's 32-bit timer limit
  Object.assign(server, { requestTimeout: secs(o.requestTimeoutSecs, 60), keepAliveTimeout: secs(o.httpIdleTimeoutSecs, 60), timeout: secs(o.httpIdleTimeoutSecs, 60),
    headersTimeout: Math.min(secs(o.httpHeaderReadTimeoutSecs, 10), secs(o.requestTimeoutSecs, 60) || Infinity) });
  server.on('clientError', (e: NodeJS.ErrnoException, socket) => { // §10.1 JSON, not Node's bare 408 / 400
    if (!socket.writable || e.code === 'ECONNRESET' || (socket as any)._httpMessage?.headersSent) return socket.destroy(); // answered: no second response
    socket.end(rawResponse(e.code === 'ERR_HTTP_REQUEST_TIMEOUT' ? apiError('syncular.unavailable', 'the request did not arrive in time', 503)
      : apiError('sync.invalid_request', `malformed HTTP request (${e.code ?? 'parse error'})`)));
  });
  server.on('upgrade', (req, socket, head) => gw.upgrade(req, socket, head) || socket.destroy());
  server.on('error', e => { process.stderr.write(`syncular-gateway-node: cannot listen on ${o.listen}: ${e.message}\n`); process.exit(1); });
  const stop = async () => { // stop accepting, drain the gateway, exit 0
    log('info', 'shutdown requested: draining');
    server.close();
    server.closeIdleConnections();
    await gw.close();
    process.exit(0);
  };
  process.once('SIGTERM', stop).once('SIGINT', stop);
  await gw.ready; // no socket before the first LISTEN: a session joined earlier could miss a host refresh
  server.listen(Number(port), host, () => {
    const a = server.address() as AddressInfo;
    process.stdout.write(`listening on http://${a.family === 'IPv6' ? `[${a.address}]` : a.address}:${a.port}\n`);
  });
}

main().catch(e => { process.stderr.write(`syncular-gateway-node: ${(e as Error).message}\n`); process.exit(1); });
