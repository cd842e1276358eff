import dns from 'node:dns';
import net from 'node:net';

/**
 * Addresses a server-made request must never reach unless the operator allows it: loopback, private,
 * shared, link-local (cloud metadata at 169.254.169.254 among them), unspecified, multicast and the
 * documentation and benchmarking ranges, in IPv4 and IPv6 (IPv4-mapped IPv6 is checked as IPv4).
 */
const NOT_PUBLIC = new net.BlockList();
for (const [net4, bits] of [
  ['0.0.0.0', 8], ['10.0.0.0', 8], ['100.64.0.0', 10], ['127.0.0.0', 8], ['169.254.0.0', 16], ['172.16.0.0', 12],
  ['192.0.0.0', 24], ['192.0.2.0', 24], ['192.168.0.0', 16], ['198.18.0.0', 15], ['198.51.100.0', 24],
  ['203.0.113.0', 24], ['224.0.0.0', 4], ['240.0.0.0', 4],
] as const) NOT_PUBLIC.addSubnet(net4, bits, 'ipv4');
for (const [net6, bits] of [
  ['::', 96], ['::1', 128], ['64:ff9b::', 96], ['64:ff9b:1::', 48], ['2002::', 16], ['100::', 64], ['2001:db8::', 32], ['fc00::', 7], ['fe80::', 10], ['fec0::', 10], ['ff00::', 8],
] as const) NOT_PUBLIC.addSubnet(net6, bits, 'ipv6');

export function isPublicAddress(ip: string): boolean {
  const mapped = /^::ffff:(\d+\.\d+\.\d+\.\d+)$/i.exec(ip)?.[1];
  if (mapped) return isPublicAddress(mapped);
  const family = net.isIP(ip);
  if (family === 0) return false;
  return !NOT_PUBLIC.check(ip, family === 4 ? 'ipv4' : 'ipv6');
}

/** Lookups at once: each holds a thread of the pool that file I/O also uses, for as long as its name server takes. */
const MAX_LOOKUPS = 2;
const LOOKUP_TIMEOUT_MS = 5_000;
let lookups = 0;
const waiting: Array<() => void> = [];

async function lookup(host: string): Promise<dns.LookupAddress[]> {
  if (lookups >= MAX_LOOKUPS) await new Promise<void>((go) => waiting.push(go));
  lookups++;
  let timer: NodeJS.Timeout | undefined;
  try {
    return await Promise.race([
      dns.promises.lookup(host, { all: true, verbatim: true }),
      new Promise<never>((_, fail) => {
        timer = setTimeout(() => fail(new Error(`${host} did not resolve within ${LOOKUP_TIMEOUT_MS / 1000} s`)), LOOKUP_TIMEOUT_MS);
      }),
    ]);
  } finally {
    clearTimeout(timer);
    lookups--;
    waiting.shift()?.();
  }
}

/**
 * Every address `host` resolves to (an IP literal is its own), refusing the name when any of them is
 * not public (unless `allowPrivate`): a name with one public and one private address could be steered
 * to the private one. The error names the host, not the address, so it tells nothing of the network.
 */
export async function vettedAddresses(host: string, allowPrivate: boolean): Promise<dns.LookupAddress[]> {
  const bare = host.startsWith('[') ? host.slice(1, -1) : host;
  const found = net.isIP(bare) ? [{ address: bare, family: net.isIP(bare) }] : await lookup(bare);
  if (found.length === 0) throw new Error(`${host} resolves to no address`);
  if (!allowPrivate && found.some((a) => !isPublicAddress(a.address))) {
    throw new Error(`${host} resolves to a loopback, private, link-local or metadata address`);
  }
  return found;
}
