/** Keys of the uploads a job payload references: `images` (array), `mask`, `file`, `input_reference`. */
export function uploadKeys(payload: Record<string, unknown>): string[] {
  const refs: unknown[] = [...(Array.isArray(payload.images) ? payload.images : []), payload.mask, payload.file, payload.input_reference];
  return refs
    .map((ref) => (ref && typeof ref === 'object' ? (ref as { key?: unknown }).key : undefined))
    .filter((key): key is string => typeof key === 'string' && key.startsWith('uploads/'));
}
