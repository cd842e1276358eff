import type { IpMatcher } from './client-ip.ts';

/** What the origin of a request is decided from: its headers and the socket peer. */
export interface OriginSource {
  readonly headers: Readonly<Record<string, string | undefined>>;
  readonly remoteIp: string;
}

/** The public origin (`scheme://host[:port]`, no trailing slash) that links in an answer to this request name. */
export type OriginOf = (req: OriginSource) => string;

const LABEL = '[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?';
// A DNS name, an IPv4 address or a bracketed IPv6 address, then an optional port: nothing that could
// close an HTML attribute, split a header or point a link at a path.
const HOST_RE = new RegExp(`^(?:${LABEL}(?:\\.${LABEL})*\\.?|\\[[0-9A-Fa-f:.]{2,45}\\])(?::(\\d{1,5}))?$`);

/** A Host (or X-Forwarded-Host) value fit to put in a link, lower-cased; null when malformed. */
export function validHost(value: string | undefined): string | null {
  if (value === undefined || value.length > 255) return null;
  const m = HOST_RE.exec(value);
  if (!m || (m[1] !== undefined && Number(m[1]) > 65535)) return null;
  return value.toLowerCase();
}

/** The first entry of a header a chain of proxies may have appended to ("a, b"). */
const first = (v: string | undefined): string | undefined => v?.split(',')[0]?.trim();

/**
 * One place decides which origin links name. An operator-set BASE_URL always wins. Without it, a
 * request names the origin it came to: its Host, or X-Forwarded-Proto/-Host when the peer is a
 * TRUST_PROXY address (anyone else could make our pages link elsewhere). A missing or malformed
 * Host falls back to `fallback()` (http://localhost:PORT), the origin mails and background work use.
 */
export function createOriginOf(o: { baseUrl: string | undefined; trusted: IpMatcher; fallback: () => string }): OriginOf {
  if (o.baseUrl !== undefined) {
    const fixed = o.baseUrl.replace(/\/+$/, '');
    return () => fixed;
  }
  return (req) => {
    let scheme = 'http';
    let host = req.headers.host;
    if (o.trusted(req.remoteIp)) {
      const proto = first(req.headers['x-forwarded-proto'])?.toLowerCase();
      if (proto === 'http' || proto === 'https') scheme = proto;
      host = first(req.headers['x-forwarded-host']) ?? host;
    }
    const valid = validHost(host);
    return valid === null ? o.fallback() : `${scheme}://${valid}`;
  };
}
