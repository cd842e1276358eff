import net from 'node:net';

export type IpMatcher = (ip: string) => boolean;

/** Matches addresses against TRUST_PROXY entries (plain IPs or CIDRs, v4 and v6). */
export function createIpMatcher(entries: readonly string[]): IpMatcher {
  if (entries.length === 0) return () => false;
  const list = new net.BlockList();
  for (const e of entries) {
    const [addr, bits] = e.split('/') as [string, string | undefined];
    const type = net.isIPv6(addr) ? 'ipv6' : 'ipv4';
    if (bits === undefined) list.addAddress(addr, type);
    else list.addSubnet(addr, Number(bits), type);
  }
  return (ip) => net.isIP(ip) !== 0 && list.check(ip, net.isIPv6(ip) ? 'ipv6' : 'ipv4');
}

/** `::ffff:1.2.3.4` (any spelling of the mapped prefix) is the IPv4 client 1.2.3.4. */
const MAPPED_V4 = /^(?:0{0,4}:){0,5}ffff:(\d+\.\d+\.\d+\.\d+)$/i;

/**
 * One X-Forwarded-For entry as an address, or null. Proxies write `host:port` (`1.1.1.1:80`) and
 * `[v6]:port` (`[2001:db8::1]:443`, RFC 7239's form) as well as the bare address; dropping those
 * would make every client of such a proxy look like the proxy itself.
 */
export function forwardedAddress(entry: string): string | null {
  let s = entry.trim();
  const bracketed = /^\[([^\]]+)\](?::\d{1,5})?$/.exec(s);
  if (bracketed) s = bracketed[1]!;
  else if (/^\d+\.\d+\.\d+\.\d+:\d{1,5}$/.test(s)) s = s.slice(0, s.lastIndexOf(':'));
  if (net.isIP(s) === 0) return null;
  return MAPPED_V4.exec(s)?.[1] ?? s;
}

/**
 * The client's address: the socket peer, unless that peer is a trusted proxy, in which case the
 * rightmost X-Forwarded-For entry that is not itself a trusted proxy.
 */
export function clientIp(peer: string, forwardedFor: string | undefined, trusted: IpMatcher): string {
  if (forwardedFor === undefined || !trusted(peer)) return peer;
  const hops = forwardedFor.split(',').map(forwardedAddress).filter((s): s is string => s !== null);
  for (let i = hops.length - 1; i >= 0; i--) {
    if (!trusted(hops[i]!)) return hops[i]!;
  }
  return hops[0] ?? peer;
}

/** The eight 16-bit groups of an IPv6 address (an embedded IPv4 tail read as two groups). */
function v6Groups(ip: string): number[] {
  let s = ip.replace(/%.*$/, ''); // a zone id names an interface, not a client
  const v4 = /(\d+)\.(\d+)\.(\d+)\.(\d+)$/.exec(s);
  if (v4) {
    const [a, b, c, d] = v4.slice(1).map(Number) as [number, number, number, number];
    s = `${s.slice(0, v4.index)}${((a << 8) | b).toString(16)}:${((c << 8) | d).toString(16)}`;
  }
  const [head, tail] = s.split('::') as [string, string | undefined];
  const part = (p: string | undefined): number[] => (p ? p.split(':').map((g) => parseInt(g, 16)) : []);
  const left = part(head);
  const right = part(tail);
  return [...left, ...Array<number>(8 - left.length - right.length).fill(0), ...right];
}

/**
 * Whose budget a request spends: an IPv4 address as it is, an IPv6 address as its /64. A /64 is
 * what one subscriber line or host gets (and privacy extensions rotate the rest at will), so
 * counting each full IPv6 address would give its holder 2^64 budgets.
 */
export function budgetAddress(ip: string): string {
  const mapped = MAPPED_V4.exec(ip);
  if (mapped) return mapped[1]!;
  if (!net.isIPv6(ip)) return ip;
  const g = v6Groups(ip);
  return `${g.slice(0, 4).map((n) => n.toString(16)).join(':')}::/64`;
}
