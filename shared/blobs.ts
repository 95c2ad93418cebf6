/** A stored upload or generated file, referenced from jobs instead of carried in them. */
export interface BlobRef {
  key: string;
  contentType: string;
  size: number;
  filename?: string;
  /** An upload's SHA-256 (hex), digested as it arrived: what the response cache knows it by. */
  sha256?: string;
}
