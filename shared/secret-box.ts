import { createCipheriv, createDecipheriv, hkdfSync, randomBytes } from 'node:crypto';

/**
 * Seals what must stay secret in the record (an MCP server's headers and URL added by an admin) with AES-256-GCM
 * under a key derived from `SECRETS_KEY` (HKDF-SHA256), which lives outside the database: a dump of the record alone
 * reads none of it. Each sealed value names what it belongs to (`context`, authenticated with it), so a value copied
 * onto another row does not open there. Form: `v1.<iv>.<ciphertext and tag>`, base64url.
 */
export class SecretBox {
  private readonly key: Buffer;

  constructor(secretsKey: string) {
    this.key = Buffer.from(hkdfSync('sha256', secretsKey, 'switchyard', 'record secrets v1', 32));
  }

  seal(plain: string, context: string): string {
    const iv = randomBytes(12);
    const cipher = createCipheriv('aes-256-gcm', this.key, iv);
    cipher.setAAD(Buffer.from(context));
    const body = Buffer.concat([cipher.update(plain, 'utf8'), cipher.final(), cipher.getAuthTag()]);
    return `v1.${iv.toString('base64url')}.${body.toString('base64url')}`;
  }

  /** The sealed value; throws when it was sealed under another key, for another context, or altered. */
  open(sealed: string, context: string): string {
    const [version, iv, body] = sealed.split('.');
    if (version !== 'v1' || iv === undefined || body === undefined) throw new Error('not a sealed value');
    const bytes = Buffer.from(body, 'base64url');
    if (bytes.length < 16) throw new Error('not a sealed value');
    const decipher = createDecipheriv('aes-256-gcm', this.key, Buffer.from(iv, 'base64url'));
    decipher.setAAD(Buffer.from(context));
    decipher.setAuthTag(bytes.subarray(bytes.length - 16));
    return Buffer.concat([decipher.update(bytes.subarray(0, bytes.length - 16)), decipher.final()]).toString('utf8');
  }
}
