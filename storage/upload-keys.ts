/**
 * Keys of the uploads a job payload references: `images` (array), `image` (a variation's), `mask`, `file`,
 * `input_reference`.
 */
export function uploadKeys(payload: object): string[] {
  const fields = payload as {
    images?: unknown;
    image?: unknown;
    mask?: unknown;
    file?: unknown;
    input_reference?: unknown;
  };
  const refs: unknown[] = [
    ...(Array.isArray(fields.images) ? fields.images : []),
    fields.image,
    fields.mask,
    fields.file,
    fields.input_reference,
  ];
  return refs
    .map((ref) => (ref && typeof ref === 'object' ? (ref as { key?: unknown }).key : undefined))
    .filter((key): key is string => typeof key === 'string' && key.startsWith('uploads/'));
}
