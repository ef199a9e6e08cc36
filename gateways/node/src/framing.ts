// SSP2 framing without decoding a payload (§1.2, §8.7): the 8-byte envelope check, the END scanner
// that reassembles a socket round's request from 0x01 chunks, and the cut of a response into round
// chunks. Frame: type u8, length u32 LE, payload; END = type 0x00, length 0. (Deltas come from
// realtime_pass already tagged 0x00.)

export const TAG_ROUND = 0x01;
const END = 0x00;

export class FramingError extends Error {
  constructor(message: string, readonly tooLarge = false) { super(message); }
}

/** Checks a request envelope (magic, wire version 1-3, msgKind 0x01, flags 0); returns the wire version. */
export function checkHeader(b: Buffer): number {
  const wire = b.length >= 8 ? b.readUInt16LE(4) : 0;
  if (wire < 1 || wire > 3 || b.toString('latin1', 0, 4) !== 'SSP2' || b[6] !== 0x01 || b[7] !== 0) throw new FramingError('invalid SSP2 request header');
  return wire;
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
    if (size > this.buf.length) this.buf = Buffer.concat([this.buf.subarray(0, this.size)], Math.min(this.limit, Math.max(2 * this.buf.length, size, 4096)));
    chunk.copy(this.buf, this.size);
    if (this.size < 8 && size >= 8) checkHeader(this.buf);
    this.size = size;
    for (let len; this.size >= this.next + 5; this.next += 5 + len) {
      len = this.buf.readUInt32LE(this.next + 1);
      if (this.buf[this.next] === END) {
        if (len !== 0 || this.size > this.next + 5) throw new FramingError(len ? 'END frame with a length' : 'bytes past END (§8.7)');
        const whole = this.buf.subarray(0, this.size);
        this.buf = Buffer.alloc(0); this.size = 0; this.next = 8;
        return whole;
      }
      if (this.next + 10 + len > this.limit) throw new FramingError('request over the size limit', true);
    }
    return null;
  }
}

/** Cuts a response into round-message payloads of up to 64 KiB: chunk boundaries are arbitrary and
 *  the response ends with END, so the last one ends exactly at END (§8.7 rule 2). */
export const roundChunks = (b: Buffer, max = 64 * 1024) => Array.from({ length: Math.ceil(b.length / max) }, (_, i) => b.subarray(i * max, (i + 1) * max));
