import type { ConsoleBoot } from './types';

/*
 * What the page's HTML brought for the script (api/console/routes.ts puts it in `<meta name="switchyard-boot">`):
 * the settings, the session and the person's teams, as `/config`, `/session` and `/teams` would answer, so the first
 * page of a visit is drawn at once, its own data its only round of calls. Read once: the tag is taken out, and what
 * comes later (a sign-in, a retry) asks the API as before. Anything not of that shape is no boot data at all.
 */

const isObject = (value: unknown): value is Record<string, unknown> =>
  typeof value === 'object' && value !== null && !Array.isArray(value);

function bootOf(value: unknown): ConsoleBoot | undefined {
  if (
    !isObject(value) ||
    !isObject(value.config) ||
    !isObject(value.session) ||
    typeof value.session.csrf_token !== 'string'
  )
    return undefined;
  const { account } = value.session;
  if (account !== null && !(isObject(account) && typeof account.id === 'string' && typeof account.role === 'string'))
    return undefined;
  const { teams } = value;
  // Teams come with a signed-in session, and only then.
  if (account === null ? teams !== null : !(isObject(teams) && Array.isArray(teams.data))) return undefined;
  return value as unknown as ConsoleBoot;
}

/** The boot data of this page's HTML, taken out of it; undefined when it has none (or none readable). */
export function takeBoot(): ConsoleBoot | undefined {
  const tag = document.querySelector('meta[name="switchyard-boot"]');
  if (!tag) return undefined;
  tag.remove();
  try {
    return bootOf(JSON.parse(tag.getAttribute('content') ?? ''));
  } catch {
    return undefined;
  }
}
