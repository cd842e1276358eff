// The one uWebSockets.js binding: it is native, and when it does not load, the message says what to do.
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { isNative, loadHint, loadUws } from '../src/http/uws.ts';

describe('the uWebSockets.js binding', () => {
  it('loads as native code on this Node', () => {
    const b = loadUws();
    assert.equal(isNative(b.uws.App), true, `Node ${process.version}`);
    assert.equal(isNative(() => {}), false);
  });

  it('names the glibc found and needed, and the Node to use, when the build for Node 22+ cannot load', () => {
    const hint = loadHint('137', 'linux', '2.36');
    assert.match(hint, /needs glibc 2\.38/);
    assert.match(hint, /this system has glibc 2\.36/);
    assert.match(hint, /Node 20 or 21/);
    assert.match(loadHint('127', 'linux', '2.31'), /glibc 2\.31/);
  });

  it('says nothing more where glibc is not the reason', () => {
    assert.equal(loadHint('137', 'linux', '2.41'), '');
    assert.equal(loadHint('115', 'linux', '2.36'), '');
    assert.equal(loadHint('137', 'darwin', undefined), '');
    assert.match(loadHint('115', 'linux', '2.17'), /2\.27 or newer/);
  });
});
