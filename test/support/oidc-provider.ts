import {
  createServer,
  request as httpRequest,
  type IncomingMessage,
  type Server,
  type ServerResponse,
} from 'node:http';
import type { AddressInfo } from 'node:net';
import { once } from 'node:events';
import Provider, { type Configuration, type KoaContextWithOIDC } from 'oidc-provider';
import { SignJWT, decodeJwt, exportJWK, generateKeyPair, type JWK } from 'jose';

/**
 * A real OpenID Connect provider (`oidc-provider`, the certified one) for the
 * tests, in the test process: an in-memory store, one client registered for
 * the gateway, people whose groups a test changes between sign-ins, and keys
 * the test holds. It is reached through a small front server, whose URL is the
 * issuer: the front signs in whoever `nextLogin` names without a form (the
 * provider's interaction), passes everything else to the provider, and can
 * tamper with what the token endpoint answers (`tamper`) or stop answering at
 * all (`hang`), as a broken or hostile provider would.
 */

export interface TestPerson {
  email: string;
  email_verified?: boolean;
  name?: string;
  groups: string[];
}

/** What the front does to the token endpoint's ID token: pass it on, or re-sign it changed. */
export type Tamper = 'none' | 'forged' | 'expired' | 'wrong-nonce';

export interface TestProvider {
  /** The issuer URL (the front server's). */
  readonly issuer: string;
  /** The people the provider knows, by subject; change their groups between sign-ins. */
  readonly people: Map<string, TestPerson>;
  /** The subject the next sign-in at the provider is. */
  nextLogin: string;
  tamper: Tamper;
  /** On: no request to the provider is answered (each hangs until the provider closes). */
  hang: boolean;
  /** Seconds an ID token is valid. */
  idTokenSeconds: number;
  /** Registers the gateway's client and starts the provider behind the front: once the gateway's URL is known. */
  register(client: { redirectUri: string; postLogoutRedirectUri: string }): Promise<void>;
  close(): Promise<void>;
}

export const testClientId = 'switchyard-console';
export const testClientSecret = 'switchyard-console-secret-0123456789';

