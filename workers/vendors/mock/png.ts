import zlib from 'node:zlib';

/** An sRGB colour, each channel 0–255. */
export type Rgb = readonly [number, number, number];

const PNG_SIGNATURE = Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a]);
const BYTES_PER_PIXEL = 3;
/** PNG row filter "Up": each byte minus the byte above it, so rows that change slowly deflate to almost nothing. */
const FILTER_UP = 2;

let crcTable: Uint32Array | undefined;

function buildCrcTable(): Uint32Array {
  const table = new Uint32Array(256);
  for (let n = 0; n < 256; n++) {
    let c = n;
    for (let k = 0; k < 8; k++) c = c & 1 ? 0xedb88320 ^ (c >>> 1) : c >>> 1;
    table[n] = c >>> 0;
  }
  return table;
}

/** CRC-32 as PNG (and zlib) define it, table-driven: for Node builds without `zlib.crc32` (added in 20.15). */
export function computeCrc32(data: Uint8Array): number {
  crcTable ??= buildCrcTable();
  let crc = 0xffffffff;
  for (let i = 0; i < data.length; i++) crc = crcTable[(crc ^ data[i]!) & 0xff]! ^ (crc >>> 8);
  return (crc ^ 0xffffffff) >>> 0;
}

const nativeCrc32 = (zlib as { crc32?: (data: Uint8Array) => number }).crc32;

/** zlib's native CRC-32 when this Node has it, else the table version. */
export function crc32(data: Uint8Array): number {
  return typeof nativeCrc32 === 'function' ? nativeCrc32(data) >>> 0 : computeCrc32(data);
}

function chunk(type: string, data: Buffer): Buffer {
  const out = Buffer.alloc(12 + data.length);
  out.writeUInt32BE(data.length, 0);
  out.write(type, 4, 'ascii');
  data.copy(out, 8);
  // The CRC covers the type and the data, not the length.
  out.writeUInt32BE(crc32(out.subarray(4, 8 + data.length)), 8 + data.length);
  return out;
}

/** Rows are drawn in bands of this height: the Up filter then turns every row inside a band into zeros. */
const BAND_HEIGHT = 4;

function lerp(from: Rgb, to: Rgb, t: number): [number, number, number] {
  return [from[0] + (to[0] - from[0]) * t, from[1] + (to[1] - from[1]) * t, from[2] + (to[2] - from[2]) * t];
}

/** One row of pixels: a horizontal gradient from `left` to `right`. */
function fillRow(row: Buffer, width: number, left: Rgb, right: Rgb): void {
  for (let x = 0; x < width; x++) {
    const t = width === 1 ? 0 : x / (width - 1);
    const offset = x * BYTES_PER_PIXEL;
    row[offset] = Math.round(left[0] + (right[0] - left[0]) * t);
    row[offset + 1] = Math.round(left[1] + (right[1] - left[1]) * t);
    row[offset + 2] = Math.round(left[2] + (right[2] - left[2]) * t);
  }
}

/**
 * A real PNG (8-bit RGB, no interlace) of a gradient between four corner
 * colours, drawn in bands a few rows high. Only one row per band is computed;
 * with the Up filter the others are all zero bytes, so filling and deflating
 * stay cheap: a 1792x1024 image encodes in a few tens of milliseconds.
 */
export function encodeGradientPng(width: number, height: number, corners: readonly [Rgb, Rgb, Rgb, Rgb]): Buffer {
  const [topLeft, topRight, bottomLeft, bottomRight] = corners;
  const stride = 1 + width * BYTES_PER_PIXEL;
  // Zero-filled: a row left untouched is "Up, no change".
  const raw = Buffer.alloc(stride * height);
  let previous = Buffer.alloc(width * BYTES_PER_PIXEL);
  let current = Buffer.alloc(width * BYTES_PER_PIXEL);
  for (let y = 0; y < height; y++) {
    const offset = y * stride;
    raw[offset] = FILTER_UP;
    if (y % BAND_HEIGHT !== 0) continue;
    const t = height <= BAND_HEIGHT ? 0 : y / (height - 1);
    fillRow(current, width, lerp(topLeft, bottomLeft, t), lerp(topRight, bottomRight, t));
    // Up on the first row reads an all-zero row above, as the PNG spec says.
    for (let i = 0; i < current.length; i++) raw[offset + 1 + i] = (current[i]! - previous[i]!) & 0xff;
    [previous, current] = [current, previous];
  }

  const header = Buffer.alloc(13);
  header.writeUInt32BE(width, 0);
  header.writeUInt32BE(height, 4);
  header[8] = 8; // bit depth
  header[9] = 2; // colour type: truecolour (RGB)
  header[10] = 0; // compression: deflate
  header[11] = 0; // filter method 0 (the five per-row filters)
  header[12] = 0; // no interlace
  // Level 1: five times faster than the default here, for images under 200 kB; a mock needs speed, not size.
  const pixels = zlib.deflateSync(raw, { level: 1 });
  return Buffer.concat([PNG_SIGNATURE, chunk('IHDR', header), chunk('IDAT', pixels), chunk('IEND', Buffer.alloc(0))]);
}
