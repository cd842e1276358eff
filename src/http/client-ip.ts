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

/**
 * The client's address: the socket peer, unless that peer is a trusted proxy, in which case the
 * rightmost X-Forwarded-For entry that is not itself a trusted proxy.
 */
export function clientIp(peer: string, forwardedFor: string | undefined, trusted: IpMatcher): string {
  if (forwardedFor === undefined || !trusted(peer)) return peer;
  const hops = forwardedFor.split(',').map((s) => s.trim()).filter((s) => net.isIP(s) !== 0);
  for (let i = hops.length - 1; i >= 0; i--) {
    if (!trusted(hops[i]!)) return hops[i]!;
  }
  return hops[0] ?? peer;
}
