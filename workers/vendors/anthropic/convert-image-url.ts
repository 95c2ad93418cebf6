import { invalidRequest } from '../../../shared/errors.js';
import type { AnthropicDocumentBlock, AnthropicImageBlock } from './anthropic-types.js';

/** The image media types the Messages API accepts in a base64 source. */
const IMAGE_MEDIA_TYPES = new Set(['image/jpeg', 'image/png', 'image/gif', 'image/webp']);
const PDF_MEDIA_TYPE = 'application/pdf';

/**
 * Turns an OpenAI `image_url.url` into an Anthropic block: a base64 data URL
 * becomes an inline source (a PDF one a `document` block, as Portkey does), an
 * http(s) URL a `url` source that Anthropic fetches itself. `param` names the
 * part in the client's request, for the 400s.
 */
export function convertImageUrl(url: string, param: string): AnthropicImageBlock | AnthropicDocumentBlock {
  if (url.startsWith('data:')) {
    const comma = url.indexOf(',');
    // `data:<media type>[;<parameter>…];base64,<data>`
    const header = comma === -1 ? '' : url.slice(5, comma);
    if (!header.endsWith(';base64')) {
      throw invalidRequest('Image data URLs must be base64-encoded (`data:<media type>;base64,<data>`).', param);
    }
    let mediaType = header.slice(0, header.indexOf(';')).toLowerCase();
    if (mediaType === 'image/jpg') mediaType = 'image/jpeg';
    const data = url.slice(comma + 1);
    if (mediaType === PDF_MEDIA_TYPE)
      return { type: 'document', source: { type: 'base64', media_type: mediaType, data } };
    if (!IMAGE_MEDIA_TYPES.has(mediaType)) {
      throw invalidRequest(
        `Unsupported image media type \`${mediaType || 'none'}\`: this model accepts image/jpeg, image/png, image/gif, image/webp and application/pdf.`,
        param,
      );
    }
    return { type: 'image', source: { type: 'base64', media_type: mediaType, data } };
  }
  if (url.startsWith('https://') || url.startsWith('http://')) return { type: 'image', source: { type: 'url', url } };
  throw invalidRequest('Image URLs must be http(s) URLs or base64 data URLs.', param);
}
