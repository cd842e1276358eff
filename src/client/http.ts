// The client's small requests (bundle info, access, the tus preflight): fetch, with a network error
// or an error answer turned into the failure it means. Transfers stream through tus and download.ts.
import { ClientFailure, EXIT, failureOf, unreachable } from './failure.ts';

/** Requests that are not transfers answer within this, or the server counts as unreachable. */
const ANSWER_MS = 30_000;

/** `raw` as an origin (`http://host:port`): a share link's path and fragment are not part of it. */
export function originOf(raw: string, what: string): string {
  let u: URL;
  try {
    u = new URL(raw);
  } catch {
    throw new ClientFailure(EXIT.USAGE, `${what} is not a URL: ${raw}`);
  }
  if (u.protocol !== 'http:' && u.protocol !== 'https:') throw new ClientFailure(EXIT.USAGE, `${what} must be http or https: ${raw}`);
  return u.origin;
}

/** fetch, failing with exit status 2 when there is no answer. */
export async function call(url: string, init: RequestInit, doing: string): Promise<Response> {
  try {
    return await fetch(url, { redirect: 'manual', signal: AbortSignal.timeout(ANSWER_MS), ...init });
  } catch (err) {
    throw unreachable(err, new URL(url).origin, doing);
  }
}

/** The JSON of a 2xx answer; any other answer fails with what its status means. */
export async function jsonOf<T>(res: Response, doing: string): Promise<T> {
  const text = await res.text();
  if (res.status < 200 || res.status > 299) throw failureOf(res.status, text, res.headers.get('retry-after'), doing);
  try {
    return JSON.parse(text) as T;
  } catch {
    throw new ClientFailure(EXIT.UNREACHABLE, `${doing}: the server's answer is not JSON (is ${new URL(res.url || 'http://x').origin} a Sluice server?)`);
  }
}

/** Headers every request of a caller carries: its API key, when it has one. */
export function authHeaders(key: string | null): Record<string, string> {
  return key ? { Authorization: `Bearer ${key}` } : {};
}
