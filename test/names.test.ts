import { test } from 'node:test';
import assert from 'node:assert/strict';
import { cleanDescription, cleanFileName } from '../src/util/names.ts';

test('cleanFileName keeps the last path segment without control characters', () => {
  assert.equal(cleanFileName('../../etc/passwd'), 'passwd');
  assert.equal(cleanFileName('C:\\Users\\x.txt'), 'x.txt');
  assert.equal(cleanFileName('a\u0000b\u202e.txt'), 'ab.txt');
  for (const empty of [undefined, '', '..', '.', '/', 'a/', '  ']) assert.equal(cleanFileName(empty), 'file');
});

test('a name over 255 code points is cut in its stem, keeping a short extension', () => {
  const cut = cleanFileName(`${'x'.repeat(300)}.pdf`);
  assert.equal([...cut].length, 255);
  assert.equal(cut, `${'x'.repeat(251)}.pdf`);
  // Code points, not UTF-16 units: an astral character is never split.
  const emoji = cleanFileName(`${'😀'.repeat(300)}.tar.gz`);
  assert.equal([...emoji].length, 255);
  assert.ok(emoji.endsWith('😀.gz'));
  // No dot, a leading dot only, or an "extension" too long to be one: a plain cut.
  assert.equal(cleanFileName('y'.repeat(300)), 'y'.repeat(255));
  assert.equal(cleanFileName(`.${'z'.repeat(300)}`), `.${'z'.repeat(254)}`);
  const longExt = `a.${'b'.repeat(300)}`;
  assert.equal(cleanFileName(longExt), longExt.slice(0, 255));
  // At the limit nothing changes.
  const exact = `${'w'.repeat(251)}.txt`;
  assert.equal(cleanFileName(exact), exact);
});

test('cleanDescription drops bidirectional overrides and isolates, keeps line breaks and other text', () => {
  assert.equal(cleanDescription('\u202eevil \u2066desc\u2069'), 'evil desc');
  assert.equal(cleanDescription('two\nlines <b>and</b> émoji 😀'), 'two\nlines <b>and</b> émoji 😀');
  assert.equal(cleanDescription('\u202a\u202c'), null);
  assert.equal(cleanDescription(null), null);
});
