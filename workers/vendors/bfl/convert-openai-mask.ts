/**
 * OpenAI and BFL mark the area to edit differently. An OpenAI mask is a PNG
 * whose fully transparent pixels (alpha 0) are the area to edit; a BFL Fill
 * mask is black and white, white being the area to repaint. A PNG mask with
 * transparent pixels is turned into BFL's form (an 8-bit greyscale PNG of the
 * same size); any other mask (no transparent pixel, or not a PNG) is sent as
 * it came, taken to be black and white already.
 */
import { PNG } from 'pngjs';
import { invalidRequest } from '../../../shared/errors.js';

const PNG_SIGNATURE = Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a]);
/** Bounds the memory a mask may take once decoded (4096x4096 at 16-bit RGBA is 128 MiB). */
const MAX_MASK_PIXELS = 4096 * 4096;
const REPAINT = 255;
const KEEP = 0;

const unreadable = (why: string) =>
  invalidRequest(`The mask is not a readable PNG image (${why}).`, 'mask', 'invalid_image');

/** The mask BFL Fill reads, from the mask an OpenAI client sent. */
export function convertOpenAIMaskToBfl(mask: Buffer): Buffer {
  if (mask.length < 24 || !mask.subarray(0, PNG_SIGNATURE.length).equals(PNG_SIGNATURE)) return mask;
  // IHDR comes first: refuse a huge image before decoding it.
  const width = mask.readUInt32BE(16);
  const height = mask.readUInt32BE(20);
  if (width * height > MAX_MASK_PIXELS) throw unreadable(`${width}x${height} is over ${MAX_MASK_PIXELS} pixels`);
  let decoded: PNG;
  try {
    // Samples at their own depth: a 16-bit alpha of 1 is not transparent, though it would round to 0 in 8 bits.
    decoded = PNG.sync.read(mask, { skipRescale: true } as Parameters<typeof PNG.sync.read>[1]);
  } catch (error) {
    throw unreadable((error as Error).message);
  }
  // Decoded as RGBA (palettes and tRNS colours resolved): every fourth sample is alpha.
  const samples = decoded.data as Buffer | Uint16Array;
  const grey = Buffer.alloc(decoded.width * decoded.height * 4);
  let transparent = false;
  for (let pixel = 0; pixel < decoded.width * decoded.height; pixel++) {
    const hole = samples[pixel * 4 + 3] === 0;
    transparent ||= hole;
    const value = hole ? REPAINT : KEEP;
    grey[pixel * 4] = grey[pixel * 4 + 1] = grey[pixel * 4 + 2] = value;
    grey[pixel * 4 + 3] = 255;
  }
  if (!transparent) return mask;
  const out = new PNG({ width: decoded.width, height: decoded.height });
  out.data = grey;
  return PNG.sync.write(out, { colorType: 0 });
}
