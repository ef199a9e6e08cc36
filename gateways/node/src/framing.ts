// SSP2 framing without decoding a payload (§1.2, §8.7): the 8-byte envelope check, the END
// scanner that reassembles a socket round's request from 0x01 chunks, the request's shape (does it
// push? pull?), the push+pull response splice and the cut of a response into round chunks.
// Frame layout: type u8, length u32 LE, payload; END = type 0x00, length 0.

export const TAG_DELTA = 0x00, TAG_ROUND = 0x01, MAX_ROUND_CHUNK = 64 * 1024;
const REQUEST = 0x01, RESPONSE = 0x02, END = 0x00, PUSH_COMMIT = 0x02, PULL_HEADER = 0x03, RESP_HEADER = 0x10;

export class FramingError extends Error {
  constructor(message: string, readonly tooLarge = false) { super(message); }
}

/** Checks an envelope (magic, wire version 1-3, msgKind, flags 0); returns the wire version. */
export function checkHeader(b: Buffer, kind = REQUEST): number {
  const wire = b.length >= 8 ? b.readUInt16LE(4) : 0;
  if (b.length < 8 || b.toString('latin1', 0, 4) !== 'SSP2' || wire < 1 || wire > 3 || b[6] !== kind || b[7] !== 0)
    throw new FramingError('invalid SSP2 envelope header');
  return wire;
}

/** The frames after the envelope: [type, start, end]; null for a truncated stream. */
export function frames(b: Buffer): [number, number, number][] | null {
  const out: [number, number, number][] = [];
  for (let pos = 8; pos < b.length;) {
    if (pos + 5 > b.length) return null;
    const end = pos + 5 + b.readUInt32LE(pos + 1);
    if (end > b.length) return null;
    out.push([b[pos], pos, end]);
    if (b[pos] === END) break;
    pos = end;
  }
  return out;
}

/** Streaming reassembly of one request (§8.7 rule 1): push chunks, get the message at its END. */
export class RequestScanner {
  private buf = Buffer.alloc(0);
  private size = 0;
  private next = 8; // offset of the next frame header
  constructor(private readonly limit: number) {}

  push(chunk: Buffer): Buffer | null {
    const size = this.size + chunk.length;
    if (size > this.limit) throw new FramingError('request over the size limit', true);
    if (size > this.buf.length) {
      const grown = Buffer.alloc(Math.min(this.limit, Math.max(2 * this.buf.length, size, 4096)));
      this.buf.copy(grown, 0, 0, this.size);
      this.buf = grown;
    }
    chunk.copy(this.buf, this.size);
    if (this.size < 8 && size >= 8) checkHeader(this.buf);
    this.size = size;
    while (this.size >= this.next + 5) {
      const len = this.buf.readUInt32LE(this.next + 1);
      if (this.buf[this.next] === END) {
        if (len !== 0) throw new FramingError('END frame with a length');
        if (this.size > this.next + 5) throw new FramingError('bytes past END (pipelining, §8.7)');
        const whole = this.buf.subarray(0, this.size);
        this.buf = Buffer.alloc(0); this.size = 0; this.next = 8;
        return whole;
      }
      this.next += 5 + len;
      if (this.next + 5 > this.limit) throw new FramingError('request over the size limit', true);
    }
    return null;
  }
}

/** Which halves a request carries; null when it is not a well-framed request. */
export function requestShape(b: Buffer): { push: boolean; pull: boolean } | null {
  try { checkHeader(b); } catch { return null; }
  const fs = frames(b);
  const last = fs?.[fs.length - 1];
  if (!fs || !last || last[0] !== END || last[2] !== b.length) return null;
  return { push: fs.some(f => f[0] === PUSH_COMMIT), pull: fs.some(f => f[0] === PULL_HEADER) };
}

function responseFrames(b: Buffer): [number, number, number][] {
  checkHeader(b, RESPONSE);
  const fs = frames(b);
  const last = fs?.[fs.length - 1];
  if (!fs || fs[0][0] !== RESP_HEADER || !last || last[0] !== END || last[2] !== b.length) throw new FramingError('malformed response');
  return fs;
}

/** The push response without its END, then the pull response without envelope and RESP_HEADER;
 *  the pull response alone when the two RESP_HEADERs differ (contract §1 step 3). */
export function splice(push: Buffer, pull: Buffer): Buffer {
  const pf = responseFrames(push), lf = responseFrames(pull);
  const ph = push.subarray(0, pf[0][2]), lh = pull.subarray(0, lf[0][2]);
  if (!ph.equals(lh)) return pull;
  return Buffer.concat([push.subarray(0, pf[pf.length - 1][1]), pull.subarray(lf[0][2])]);
}

/** Cuts a response into round-message payloads of whole frames up to `max` bytes (a larger frame is
 *  split); the last one ends exactly at END (§8.7 rule 2). */
export function roundChunks(b: Buffer, max = MAX_ROUND_CHUNK): Buffer[] {
  const ends = (frames(b) ?? []).map(f => f[2]);
  if (ends[ends.length - 1] !== b.length) ends.push(b.length);
  const out: Buffer[] = [];
  let start = 0, cut = 0;
  for (const end of ends) {
    if (end - start > max && cut > start) { out.push(b.subarray(start, cut)); start = cut; }
    while (end - start > max) { out.push(b.subarray(start, start + max)); start += max; }
    cut = end;
  }
  if (cut > start) out.push(b.subarray(start, cut));
  return out;
}
