/** A stored upload or generated file, referenced from jobs instead of carried in them. */
export interface BlobRef {
  key: string;
  contentType: string;
  size: number;
  filename?: string;
}
