import assert from 'node:assert/strict';

export type Json = Record<string, unknown>;
export interface ErrorBody {
  error: { message: string; type: string; param: string | null; code: string | null };
}
export type AdminAnswer = { status: number; json: Json & ErrorBody };

/**
 * The admin API as a test calls it: JSON in and out with the admin token, to
 * the gateway `baseUrl()` names when the call is made (a test may restart it).
 * A string body is sent as it is (to send what is not JSON).
 */
export function adminClient(baseUrl: () => string, token: string) {
  return {
    async admin(method: string, path: string, body?: unknown): Promise<AdminAnswer> {
      const res = await fetch(`${baseUrl()}${path}`, {
        method,
        headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json' },
        body: body === undefined ? undefined : typeof body === 'string' ? body : JSON.stringify(body),
      });
      return { status: res.status, json: (await res.json()) as Json & ErrorBody };
    },
  };
}

/** The admin API's raw answers: a fetch with the admin token and a JSON body, to the gateway `baseUrl()` names. */
export function adminRequest(baseUrl: () => string, token: string) {
  return (method: string, path: string, body?: unknown): Promise<Response> =>
    fetch(`${baseUrl()}${path}`, {
      method,
      headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json' },
      body: body === undefined ? undefined : JSON.stringify(body),
    });
}

/** Awaits an admin call and checks it failed with `status` and the given error fields; returns the error. */
export async function expectAdminError(
  call: Promise<{ status: number; json: ErrorBody }>,
  status: number,
  expected: Partial<ErrorBody['error']>,
): Promise<ErrorBody['error']> {
  const { status: actual, json } = await call;
  assert.equal(actual, status, JSON.stringify(json));
  for (const [field, value] of Object.entries(expected))
    assert.equal(json.error[field as keyof ErrorBody['error']], value, `${field} of ${JSON.stringify(json)}`);
  return json.error;
}

/** A response's JSON, once it is asserted to be a 2xx (its status and body said otherwise). */
export async function okJson<T>(response: Promise<Response>): Promise<T> {
  const answer = await response;
  assert.ok(answer.ok, `${answer.status}: ${await answer.clone().text()}`);
  return (await answer.json()) as T;
}
