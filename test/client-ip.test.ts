import { test } from 'node:test';
import assert from 'node:assert/strict';
import { clientIp, createIpMatcher } from '../src/http/client-ip.ts';

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
