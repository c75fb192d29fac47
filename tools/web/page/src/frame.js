// Views one binary message from xform-web (tools/web/tab_frame.h) as typed
// arrays, without copying: header, then ids, parents, 3x4 row-major world
// matrices and destroyed ids. The stamp is when the poses were true, on
// the world's writers' clock (milliseconds).

export const MAGIC = 0x32574658; // "XFW2"
export const RESYNCED = 1;
const HEADER_BYTES = 48;

export function decodeFrame(buffer) {
  const header = new DataView(buffer, 0, HEADER_BYTES);
  if (buffer.byteLength < HEADER_BYTES || header.getUint32(0, true) !== MAGIC) {
    throw new Error('not an xform-web frame');
  }
  const n = header.getUint32(8, true);
  const d = header.getUint32(12, true);
  if (buffer.byteLength !== HEADER_BYTES + n * 64 + d * 8) {
    throw new Error('frame size does not match its counts');
  }
  let at = HEADER_BYTES;
  const ids = new Float64Array(buffer, at, n);
  at += 8 * n;
  const parents = new Float64Array(buffer, at, n);
  at += 8 * n;
  const worlds = new Float32Array(buffer, at, 12 * n);
  at += 48 * n;
  const destroyed = new Float64Array(buffer, at, d);
  return {
    flags: header.getUint32(4, true),
    frame: header.getFloat64(16, true),
    publishedMs: header.getFloat64(24, true),
    sentMs: header.getFloat64(32, true),
    stampMs: header.getFloat64(40, true),
    ids, parents, worlds, destroyed,
  };
}
