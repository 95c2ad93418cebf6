/**
 * A small, playable MP4 built by hand: one H.264 (Baseline) video track of
 * mid-grey frames at 24 fps. Every key frame codes each 16×16 macroblock as
 * Intra 16×16 DC prediction with no residual (one byte per macroblock, and
 * DC prediction with no neighbours is exactly grey); the frames between are
 * P frames of skipped macroblocks. That keeps a 12-second 1792×1024 video
 * near 100 kB with no encoder, while players, browsers and box parsers all
 * see an ordinary `isom` file: `ftyp`, then `moov` (so it streams), then `mdat`.
 */

const FPS = 24;
/** Movie timescale: durations in `mvhd` and `tkhd` are milliseconds. */
const MOVIE_TIMESCALE = 1000;
/** Media timescale: one frame is 1000 ticks. */
const MEDIA_TIMESCALE = FPS * 1000;
/** A key frame each second, so a player can seek anywhere. */
const KEY_FRAME_INTERVAL = FPS;
/** The slice header caps frame_num at 4 bits. */
const MAX_FRAME_NUM = 16;
const PROFILE_BASELINE = 66;
/** constraint_set0 and constraint_set1: decodable by Baseline and Main decoders alike. */
const PROFILE_COMPATIBILITY = 0xc0;

export interface Mp4Options {
  width: number;
  height: number;
  seconds: number;
}

/** Exp-Golomb and fixed-width fields, most significant bit first, as H.264 writes them. */
class BitWriter {
  private readonly bytes: number[] = [];
  private current = 0;
  private used = 0;

  bit(value: number): this {
    this.current = (this.current << 1) | (value & 1);
    this.used += 1;
    if (this.used === 8) {
      this.bytes.push(this.current);
      this.current = 0;
      this.used = 0;
    }
    return this;
  }

  bits(value: number, count: number): this {
    for (let shift = count - 1; shift >= 0; shift -= 1) this.bit((value >>> shift) & 1);
    return this;
  }

  /** ue(v): codeNum + 1 in binary, preceded by one zero per bit after its first. */
  ue(value: number): this {
    const coded = value + 1;
    const length = 32 - Math.clz32(coded);
    return this.bits(0, length - 1).bits(coded, length);
  }

  /** se(v): 0, 1, −1, 2, −2 … mapped onto ue(v). */
  se(value: number): this {
    return this.ue(value > 0 ? 2 * value - 1 : -2 * value);
  }

  /** The raw byte sequence payload, closed with its stop bit and zero padding. */
  finish(): Buffer {
    this.bit(1);
    while (this.used !== 0) this.bit(0);
    return Buffer.from(this.bytes);
  }
}

/** A NAL unit: its header byte, then the payload with emulation prevention (00 00 0x → 00 00 03 0x). */
function nalUnit(refIdc: number, type: number, rbsp: Buffer): Buffer {
  const out: number[] = [(refIdc << 5) | type];
  let zeros = 0;
  for (const byte of rbsp) {
    if (zeros >= 2 && byte <= 3) {
      out.push(3);
      zeros = 0;
    }
    out.push(byte);
    zeros = byte === 0 ? zeros + 1 : 0;
  }
  return Buffer.from(out);
}

interface Geometry {
  widthInMbs: number;
  heightInMbs: number;
  cropRight: number;
  cropBottom: number;
}

function geometry(width: number, height: number): Geometry {
  const widthInMbs = Math.ceil(width / 16);
  const heightInMbs = Math.ceil(height / 16);
  // Crop offsets count 2-pixel units in 4:2:0, hence the even sizes the caller enforces.
  const cropRight = (widthInMbs * 16 - width) / 2;
  const cropBottom = (heightInMbs * 16 - height) / 2;
  return { widthInMbs, heightInMbs, cropRight, cropBottom };
}

function levelFor(macroblocks: number): number {
  // Largest frame (in macroblocks) of levels 4.0, 5.1 and 6.2; each allows more than 24 such frames a second.
  if (macroblocks <= 8192) return 40;
  return macroblocks <= 36864 ? 51 : 62;
}

function sequenceParameterSet(shape: Geometry, level: number): Buffer {
  const writer = new BitWriter()
    .bits(PROFILE_BASELINE, 8)
    .bits(PROFILE_COMPATIBILITY, 8)
    .bits(level, 8)
    .ue(0) // seq_parameter_set_id
    .ue(0) // log2_max_frame_num_minus4: frame_num has 4 bits
    .ue(2) // pic_order_cnt_type 2: output order is decoding order (no B frames)
    .ue(1) // max_num_ref_frames
    .bit(0) // gaps_in_frame_num_value_allowed_flag
    .ue(shape.widthInMbs - 1)
    .ue(shape.heightInMbs - 1)
    .bit(1) // frame_mbs_only_flag
    .bit(1); // direct_8x8_inference_flag
  const cropped = shape.cropRight > 0 || shape.cropBottom > 0;
  writer.bit(cropped ? 1 : 0);
  if (cropped) writer.ue(0).ue(shape.cropRight).ue(0).ue(shape.cropBottom);
  writer.bit(0); // vui_parameters_present_flag
  return nalUnit(3, 7, writer.finish());
}

