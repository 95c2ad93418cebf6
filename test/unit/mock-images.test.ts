import assert from 'node:assert/strict';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import zlib from 'node:zlib';
import { pino } from 'pino';
import { loadCatalog } from '../../shared/catalog.js';
import { GatewayError } from '../../shared/errors.js';
import { LocalBlobStore } from '../../storage/local-blob-store.js';
import type { BlobRef, ImageGenerationInput, MediaContext } from '../../workers/vendors/types.js';
import type { ImageEditInput } from '../../shared/schemas/media-inputs.js';
import { parseImageSize } from '../../workers/vendors/mock/images.js';
import { mockAdapter } from '../../workers/vendors/mock/index.js';
import { computeCrc32, crc32, encodeGradientPng } from '../../workers/vendors/mock/png.js';
import { gatewayError } from '../support/assertions.js';
import { loadConfig } from '../../shared/config.js';
import { createVendorHttp } from '../../workers/vendors/vendor-http.js';

const http = createVendorHttp(loadConfig({}));

const log = pino({ level: 'silent' });
const catalog = loadCatalog();

let blobDir: string;
let blobs: LocalBlobStore;

interface ContextOptions {
  upstreamModel: string;
  modelId?: string;
  signal?: AbortSignal;
  progress?: (percent: number) => Promise<void>;
}

function context(options: ContextOptions): MediaContext {
  return {
    requestId: 'req_mock_images',
    signal: options.signal ?? new AbortController().signal,
    // The mock makes no network calls: the channel is never dialled.
    channel: { vendor: 'mock', baseUrl: 'http://mock.invalid/v1', apiKey: '' },
    upstreamModel: options.upstreamModel,
    model: catalog.get(options.modelId ?? 'dall-e-3')!,
    log,
    http,
    blobs,
    progress: options.progress ?? (async () => {}),
    checkpoint: { read: () => undefined, write: async () => {} },
  };
}

const generation = (fields: Record<string, unknown>) =>
  ({ model: 'dall-e-3', prompt: 'a red fox', ...fields }) as ImageGenerationInput;
const edit = (fields: Record<string, unknown>, images: BlobRef[]) =>
  ({ model: 'gpt-image-1', prompt: 'add a hat', ...fields, images }) as ImageEditInput;

interface DecodedPng {
  width: number;
  height: number;
  bitDepth: number;
  colourType: number;
  pixels: Buffer;
}

/**
 * Checks a PNG the way a decoder would: signature, chunk CRCs, IHDR first, IEND last, IDAT inflating to the right
 * length.
 */
function decodePng(png: Buffer): DecodedPng {
  assert.deepEqual([...png.subarray(0, 8)], [0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a], 'PNG signature');
  const types: string[] = [];
  const idat: Buffer[] = [];
  let header: Buffer | undefined;
  for (let offset = 8; offset < png.length;) {
    const length = png.readUInt32BE(offset);
    const type = png.toString('ascii', offset + 4, offset + 8);
    const data = png.subarray(offset + 8, offset + 8 + length);
    assert.equal(
      png.readUInt32BE(offset + 8 + length),
      computeCrc32(png.subarray(offset + 4, offset + 8 + length)),
      `CRC of ${type}`,
    );
    types.push(type);
    if (type === 'IHDR') header = data;
    if (type === 'IDAT') idat.push(data);
    offset += 12 + length;
  }
  assert.equal(types[0], 'IHDR');
  assert.equal(types[types.length - 1], 'IEND');
  assert.ok(header);
  const width = header.readUInt32BE(0);
  const height = header.readUInt32BE(4);
  const bitDepth = header[8]!;
  const colourType = header[9]!;
  const pixels = zlib.inflateSync(Buffer.concat(idat));
  const bytesPerPixel = colourType === 6 ? 4 : 3;
  assert.equal(pixels.length, height * (1 + width * bytesPerPixel), 'inflated IDAT length');
  for (let y = 0; y < height; y++) assert.ok(pixels[y * (1 + width * bytesPerPixel)]! <= 4, 'row filter type');
  return { width, height, bitDepth, colourType, pixels };
}

