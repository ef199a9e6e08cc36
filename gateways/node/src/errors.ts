// §10.1 errors: the JSON object every failure becomes and how a Postgres error maps to it. The
// extension puts its §10.1 object in DETAIL (never retried: it classified the error); without one,
// SQLSTATE classes 40/53/57/08 and lost connections are transient (retried, then 503
// syncular.unavailable); anything else is syncular.internal (500).

const STATUS: Record<string, number> = { 'invalid-request': 400, 'schema-mismatch': 400, 'reset-required': 400, 'auth-required': 401,
  forbidden: 403, 'scope-revoked': 403, 'not-found': 404, conflict: 409, 'rate-limited': 429, internal: 500 };
// The codes the gateway raises itself (§10.2 metadata): [category, retryable, recommendedAction].
const CATALOG: Record<string, [string, boolean, string]> = {
  'sync.invalid_request': ['invalid-request', false, 'fixRequest'], 'sync.auth_required': ['auth-required', true, 'refreshAuth'],
  'sync.not_found': ['not-found', false, 'forceResync'], 'sync.forbidden': ['forbidden', false, 'checkPermissions'], 'sync.websocket_connection_limit': ['rate-limited', true, 'retryLater'],
  'sync.internal_error': ['internal', true, 'retryLater'], 'sync.schema_not_ready': ['schema-mismatch', true, 'retryLater'],
  'syncular.unavailable': ['internal', true, 'retryLater'], 'syncular.internal': ['internal', false, 'inspectServer'],
};
// Host codes answered as the catalog codes syncular-client 0.49 retries on its own (details.hostCode).
const ANSWERED_AS: Record<string, string> = { 'syncular.unavailable': 'sync.internal_error', 'syncular.no_schema': 'sync.schema_not_ready' };

export type ErrorBody = { code: string; message: string; category: string; retryable: boolean; recommendedAction: string; details?: object };

export class ApiError extends Error {
  constructor(readonly body: ErrorBody, readonly status = STATUS[body.category] ?? 500, readonly transient = false) { super(body.message); }
  get code() { return this.body.code; }
  /** The §10.1 object as clients are answered it. */
  toJSON(): ErrorBody {
    const as = ANSWERED_AS[this.code], [category, retryable, recommendedAction] = CATALOG[as] ?? [];
    return as ? { ...this.body, code: as, category, retryable, recommendedAction, details: { ...this.body.details, hostCode: this.code } } : this.body;
  }
}

/** `e` as a whole HTTP/1.1 response that closes the connection (refusals before a request handler runs). */
export function rawResponse(e: ApiError): string {
  const body = JSON.stringify(e.toJSON());
  return `HTTP/1.1 ${e.status} Refused\r\nContent-Type: application/json\r\nCache-Control: no-store\r\n`
    + `Content-Length: ${Buffer.byteLength(body)}\r\nConnection: close\r\n\r\n${body}`;
}

/** An error of CATALOG with `message` (and a status for transport-level rules: 405, 413, 415). */
export function apiError(code: string, message: string, status?: number, transient = false): ApiError {
  const [category, retryable, recommendedAction] = CATALOG[code];
  return new ApiError({ code, message, category, retryable, recommendedAction }, status ?? (code === 'syncular.unavailable' ? 503 : STATUS[category]), transient);
}

/** Maps an error thrown by node-postgres (an ApiError passes through). */
export function fromPg(e: unknown): ApiError {
  if (e instanceof ApiError) return e;
  const { code, detail, message } = (e ?? {}) as { code?: string; detail?: string; message?: string };
  if (typeof code !== 'string' || code.length !== 5) return apiError('syncular.unavailable', 'database connection failed', 503, true);
  try {
    const body = JSON.parse(detail ?? '');
    // The object store's waits (docs/src/operate/object-store.md) are unavailability: 503.
    const waits = body?.code === 'syncular.blob_pending' || body?.code === 'syncular.object_store_unavailable';
    if (typeof body?.code === 'string' && typeof body.category === 'string') return new ApiError(body, waits ? 503 : undefined);
  } catch { /* not a §10.1 DETAIL */ }
  if (['40', '53', '57', '08'].includes(code.slice(0, 2))) return apiError('syncular.unavailable', `database busy (${code})`, 503, true);
  return apiError('syncular.internal', `database error ${code}: ${message ?? ''}`);
}

/** Runs `attempt` until it succeeds, fails non-transiently, or failed transiently 4 times (backoff
 *  25, 100, 400 ms) — then syncular.unavailable (503). syncular.blob_pending (a presigned upload the
 *  mover has not verified yet) is retried every 100 ms for up to 5 s, then answered as is. */
export async function withRetry<T>(attempt: () => Promise<T>): Promise<T> {
  const started = Date.now();
  for (let n = 1, delay = 25; ; n++, delay *= 4) {
    try { return await attempt(); } catch (raw) {
      const e = fromPg(raw);
      if (e.code === 'syncular.blob_pending' && Date.now() - started < 5000) { n--; delay /= 4; await new Promise(r => setTimeout(r, 100)); continue; }
      if (!e.transient) throw e;
      if (n === 4) throw apiError('syncular.unavailable', 'database kept failing transiently', 503, true);
      await new Promise(r => setTimeout(r, delay));
    }
  }
}