async function listen(server: Server): Promise<string> {
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  return `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
}

async function readAll(stream: IncomingMessage): Promise<Buffer> {
  const chunks: Buffer[] = [];
  for await (const chunk of stream) chunks.push(chunk as Buffer);
  return Buffer.concat(chunks);
}

export async function startTestProvider(): Promise<TestProvider> {
  const signing = await generateKeyPair('RS256', { extractable: true });
  const other = await generateKeyPair('RS256', { extractable: true });
  const kid = 'test-key';
  const privateJwk: JWK = { ...(await exportJWK(signing.privateKey)), kid, alg: 'RS256', use: 'sig' };

  let provider: Provider | undefined;
  let inner: Server | undefined;
  let innerUrl = '';
  const hanging = new Set<ServerResponse>();

  const front = createServer((req, res) => {
    handle(req, res).catch((error: unknown) => {
      if (!res.headersSent) res.writeHead(500, { 'content-type': 'text/plain' });
      res.end(String(error));
    });
  });
  const issuer = await listen(front);

  const state: TestProvider = {
    issuer,
    people: new Map(),
    nextLogin: '',
    tamper: 'none',
    hang: false,
    idTokenSeconds: 3600,
    async register(client) {
      const configuration: Configuration = {
        clients: [
          {
            client_id: testClientId,
            client_secret: testClientSecret,
            redirect_uris: [client.redirectUri],
            post_logout_redirect_uris: [client.postLogoutRedirectUri],
            grant_types: ['authorization_code'],
            response_types: ['code'],
            token_endpoint_auth_method: 'client_secret_basic',
          },
        ],
        jwks: { keys: [privateJwk] },
        claims: { openid: ['sub'], email: ['email', 'email_verified'], profile: ['name'], groups: ['groups'] },
        scopes: ['openid', 'email', 'profile', 'groups'],
        features: { devInteractions: { enabled: false }, rpInitiatedLogout: { enabled: true } },
        pkce: { required: () => true },
        cookies: { keys: ['test-provider-cookie-key'] },
        ttl: { IdToken: () => state.idTokenSeconds },
        findAccount: (_ctx: KoaContextWithOIDC, sub: string) => {
          const person = state.people.get(sub);
          if (!person) return undefined;
          return {
            accountId: sub,
            claims: () => ({
              sub,
              email: person.email,
              email_verified: person.email_verified ?? true,
              name: person.name ?? sub,
              groups: [...person.groups],
            }),
          };
        },
        // The gateway is a first-party client: no consent screen, every scope it asks granted.
        loadExistingGrant: async (ctx: KoaContextWithOIDC) => {
          const { session, client: oidcClient, provider: self, params } = ctx.oidc;
          if (!session?.accountId || !oidcClient) return undefined;
          const grant = new self.Grant({ clientId: oidcClient.clientId, accountId: session.accountId });
          grant.addOIDCScope(String(params?.scope ?? 'openid'));
          await grant.save();
          return grant;
        },
      };
      provider = new Provider(issuer, configuration);
      inner = createServer(provider.callback());
      innerUrl = await listen(inner);
    },
    async close() {
      for (const res of hanging) res.destroy();
      front.closeAllConnections();
      inner?.closeAllConnections();
      await Promise.all([
        new Promise((resolve) => front.close(resolve)),
        inner ? new Promise((resolve) => inner!.close(resolve)) : undefined,
      ]);
    },
  };

  /** The token endpoint's ID token, changed as `tamper` says, re-signed (by another key for `forged`). */
  async function tamperWith(idToken: string): Promise<string> {
    const claims = decodeJwt(idToken);
    const now = Math.floor(Date.now() / 1000);
    if (state.tamper === 'expired') Object.assign(claims, { iat: now - 7200, exp: now - 3600 });
    if (state.tamper === 'wrong-nonce') claims.nonce = 'not-the-nonce-of-this-sign-in';
    const key = state.tamper === 'forged' ? other.privateKey : signing.privateKey;
    return new SignJWT(claims).setProtectedHeader({ alg: 'RS256', kid, typ: 'JWT' }).sign(key);
  }

  async function handle(req: IncomingMessage, res: ServerResponse): Promise<void> {
    if (state.hang) {
      hanging.add(res);
      res.once('close', () => hanging.delete(res));
      return;
    }
    if (!provider) {
      res.writeHead(503).end('provider not registered yet');
      return;
    }
    const url = new URL(req.url ?? '/', issuer);
    if (url.pathname.startsWith('/interaction/')) {
      // The sign-in at the provider, without a form: whoever the test named.
      await provider.interactionDetails(req, res);
      const to = await provider.interactionResult(
        req,
        res,
        { login: { accountId: state.nextLogin } },
        { mergeWithLastSubmission: false },
      );
      res.writeHead(303, { location: to }).end();
      return;
    }
    const body = await readAll(req);
    const answer = await new Promise<IncomingMessage>((resolve, reject) => {
      const forward = httpRequest(
        `${innerUrl}${req.url}`,
        { method: req.method, headers: { ...req.headers, host: new URL(issuer).host } },
        resolve,
      );
      forward.once('error', reject);
      forward.end(body);
    });
    let payload = await readAll(answer);
    const headers = { ...answer.headers };
    if (url.pathname === '/token' && state.tamper !== 'none' && answer.statusCode === 200) {
      const json = JSON.parse(payload.toString()) as { id_token?: string };
      if (json.id_token) json.id_token = await tamperWith(json.id_token);
      payload = Buffer.from(JSON.stringify(json));
      delete headers['content-length'];
    }
    res.writeHead(answer.statusCode ?? 502, headers);
    res.end(payload);
  }

  return state;
}