before(async () => {
  blobDir = await mkdtemp(join(tmpdir(), 'switchyard-mock-images-'));
  blobs = new LocalBlobStore(blobDir);
});

after(async () => {
  await http.close();
  await rm(blobDir, { recursive: true, force: true });
});

describe('mock images', () => {
  const families: Array<[string, string[]]> = [
    ['dall-e-2', ['256x256', '512x512', '1024x1024']],
    ['dall-e-3', ['1024x1024', '1792x1024', '1024x1792']],
    ['gpt-image-1', ['1024x1024', '1536x1024', '1024x1536', 'auto']],
  ];

  for (const [model, sizes] of families) {
    it(`${model}: valid PNGs of every size the family takes`, async () => {
      const ctx = context({ upstreamModel: model, modelId: model });
      for (const size of sizes) {
        const result = await mockAdapter.generateImages!(generation({ model, size }), ctx);
        const image = result.images[0]!;
        assert.equal(image.contentType, 'image/png');
        const png = decodePng(image.bytes!);
        const expected = parseImageSize(size);
        assert.deepEqual(
          [png.width, png.height, png.bitDepth, png.colourType],
          [expected.width, expected.height, 8, 2],
        );
      }
    });
  }

  it('"auto" and no size mean 1024x1024; a malformed size is a 400', async () => {
    assert.deepEqual(parseImageSize('auto'), { width: 1024, height: 1024 });
    assert.deepEqual(parseImageSize(undefined), { width: 1024, height: 1024 });
    assert.equal(parseImageSize('1024x768').height, 768);
    for (const size of ['big', '0x10', '99999x10', '10x']) {
      assert.throws(
        () => parseImageSize(size),
        (error: unknown) => error instanceof GatewayError && error.param === 'size',
      );
    }
  });

  it('is deterministic: the same prompt gives the same bytes; prompts and image indices differ', async () => {
    const ctx = context({ upstreamModel: 'dall-e-2', modelId: 'dall-e-2' });
    const first = await mockAdapter.generateImages!(generation({ prompt: 'a lighthouse', size: '256x256', n: 2 }), ctx);
    const again = await mockAdapter.generateImages!(generation({ prompt: 'a lighthouse', size: '256x256', n: 2 }), ctx);
    const other = await mockAdapter.generateImages!(generation({ prompt: 'a windmill', size: '256x256' }), ctx);
    assert.equal(first.images.length, 2);
    assert.deepEqual(first.images[0]!.bytes, again.images[0]!.bytes);
    assert.deepEqual(first.images[1]!.bytes, again.images[1]!.bytes);
    assert.notDeepEqual(first.images[0]!.bytes, first.images[1]!.bytes);
    assert.notDeepEqual(first.images[0]!.bytes, other.images[0]!.bytes);
  });

  it('plays the family: revised_prompt for dall-e-3, usage and top-level fields for GPT image models', async () => {
    const dalle3 = await mockAdapter.generateImages!(
      generation({ size: '1024x1024' }),
      context({ upstreamModel: 'dall-e-3' }),
    );
    assert.match(dalle3.images[0]!.revised_prompt!, /a red fox/);
    assert.equal(dalle3.usage, undefined);
    const dalle2Context = context({ upstreamModel: 'dall-e-2', modelId: 'dall-e-2' });
    const dalle2 = await mockAdapter.generateImages!(generation({ size: '256x256' }), dalle2Context);
    assert.equal(dalle2.images[0]!.revised_prompt, undefined);
    const gpt = await mockAdapter.generateImages!(
      generation({ quality: 'low', size: '1536x1024', n: 2 }),
      context({ upstreamModel: 'gpt-image-1', modelId: 'gpt-image-1' }),
    );
    assert.deepEqual(gpt.extra, { background: 'opaque', output_format: 'png', size: '1536x1024', quality: 'low' });
    const usage = gpt.usage as { input_tokens: number; output_tokens: number; total_tokens: number };
    assert.ok(usage.input_tokens > 0 && usage.output_tokens > 0);
    assert.equal(usage.total_tokens, usage.input_tokens + usage.output_tokens);
  });

  it('markers: error status, refusal, slow with progress, abort while slow', async () => {
    const ctx = context({ upstreamModel: 'dall-e-3' });
    const failed = await gatewayError(mockAdapter.generateImages!(generation({ prompt: 'x [mock:error:503]' }), ctx));
    assert.equal(failed.status, 503);
    assert.equal(failed.retryable, true);
    const refused = await gatewayError(mockAdapter.generateImages!(generation({ prompt: 'x [mock:refuse]' }), ctx));
    assert.equal(refused.status, 400);
    assert.equal(refused.code, 'content_policy_violation');
    assert.ok(refused.message.length > 0);

    const progress: number[] = [];
    const started = Date.now();
    const slow = await mockAdapter.generateImages!(
      generation({ prompt: 'x [mock:slow:200]', size: '1024x1024' }),
      context({ upstreamModel: 'dall-e-3', progress: async (percent) => void progress.push(percent) }),
    );
    assert.ok(Date.now() - started >= 190);
    assert.deepEqual(progress, [25, 50, 75]);
    assert.equal(slow.images.length, 1);

    const controller = new AbortController();
    const abortable = context({ upstreamModel: 'dall-e-3', signal: controller.signal });
    const pending = mockAdapter.generateImages!(generation({ prompt: 'x [mock:slow:5000]' }), abortable);
    const abortedAt = Date.now();
    setTimeout(() => controller.abort(new Error('cancelled')), 30);
    await assert.rejects(pending, /cancelled/);
    assert.ok(Date.now() - abortedAt < 1000);
  });

  it('edits: PNGs of the requested size that depend on the uploads; at least one image is needed', async () => {
    const upload = (first: number) =>
      encodeGradientPng(4, 4, [
        [first, 1, 1],
        [2, 2, 2],
        [3, 3, 3],
        [4, 4, 4],
      ]);
    const first = await blobs.put('uploads/mock1/image-0', upload(1), 'image/png');
    const second = await blobs.put('uploads/mock2/image-0', upload(9), 'image/png');
    const ctx = context({ upstreamModel: 'gpt-image-1', modelId: 'gpt-image-1' });
    const a = await mockAdapter.editImages!(edit({ size: '1536x1024' }, [first]), ctx);
    const png = decodePng(a.images[0]!.bytes!);
    assert.deepEqual([png.width, png.height], [1536, 1024]);
    const b = await mockAdapter.editImages!(edit({ size: '1536x1024' }, [second]), ctx);
    assert.notDeepEqual(a.images[0]!.bytes, b.images[0]!.bytes);
    assert.deepEqual(
      (await mockAdapter.editImages!(edit({ size: '1536x1024' }, [first]), ctx)).images[0]!.bytes,
      a.images[0]!.bytes,
    );

    const none = await gatewayError(mockAdapter.editImages!(edit({}, []), ctx));
    assert.equal(none.status, 400);
    assert.equal(none.param, 'image');
    const absent: BlobRef = { key: 'uploads/none/image-0', contentType: 'image/png', size: 1 };
    const missing = await gatewayError(mockAdapter.editImages!(edit({}, [absent]), ctx));
    assert.equal(missing.status, 404);
  });

  it('CRC-32: the table version matches zlib and the standard check value', () => {
    const check = Buffer.from('123456789', 'ascii');
    assert.equal(computeCrc32(check), 0xcbf43926);
    assert.equal(crc32(check), 0xcbf43926);
    const sample = encodeGradientPng(33, 17, [
      [10, 20, 30],
      [40, 50, 60],
      [70, 80, 90],
      [100, 110, 120],
    ]);
    assert.equal(computeCrc32(sample), crc32(sample));
    decodePng(sample);
  });
});
