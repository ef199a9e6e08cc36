// syncular-gateway-node: the flags of syncular-gateway (each with its SYNCULAR_GATEWAY_* environment
// twin), a Node HTTP server with the gateway mounted, `listening on http://ADDR` once the first LISTEN
// connection is up, a clean exit (0) on SIGTERM/SIGINT. Exit 2 on bad flags, 1 on a startup failure.
import { createServer } from 'http';
import type { AddressInfo } from 'net';
import { createGateway } from './gateway';
import { stderrLogger } from './metrics';

// [flag, kind] — `n` a number, `s` a string, `l` repeatable (env twin comma-separated); `-` accepted
// for compatibility with syncular-gateway and ignored (tuning the Rust gateway's own HTTP server and
// relay: see docs/src/operate/gateway-node.md).
const FLAGS: Record<string, 'n' | 's' | 'l' | '-'> = {
  'database-url': 's', 'notify-database-url': 'l', listen: 's', mount: 's', auth: 's', 'default-partition': 's',
  'jwt-algorithm': 's', 'jwt-secret-file': 's', 'jwt-public-key-file': 's', 'jwt-leeway-secs': 'n', 'jwt-issuer': 's',
  'jwt-audience': 's', 'jwt-actor-claim': 's', 'jwt-partition-claim': 's', 'jwt-scopes-claim': 's', 'pool-size': 'n',
  'max-body-bytes': 'n', 'max-delta-bytes': 'n', 'max-sessions': 'n', 'max-sessions-per-client': 'n', 'max-sessions-per-actor': 'n',
  'write-timeout-secs': 'n', 'heartbeat-secs': 'n', 'ack-flush-ms': 'n', 'presence-max-bytes': 'n', 'presence-min-interval-ms': 'n',
  'ws-max-message-bytes': 'n', 'idle-timeout-secs': 'n', 'shutdown-grace-secs': 'n', 'gateway-id': 's', 'log-format': 's',
  'log-filter': 's', 'round-buffer-bytes': '-', 'session-queue': '-', 'max-connections': '-', 'http-header-read-timeout-secs': '-',
  'http-idle-timeout-secs': '-', 'request-timeout-secs': '-', 'presence-heartbeat-secs': '-',
};
const ENV: Record<string, string> = { 'notify-database-url': 'NOTIFY_DATABASE_URLS', 'gateway-id': 'ID', 'log-filter': 'LOG' };
const envName = (flag: string) => `SYNCULAR_GATEWAY_${ENV[flag] ?? flag.toUpperCase().replace(/-/g, '_')}`;
const camel = (flag: string) => flag.replace(/-(\w)/g, (_, c: string) => c.toUpperCase());

function usage(code: number, message?: string): never {
  if (message) process.stderr.write(`syncular-gateway-node: error: ${message}\n`);
  (code ? process.stderr : process.stdout).write(`usage: syncular-gateway-node --database-url URL [--listen IP:PORT] [--auth dev|jwt] [flags]\n`
    + `flags (each also SYNCULAR_GATEWAY_<FLAG>): ${Object.keys(FLAGS).map(f => `--${f}`).join(' ')}\n`);
  process.exit(code);
}

function parse(argv: string[]) {
  const given = new Map<string, string[]>();
  for (let i = 0; i < argv.length; i++) {
    if (argv[i] === '--help' || argv[i] === '-h') usage(0);
    const m = /^--([a-z0-9-]+)(?:=(.*))?$/s.exec(argv[i]);
    if (!m || !FLAGS[m[1]]) usage(2, `unexpected argument ${JSON.stringify(argv[i])}`);
    const value = m[2] ?? argv[++i];
    if (value === undefined) usage(2, `--${m[1]} needs a value`);
    given.set(m[1], [...(FLAGS[m[1]] === 'l' ? given.get(m[1]) ?? [] : []), value]);
  }
  const out: Record<string, unknown> = {}, sources = new Set<string>();
  for (const [flag, kind] of Object.entries(FLAGS)) {
    const env = process.env[envName(flag)];
    const values = given.get(flag) ?? (env === undefined ? undefined : kind === 'l' ? env.split(',').map(v => v.trim()).filter(Boolean) : [env]);
    if (values === undefined || kind === '-') continue;
    sources.add(flag);
    const v = values[values.length - 1];
    if (kind === 'n' && !/^\d+$/.test(v)) usage(2, `--${flag}: ${JSON.stringify(v)} is not a non-negative integer`);
    out[camel(flag)] = kind === 'l' ? values : kind === 'n' ? Number(v) : v;
  }
  if (!out.databaseUrl) usage(2, 'the following required argument was not provided: --database-url');
  if (out.auth !== undefined && out.auth !== 'dev' && out.auth !== 'jwt') usage(2, `--auth: "${out.auth}" is not dev or jwt`);
  const jwtFlags = [...sources].filter(f => f.startsWith('jwt-'));
  if (out.auth === 'dev' && jwtFlags.length) usage(2, `--auth dev (UNSAFE: trusts the x-syncular-actor header) cannot be combined with `
    + `JWT settings (${jwtFlags.map(f => `--${f}`).join(', ')}, from the command line or SYNCULAR_GATEWAY_JWT_* variables)`);
  if ((out.maxDeltaBytes as number) < 64) usage(2, '--max-delta-bytes must be at least 64');
  return out as Record<string, any>;
}

async function main() {
  const o = parse(process.argv.slice(2));
  const log = stderrLogger(o.logFilter ?? 'info', o.logFormat === 'json');
  if (o.auth === 'dev') process.stderr.write('syncular-gateway-node: UNSAFE: --auth dev trusts the x-syncular-actor / x-syncular-partition headers of every request; never expose this gateway\n');
  const [, host, port] = /^\[?(.*?)\]?:(\d+)$/.exec(o.listen ?? '127.0.0.1:8080') ?? usage(2, `--listen: "${o.listen}" is not ip:port`);
  let gw: ReturnType<typeof createGateway>;
  try { gw = createGateway({ ...o, databaseUrl: o.databaseUrl, logger: log }); } catch (e) {
    process.stderr.write(`syncular-gateway-node: ${(e as Error).message}\n`);
    process.exit(1);
  }
  const server = createServer((req, res) => gw.handle(req, res));
  server.on('error', e => { process.stderr.write(`syncular-gateway-node: cannot listen on ${o.listen}: ${e.message}\n`); process.exit(1); });
  server.on('upgrade', (req, socket, head) => { if (!gw.upgrade(req, socket, head)) socket.destroy(); });
  let stopping = false;
  const stop = async () => {
    if (stopping) return;
    stopping = true;
    log('info', 'shutdown requested: draining');
    server.close();
    server.closeIdleConnections();
    await gw.close();
    server.closeAllConnections();
    process.exit(0);
  };
  process.on('SIGTERM', stop);
  process.on('SIGINT', stop);
  await gw.ready; // no socket before the first LISTEN: a session joined earlier could miss a refresh
  server.listen(Number(port), host, () => {
    const a = server.address() as AddressInfo;
    process.stdout.write(`listening on http://${a.family === 'IPv6' ? `[${a.address}]` : a.address}:${a.port}\n`);
    log('info', 'syncular-gateway-node listening');
  });
}

main().catch(e => { process.stderr.write(`syncular-gateway-node: ${(e as Error).message}\n`); process.exit(1); });