function pictureParameterSet(): Buffer {
  const writer = new BitWriter()
    .ue(0) // pic_parameter_set_id
    .ue(0) // seq_parameter_set_id
    .bit(0) // entropy_coding_mode_flag: CAVLC
    .bit(0) // bottom_field_pic_order_in_frame_present_flag
    .ue(0) // num_slice_groups_minus1
    .ue(0) // num_ref_idx_l0_default_active_minus1
    .ue(0) // num_ref_idx_l1_default_active_minus1
    .bit(0) // weighted_pred_flag
    .bits(0, 2) // weighted_bipred_idc
    .se(0) // pic_init_qp_minus26
    .se(0) // pic_init_qs_minus26
    .se(0) // chroma_qp_index_offset
    .bit(0) // deblocking_filter_control_present_flag
    .bit(0) // constrained_intra_pred_flag
    .bit(0); // redundant_pic_cnt_present_flag
  return nalUnit(3, 8, writer.finish());
}

function keyFrame(macroblocks: number, idrPicId: number): Buffer {
  const writer = new BitWriter()
    .ue(0) // first_mb_in_slice
    .ue(7) // slice_type: I, and every slice of the picture is I
    .ue(0) // pic_parameter_set_id
    .bits(0, 4) // frame_num
    .ue(idrPicId)
    .bit(0) // no_output_of_prior_pics_flag
    .bit(0) // long_term_reference_flag
    .se(0); // slice_qp_delta
  for (let index = 0; index < macroblocks; index += 1) {
    writer
      .ue(3) // mb_type I_16x16_2_0_0: DC prediction, no coded residual
      .ue(0) // intra_chroma_pred_mode: DC
      .se(0) // mb_qp_delta
      .bit(1); // coeff_token of the luma DC block: no coefficients
  }
  return nalUnit(3, 5, writer.finish());
}

function predictedFrame(macroblocks: number, frameNum: number): Buffer {
  const writer = new BitWriter()
    .ue(0) // first_mb_in_slice
    .ue(5) // slice_type: P, and every slice of the picture is P
    .ue(0) // pic_parameter_set_id
    .bits(frameNum, 4)
    .bit(0) // num_ref_idx_active_override_flag
    .bit(0) // ref_pic_list_modification_flag_l0
    .bit(0) // adaptive_ref_pic_marking_mode_flag: sliding window
    .se(0) // slice_qp_delta
    .ue(macroblocks); // mb_skip_run: the whole picture repeats its reference
  return nalUnit(2, 1, writer.finish());
}

/** A sample in an MP4 is its NAL units, each behind a 4-byte length (avcC's lengthSizeMinusOne = 3). */
function lengthPrefixed(nal: Buffer): Buffer {
  const prefix = Buffer.alloc(4);
  prefix.writeUInt32BE(nal.length);
  return Buffer.concat([prefix, nal]);
}

function box(type: string, ...payload: Buffer[]): Buffer {
  const body = Buffer.concat(payload);
  const header = Buffer.alloc(8);
  header.writeUInt32BE(8 + body.length, 0);
  header.write(type, 4, 'latin1');
  return Buffer.concat([header, body]);
}

function fullBox(type: string, version: number, flags: number, ...payload: Buffer[]): Buffer {
  const header = Buffer.alloc(4);
  header.writeUInt32BE(((version & 0xff) << 24) | (flags & 0xffffff));
  return box(type, header, ...payload);
}

function u32(...values: number[]): Buffer {
  const buffer = Buffer.alloc(values.length * 4);
  values.forEach((value, index) => buffer.writeUInt32BE(value >>> 0, index * 4));
  return buffer;
}

function u16(...values: number[]): Buffer {
  const buffer = Buffer.alloc(values.length * 2);
  values.forEach((value, index) => buffer.writeUInt16BE(value & 0xffff, index * 2));
  return buffer;
}

/** The identity transform both `mvhd` and `tkhd` carry. */
const IDENTITY_MATRIX = u32(0x00010000, 0, 0, 0, 0x00010000, 0, 0, 0, 0x40000000);

function sampleEntry(options: Mp4Options, sps: Buffer, pps: Buffer, level: number): Buffer {
  const avcC = box(
    'avcC',
    Buffer.from([1, PROFILE_BASELINE, PROFILE_COMPATIBILITY, level, 0xfc | 3, 0xe0 | 1]),
    u16(sps.length),
    sps,
    Buffer.from([1]),
    u16(pps.length),
    pps,
  );
  const compressorName = Buffer.alloc(32);
  compressorName.writeUInt8(10, 0);
  compressorName.write('Switchyard', 1, 'latin1');
  return box(
    'avc1',
    Buffer.alloc(6), // reserved
    u16(1), // data_reference_index
    Buffer.alloc(16), // pre_defined and reserved
    u16(options.width, options.height),
    u32(0x00480000, 0x00480000, 0), // 72 dpi both ways, reserved
    u16(1), // frame_count
    compressorName,
    u16(0x0018, 0xffff), // depth, pre_defined −1
    avcC,
  );
}

