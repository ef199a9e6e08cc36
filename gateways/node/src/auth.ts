// Authentication, as crates/gateway/src/auth: `dev` (UNSAFE: actor and partition from the
// x-syncular-actor / x-syncular-partition headers, scopes from the database resolver) or `jwt`
// (Authorization: Bearer, on WebSocket also ?access_token=; HS256 secret or RS256/ES256 PEM key;
// exp required). Every failure is 401 sync.auth_required; no message ever holds a credential.
import { createPublicKey, KeyObject } from 'crypto';
import { readFileSync } from 'fs';
import type { IncomingHttpHeaders } from 'http';
import { jwtVerify } from 'jose';
import { apiError } from './errors';

export interface Identity { actorId: string; partition: string; allowedScopes: unknown | null; expiresAtMs: number | null }
export type Authenticate = (headers: IncomingHttpHeaders, queryToken?: string | null) => Promise<Identity>;

export interface AuthOptions {
  auth: 'dev' | 'jwt'; defaultPartition: string; jwtAlgorithm?: 'HS256' | 'RS256' | 'ES256'; jwtSecretFile?: string;
  jwtPublicKeyFile?: string; jwtLeewaySecs: number; jwtIssuer?: string; jwtAudience?: string; jwtActorClaim: string;
  jwtPartitionClaim?: string; jwtScopesClaim?: string;
}

const denied = (message: string) => apiError('sync.auth_required', message);
export const utf8 = new TextDecoder('utf-8', { fatal: true });
/** A header's value as UTF-8 (Node reads header bytes as Latin-1): undefined when absent, null when not UTF-8. */
export const header = (h: IncomingHttpHeaders, name: string) => {
  const v = h[name], s = Array.isArray(v) ? v[0] : v;
  try { return s === undefined ? undefined : utf8.decode(Buffer.from(s, 'latin1')); } catch { return null; }
};
const isAllowedMap = (v: unknown) => !!v && typeof v === 'object' && !Array.isArray(v)
  && Object.values(v).every(a => Array.isArray(a) && a.every(x => typeof x === 'string'));

/** Builds the authenticator (reads key files). Throws a startup error message. */
export function authenticator(o: AuthOptions): Authenticate {
  if (o.auth === 'dev') {
    return async h => {
      const actor = header(h, 'x-syncular-actor'), partition = header(h, 'x-syncular-partition');
      if (!actor) throw denied('dev auth: header x-syncular-actor is required (UTF-8)');
      if (partition === '' || partition === null) throw denied('dev auth: header x-syncular-partition is empty or not UTF-8');
      return { actorId: actor, partition: partition ?? o.defaultPartition, allowedScopes: null, expiresAtMs: null };
    };
  }
  const alg = o.jwtAlgorithm ?? (o.jwtSecretFile && !o.jwtPublicKeyFile ? 'HS256' : undefined);
  if (!alg) throw new Error('--auth jwt needs --jwt-algorithm (HS256, RS256 or ES256)');
  const [flag, path] = alg === 'HS256' ? ['--jwt-secret-file', o.jwtSecretFile] : ['--jwt-public-key-file', o.jwtPublicKeyFile];
  if (!path) throw new Error(`--auth jwt with ${alg} needs ${flag}`);
  const raw = (() => { try { return readFileSync(path); } catch (e) { throw new Error(`cannot read ${flag}: ${(e as Error).message}`); } })();
  const key: Uint8Array | KeyObject = alg === 'HS256' ? (raw[raw.length - 1] === 10 ? raw.subarray(0, raw.length - 1) : raw)
    : (() => { try { return createPublicKey(raw); } catch { throw new Error(`${alg} public key does not parse`); } })();
  if (alg === 'HS256' && (key as Buffer).length < 32) throw new Error(`${flag}: an HS256 secret must be at least 32 bytes`);
  return async (h, queryToken) => {
    const authz = header(h, 'authorization'), bearer = authz === undefined ? null : /^bearer +(\S.*)$/i.exec((authz ?? '').trim());
    if (authz !== undefined && !bearer) throw denied('Authorization header is not `Bearer <token>`');
    const token = bearer?.[1].trim() || queryToken;
    if (!token) throw denied('a bearer token is required (Authorization: Bearer …)');
    let claims: Record<string, unknown>;
    try {
      claims = (await jwtVerify(token, key, { algorithms: [alg], clockTolerance: o.jwtLeewaySecs, issuer: o.jwtIssuer,
        audience: o.jwtAudience, requiredClaims: ['exp'] })).payload;
    } catch (e) { throw denied(`invalid token (${(e as { code?: string }).code ?? 'unreadable'})`); }
    const str = (c: string) => typeof claims[c] === 'string' && claims[c] !== '' ? claims[c] as string : null;
    const actorId = str(o.jwtActorClaim);
    if (!actorId) throw denied(`token claim "${o.jwtActorClaim}" (the actor) is missing or not a non-empty string`);
    const partition = o.jwtPartitionClaim ? str(o.jwtPartitionClaim) : o.defaultPartition;
    if (!partition) throw denied(`token claim "${o.jwtPartitionClaim}" (the partition) is missing or not a non-empty string`);
    const scopes = o.jwtScopesClaim ? claims[o.jwtScopesClaim] : null;
    if (o.jwtScopesClaim && !isAllowedMap(scopes)) throw denied(`token claim "${o.jwtScopesClaim}" (allowed scopes) is missing or not an object of string arrays`);
    return { actorId, partition, allowedScopes: scopes, expiresAtMs: typeof claims.exp === 'number' ? claims.exp * 1000 : null };
  };
}
