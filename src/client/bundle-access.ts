// Finding a share link's bundle and getting in: the code behind a link (a vanity name is resolved
// by its share page), the bundle's file list, and an access token when it is password-protected.
import { read } from 'read';
import { authHeaders, call, jsonOf } from './http.ts';
import { ClientFailure, EXIT, failureOf } from './failure.ts';
import { passwordFrom } from './local-files.ts';

export interface RemoteFile {
  readonly id: number;
  readonly name: string;
  readonly size: number;
}

export interface BundleInfo {
  readonly short_code: string;
  readonly file_count: number;
  readonly is_encrypted: boolean;
  readonly files: readonly RemoteFile[];
}

export interface Opened {
  readonly origin: string;
  readonly info: BundleInfo;
  /** Headers every content request of this bundle carries (the access token, when locked). */
  readonly headers: Record<string, string>;
  /** The age identity from the link's `#key=`, or null. */
  readonly identity: string | null;
}

const CODE_RE = /^[A-Za-z0-9]{5}$/;

/** The origin, the name in the path (`/<code>`, `/<vanity>`, `/zip/<code>`) and the `#key=` of a link. */
export function parseLink(link: string): { origin: string; name: string; identity: string | null } {
  let u: URL;
  try {
    u = new URL(link);
  } catch {
    throw new ClientFailure(EXIT.USAGE, `not a share link: ${link}`);
  }
  const parts = u.pathname.split('/').filter(Boolean);
  const name = parts[0] === 'zip' ? parts[1] : parts[0];
  if ((u.protocol !== 'http:' && u.protocol !== 'https:') || !name || parts.length > (parts[0] === 'zip' ? 2 : 1)) {
    throw new ClientFailure(EXIT.USAGE, `not a share link (expected http(s)://host/CODE): ${link}`);
  }
  return { origin: u.origin, name: decodeURIComponent(name), identity: new URLSearchParams(u.hash.replace(/^#/, '')).get('key') };
}

/** The 5-character code behind `name`: its share page says (a vanity name may look like a code). */
async function codeOf(origin: string, name: string): Promise<string> {
  const res = await call(`${origin}/${encodeURIComponent(name)}`, {}, 'opening the link');
  await res.body?.cancel();
  if (res.status === 404) throw new ClientFailure(EXIT.REFUSED, `no such bundle at ${origin}/${name}: it expired, was deleted, or the link is mistyped`);
  if (res.status === 451) throw new ClientFailure(EXIT.REFUSED, `${origin}/${name} is unavailable for legal reasons`);
  if (res.status >= 400) throw failureOf(res.status, '', res.headers.get('retry-after'), 'opening the link');
  const code = res.headers.get('sluice-short-code') ?? (CODE_RE.test(name) ? name : null);
  if (!code) throw new ClientFailure(EXIT.REFUSED, `${origin}/${name} is not a Sluice share link`);
  return code;
}

async function infoOf(origin: string, code: string, headers: Record<string, string>): Promise<BundleInfo> {
  return jsonOf<BundleInfo>(await call(`${origin}/api/v1/bundle/${code}`, { headers }, 'reading the bundle'), 'reading the bundle');
}

async function askPassword(passwordFile: string | null): Promise<string> {
  if (passwordFile) return passwordFrom(passwordFile);
  if (!process.stdin.isTTY) throw new ClientFailure(EXIT.PASSWORD, 'the bundle is password-protected: give --password-file FILE');
  const typed = await read({ prompt: 'Password: ', silent: true, replace: '', output: process.stderr });
  if (typed === '') throw new ClientFailure(EXIT.PASSWORD, 'the bundle is password-protected: no password given');
  return typed;
}

export async function openBundle(link: string, o: { passwordFile: string | null; key: string | null }): Promise<Opened> {
  const { origin, name, identity } = parseLink(link);
  const code = await codeOf(origin, name);
  const headers = authHeaders(o.key);
  let info = await infoOf(origin, code, headers);
  // A locked bundle lists its count but not its files until a password (or its owner's key) opens it.
  if (info.file_count > 0 && info.files.length === 0) {
    const password = await askPassword(o.passwordFile);
    const res = await call(`${origin}/api/verify-access`, {
      method: 'POST',
      headers: { 'Content-Type': 'application/json' },
      body: JSON.stringify({ short_code: code, password }),
    }, 'unlocking the bundle');
    const { access_token } = await jsonOf<{ access_token: string }>(res, 'unlocking the bundle');
    headers['X-Access-Token'] = access_token;
    info = await infoOf(origin, code, headers);
  }
  return { origin, info, headers, identity };
}