function sampleTable(entry: Buffer, sizes: number[], keyFrames: number[], chunkOffset: number): Buffer {
  return box(
    'stbl',
    fullBox('stsd', 0, 0, u32(1), entry),
    fullBox('stts', 0, 0, u32(1, sizes.length, MEDIA_TIMESCALE / FPS)),
    fullBox('stss', 0, 0, u32(keyFrames.length, ...keyFrames)),
    fullBox('stsc', 0, 0, u32(1, 1, sizes.length, 1)),
    fullBox('stsz', 0, 0, u32(0, sizes.length, ...sizes)),
    fullBox('stco', 0, 0, u32(1, chunkOffset)),
  );
}

/** Builds the whole file; the same options always give the same bytes (all timestamps are zero). */
export function buildMp4(options: Mp4Options): Buffer {
  const { width, height, seconds } = options;
  if (!Number.isInteger(width) || !Number.isInteger(height) || width < 16 || height < 16 || width % 2 || height % 2) {
    throw new RangeError(`MP4 sides must be even integers of at least 16, got ${width}x${height}.`);
  }
  if (!(seconds > 0)) throw new RangeError(`MP4 duration must be positive, got ${seconds}.`);

  const shape = geometry(width, height);
  const macroblocks = shape.widthInMbs * shape.heightInMbs;
  const level = levelFor(macroblocks);
  const sps = sequenceParameterSet(shape, level);
  const pps = pictureParameterSet();
  const frameCount = Math.max(1, Math.round(seconds * FPS));

  const samples: Buffer[] = [];
  const keyFrames: number[] = [];
  for (let index = 0; index < frameCount; index += 1) {
    const sinceKey = index % KEY_FRAME_INTERVAL;
    if (sinceKey === 0) {
      keyFrames.push(index + 1);
      // Consecutive IDR pictures must differ in idr_pic_id; alternating is enough.
      samples.push(lengthPrefixed(keyFrame(macroblocks, keyFrames.length % 2)));
    } else {
      samples.push(lengthPrefixed(predictedFrame(macroblocks, sinceKey % MAX_FRAME_NUM)));
    }
  }

  const movieDuration = Math.round(seconds * MOVIE_TIMESCALE);
  const mediaDuration = frameCount * (MEDIA_TIMESCALE / FPS);
  const entry = sampleEntry(options, sps, pps, level);
  const buildMoov = (chunkOffset: number) =>
    box(
      'moov',
      fullBox(
        'mvhd',
        0,
        0,
        u32(0, 0, MOVIE_TIMESCALE, movieDuration, 0x00010000), // times, timescale, duration, rate 1.0
        u16(0x0100), // volume 1.0
        Buffer.alloc(10), // reserved
        IDENTITY_MATRIX,
        Buffer.alloc(24), // pre_defined
        u32(2), // next_track_ID
      ),
      box(
        'trak',
        // flags 3: the track is enabled and part of the presentation.
        fullBox(
          'tkhd',
          0,
          3,
          u32(0, 0, 1, 0, movieDuration, 0, 0), // times, track_ID 1, reserved, duration, reserved
          u16(0, 0, 0, 0), // layer, alternate_group, volume, reserved
          IDENTITY_MATRIX,
          u32(width * 0x10000, height * 0x10000), // 16.16 fixed point
        ),
        box(
          'mdia',
          // 0x55c4 packs the ISO 639-2 code `und`.
          fullBox('mdhd', 0, 0, u32(0, 0, MEDIA_TIMESCALE, mediaDuration), u16(0x55c4, 0)),
          fullBox('hdlr', 0, 0, u32(0), Buffer.from('vide', 'latin1'), u32(0, 0, 0), Buffer.from('VideoHandler\0')),
          box(
            'minf',
            fullBox('vmhd', 0, 1, u16(0, 0, 0, 0)),
            box('dinf', fullBox('dref', 0, 0, u32(1), fullBox('url ', 0, 1))),
            sampleTable(
              entry,
              samples.map((sample) => sample.length),
              keyFrames,
              chunkOffset,
            ),
          ),
        ),
      ),
    );

  const ftyp = box('ftyp', Buffer.from('isom', 'latin1'), u32(0x200), Buffer.from('isomiso2avc1mp41', 'latin1'));
  // stco holds an absolute offset, and moov's size does not depend on its value: build once to measure, once for real.
  const chunkOffset = ftyp.length + buildMoov(0).length + 8;
  return Buffer.concat([ftyp, buildMoov(chunkOffset), box('mdat', ...samples)]);
}
