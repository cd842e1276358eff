import { test } from 'node:test';
import assert from 'node:assert/strict';
import { budgetAddress, clientIp, createIpMatcher, forwardedAddress } from '../src/http/client-ip.ts';

test('X-Forwarded-For is believed only from trusted proxies', () => {
  const trusted = createIpMatcher(['10.0.0.0/8', '127.0.0.1', '::1']);
  // Untrusted peer: its header is ignored, whatever it claims.
  assert.equal(clientIp('203.0.113.9', '1.2.3.4', trusted), '203.0.113.9');
  // Trusted peer: the rightmost hop that is not itself a trusted proxy.
  assert.equal(clientIp('127.0.0.1', '1.2.3.4, 198.51.100.7, 10.1.2.3', trusted), '198.51.100.7');
  assert.equal(clientIp('::1', '2001:db8::5', trusted), '2001:db8::5');
  // Garbage entries are skipped; only proxies in the chain: the leftmost.
  assert.equal(clientIp('127.0.0.1', 'not-an-ip, 10.9.9.9', trusted), '10.9.9.9');
  assert.equal(clientIp('127.0.0.1', undefined, trusted), '127.0.0.1');
  // Nothing trusted by default.
  assert.equal(clientIp('127.0.0.1', '1.2.3.4', createIpMatcher([])), '127.0.0.1');
});

test('X-Forwarded-For entries with a port name their address (host:port, [v6]:port)', () => {
  const trusted = createIpMatcher(['127.0.0.1']);
  assert.equal(clientIp('127.0.0.1', '1.1.1.1:80', trusted), '1.1.1.1');
  assert.equal(clientIp('127.0.0.1', '[2001:db8::1]:443', trusted), '2001:db8::1');
  assert.equal(clientIp('127.0.0.1', '[2001:db8::2]', trusted), '2001:db8::2');
  assert.equal(clientIp('127.0.0.1', '203.0.113.4:5123, 127.0.0.1:80', trusted), '203.0.113.4');
  assert.equal(clientIp('127.0.0.1', '::ffff:198.51.100.3', trusted), '198.51.100.3');
  // A bare IPv6 address is not an address with a port; garbage stays garbage.
  assert.equal(forwardedAddress('2001:db8::1:443'), '2001:db8::1:443');
  for (const junk of ['1.1.1.1:', '1.1.1.1:80:80', '[2001:db8::1]:', '[1.1.1.1]x', 'host.example:80', '1.1.1.1:123456']) {
    assert.equal(forwardedAddress(junk), null, junk);
  }
});

test('budgets see IPv4 as is, IPv4-mapped IPv6 as IPv4 and IPv6 as its /64', () => {
  assert.equal(budgetAddress('203.0.113.9'), '203.0.113.9');
  assert.equal(budgetAddress('::ffff:203.0.113.9'), '203.0.113.9');
  assert.equal(budgetAddress('0:0:0:0:0:ffff:203.0.113.9'), '203.0.113.9');
  assert.equal(budgetAddress('2001:db8:1:2:3:4:5:6'), '2001:db8:1:2::/64');
  assert.equal(budgetAddress('2001:0db8:0001:0002:ffff::1'), '2001:db8:1:2::/64');
  assert.equal(budgetAddress('2001:db8::1'), '2001:db8:0:0::/64');
  assert.equal(budgetAddress('::1'), '0:0:0:0::/64');
  assert.equal(budgetAddress('fe80::1%eth0'), 'fe80:0:0:0::/64');
  assert.equal(budgetAddress('64:ff9b::203.0.113.9'), '64:ff9b:0:0::/64');
});
