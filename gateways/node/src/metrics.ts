// Logging (stderr; never a token, header, query string or connection string) and the Prometheus
// counters `GET /metrics` renders, named as the Rust gateway names them (syncular_gateway_*).

export type Logger = (level: 'debug' | 'info' | 'warn' | 'error', message: string, fields?: Record<string, unknown>) => void;
const LEVELS = ['debug', 'info', 'warn', 'error'];
/** A stderr logger: `filter` is the lowest level shown (`off` = nothing), `json` one object a line. */
export function stderrLogger(filter = 'info', json = false): Logger {
  const min = filter === 'off' ? 99 : Math.max(0, LEVELS.indexOf(filter.split(',')[0]));
  return (level, message, fields = {}) => {
    if (LEVELS.indexOf(level) < min) return;
    const line = json ? JSON.stringify({ level, message, ...fields })
      : `${new Date().toISOString()} ${level.toUpperCase()} ${message} ${Object.entries(fields).map(([k, v]) => `${k}=${v}`).join(' ')}`;
    process.stderr.write(line.trimEnd() + '\n');
  };
}

export class Metrics {
  private values = new Map<string, number>([['sessions_open', 0], ['listen_reconnects_total', 0], ['deltas_sent_total', 0],
    ['delta_calls_total', 0], ['delta_call_seconds_sum', 0], ['delta_call_seconds_count', 0], ['acks_received_total', 0]]);

  /** Adds `by` to the series `name{labels}` (label order as given). */
  inc(name: string, labels: Record<string, string | number> = {}, by = 1): void {
    const l = Object.entries(labels).map(([k, v]) => `${k}="${String(v).replace(/["\\\n]/g, '_')}"`).join(','), key = l ? `${name}{${l}}` : name;
    this.values.set(key, (this.values.get(key) ?? 0) + by);
  }

  set(name: string, value: number): void { this.values.set(name, value); }
  render(): string {
    const count = this.values.get('delta_call_seconds_count') ?? 0;
    return [...this.values, ['delta_call_seconds_bucket{le="+Inf"}', count] as const]
      .map(([k, v]) => `syncular_gateway_${k} ${v}\n`).join('');
  }
}
