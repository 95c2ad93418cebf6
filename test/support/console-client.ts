/**
 * A console client as a browser is one: a cookie jar for one origin, the CSRF
 * token the console hands out, and JSON requests to /console/api. Requests can
 * leave the token out (or send another) to test the refusals.
 */
export interface ConsoleResponse<T = Record<string, unknown>> {
  status: number;
  headers: Headers;
  json: T & { error?: { message: string; type: string; param: string | null; code: string | null } };
  /** Every Set-Cookie line of the answer, as sent. */
  setCookies: string[];
}

export class ConsoleClient {
  readonly cookies = new Map<string, string>();
  csrf = '';

  constructor(
    readonly baseUrl: string,
    /** Sent as X-Forwarded-For, so throttling by address can be tested per client behind TRUST_PROXY. */
    readonly forwardedFor?: string,
    /** Sent as User-Agent, so what the audit log keeps of it can be checked. */
    readonly userAgent?: string,
  ) {}

  /** What every request to the gateway carries of where it comes from. */
  private originHeaders(): Record<string, string> {
    return {
      ...(this.forwardedFor ? { 'x-forwarded-for': this.forwardedFor } : {}),
      ...(this.userAgent ? { 'user-agent': this.userAgent } : {}),
    };
  }

  private cookieHeader(): string {
    return [...this.cookies].map(([name, value]) => `${name}=${value}`).join('; ');
  }

  async request<T = Record<string, unknown>>(
    method: string,
    path: string,
    body?: unknown,
    options: { csrf?: string | false; headers?: Record<string, string> } = {},
  ): Promise<ConsoleResponse<T>> {
    const headers: Record<string, string> = { ...this.originHeaders(), ...(options.headers ?? {}) };
    const cookie = this.cookieHeader();
    if (cookie) headers.cookie = cookie;
    if (body !== undefined) headers['content-type'] = 'application/json';
    const token = options.csrf === undefined ? this.csrf : options.csrf;
    if (token && method !== 'GET') headers['x-csrf-token'] = token;
    const res = await fetch(`${this.baseUrl}${path}`, {
      method,
      headers,
      body: body === undefined ? undefined : typeof body === 'string' ? body : JSON.stringify(body),
    });
    const setCookies = this.keepCookies(res);
    const text = await res.text();
    let json: ConsoleResponse<T>['json'];
    try {
      json = JSON.parse(text) as ConsoleResponse<T>['json'];
    } catch {
      json = { raw: text } as unknown as ConsoleResponse<T>['json'];
    }
    const fresh = (json as { csrf_token?: unknown }).csrf_token;
    if (typeof fresh === 'string') this.csrf = fresh;
    return { status: res.status, headers: res.headers, json, setCookies };
  }

  /** Keeps what an answer's Set-Cookie lines set (and drops what they clear); returns the lines. */
  private keepCookies(res: Response): string[] {
    const setCookies = res.headers.getSetCookie();
    for (const line of setCookies) {
      const [pair] = line.split(';');
      const at = pair!.indexOf('=');
      const name = pair!.slice(0, at).trim();
      const value = pair!.slice(at + 1).trim();
      if (value === '' || /max-age=0|expires=Thu, 01 Jan 1970/i.test(line)) this.cookies.delete(name);
      else this.cookies.set(name, value);
    }
    return setCookies;
  }

  /**
   * Goes to `url` as a browser's address bar does, following redirects (to other origins too: an identity
   * provider's pages), with this jar's cookies (their names do not clash with the provider's), until an answer is
   * not a redirect or `stopAt` says the next place is where to stop; returns that place, not fetched.
   */
  async navigate(url: string, stopAt: (next: URL) => boolean = () => false): Promise<{ url: URL; status: number }> {
    let at = new URL(url, this.baseUrl);
    for (let hop = 0; hop < 20; hop++) {
      const cookie = this.cookieHeader();
      // The gateway sees where the browser comes from; the provider's pages see the browser as it is.
      const headers = {
        ...(at.origin === new URL(this.baseUrl).origin ? this.originHeaders() : {}),
        ...(cookie ? { cookie } : {}),
      };
      const res = await fetch(at, { redirect: 'manual', headers, signal: AbortSignal.timeout(20_000) });
      this.keepCookies(res);
      await res.arrayBuffer();
      const location = res.headers.get('location');
      if (res.status < 300 || res.status >= 400 || !location) return { url: at, status: res.status };
      const next = new URL(location, at);
      if (stopAt(next)) return { url: next, status: res.status };
      at = next;
    }
    throw new Error(`more than 20 redirects from ${url}`);
  }

  /** Fetches the pre-session CSRF token, as the sign-in page does on load. */
  async open(): Promise<void> {
    await this.request('GET', '/console/api/session');
  }

  async signIn(email: string, password: string): Promise<ConsoleResponse> {
    if (!this.csrf) await this.open();
    return this.request('POST', '/console/api/session', { email, password });
  }
}
