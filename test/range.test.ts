import { describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { contentDisposition, parseRange } from '../src/http/range.ts';

describe('parseRange', () => {
  const partial = (start: number, end: number) => ({ kind: 'partial', start, end });
  const full = { kind: 'full' };
  const unsatisfiable = { kind: 'unsatisfiable' };

  test('no header is the whole representation', () => {
    assert.deepEqual(parseRange(undefined, 10), full);
  });

  test('first-last ranges', () => {
    assert.deepEqual(parseRange('bytes=0-0', 10), partial(0, 0));
    assert.deepEqual(parseRange('bytes=2-5', 10), partial(2, 5));
    assert.deepEqual(parseRange('bytes=9-9', 10), partial(9, 9));
    assert.deepEqual(parseRange('bytes=0-9', 10), partial(0, 9));
  });

  test('open-ended ranges run to the last byte', () => {
    assert.deepEqual(parseRange('bytes=0-', 10), partial(0, 9));
    assert.deepEqual(parseRange('bytes=9-', 10), partial(9, 9));
  });

  test('a last position beyond the end is clamped', () => {
    assert.deepEqual(parseRange('bytes=5-100', 10), partial(5, 9));
    assert.deepEqual(parseRange('bytes=0-99999999999999999999', 10), partial(0, 9));
  });

  test('suffix ranges', () => {
    assert.deepEqual(parseRange('bytes=-1', 10), partial(9, 9));
    assert.deepEqual(parseRange('bytes=-3', 10), partial(7, 9));
    assert.deepEqual(parseRange('bytes=-10', 10), partial(0, 9));
    // RFC 9110 14.1.2: a suffix longer than the representation selects all of it.
    assert.deepEqual(parseRange('bytes=-11', 10), partial(0, 9));
    assert.deepEqual(parseRange('bytes=-99999999999999999999', 10), partial(0, 9));
  });

  test('a first position at or past the end is unsatisfiable', () => {
    assert.deepEqual(parseRange('bytes=10-', 10), unsatisfiable);
    assert.deepEqual(parseRange('bytes=10-20', 10), unsatisfiable);
    assert.deepEqual(parseRange('bytes=99999999999999999999-', 10), unsatisfiable);
  });

  test('a zero-length suffix is unsatisfiable', () => {
    assert.deepEqual(parseRange('bytes=-0', 10), unsatisfiable);
  });

  test('any range of an empty representation is unsatisfiable', () => {
    assert.deepEqual(parseRange('bytes=0-', 0), unsatisfiable);
    assert.deepEqual(parseRange('bytes=0-0', 0), unsatisfiable);
    assert.deepEqual(parseRange('bytes=-5', 0), unsatisfiable);
  });

  test('invalid, multi-range and foreign-unit headers are ignored', () => {
    for (const h of [
      'bytes=5-2',
      'bytes=0-1,3-4',
      'bytes=0-1, 3-4',
      'items=0-1',
      'bytes=-',
      'bytes=',
      'bytes',
      'bytes=abc',
      'bytes=1.5-2',
      'bytes=--1',
      '',
      '0-1',
    ]) {
      assert.deepEqual(parseRange(h, 10), full, h);
    }
  });

  test('the unit is case-insensitive and whitespace around tokens is tolerated', () => {
    assert.deepEqual(parseRange('Bytes=1-2', 10), partial(1, 2));
    assert.deepEqual(parseRange('BYTES=1-2', 10), partial(1, 2));
    assert.deepEqual(parseRange(' bytes = 1 - 2 ', 10), partial(1, 2));
  });

  test('partial results always lie inside the representation', () => {
    for (const size of [1, 2, 7, 1000]) {
      for (const h of ['bytes=0-0', 'bytes=0-', 'bytes=-1', `bytes=-${size + 5}`, `bytes=${size - 1}-`, `bytes=0-${size * 3}`]) {
        const r = parseRange(h, size);
        assert.equal(r.kind, 'partial', `${h} of ${size}`);
        if (r.kind !== 'partial') continue;
        assert.ok(r.start >= 0 && r.start <= r.end && r.end <= size - 1, `${h} of ${size}: ${r.start}-${r.end}`);
      }
    }
  });
});

describe('contentDisposition', () => {
  /** Parses `filename` and the RFC 5987 `filename*` out of a header value. */
  const parse = (v: string) => ({
    type: v.split(';')[0]!.trim(),
    ascii: /;\s*filename="((?:[^"\\]|\\.)*)"/.exec(v)?.[1],
    ext: /;\s*filename\*=UTF-8''([^;\s]*)/.exec(v)?.[1],
  });

  test('an ASCII name is sent as a plain quoted filename', () => {
    assert.equal(contentDisposition('report.pdf'), 'attachment; filename="report.pdf"');
    assert.equal(contentDisposition('my file (1).txt'), 'attachment; filename="my file (1).txt"');
    assert.equal(contentDisposition("it's *a*; b=c.txt"), `attachment; filename="it's *a*; b=c.txt"`);
  });

  test('the type can be inline', () => {
    assert.equal(contentDisposition('a.png', 'inline'), 'inline; filename="a.png"');
    assert.equal(parse(contentDisposition('é.png', 'inline')).type, 'inline');
  });

  test('a non-ASCII name gets an ASCII fallback and the exact name in filename*', () => {
    const v = contentDisposition('résumé.pdf');
    assert.equal(v, `attachment; filename="r_sum_.pdf"; filename*=UTF-8''r%C3%A9sum%C3%A9.pdf`);
  });

  test('quotes, backslashes and percent signs never reach the quoted fallback', () => {
    for (const name of ['a"b.txt', 'a\\b.txt', '100%.txt', '"', '\\"; filename="evil.exe']) {
      const p = parse(contentDisposition(name));
      assert.ok(p.ascii !== undefined, name);
      assert.doesNotMatch(p.ascii, /["\\%]/, name);
      assert.equal(decodeURIComponent(p.ext ?? ''), name, name);
    }
  });

  test('filename* round-trips every name and uses only RFC 5987 attr-chars', () => {
    const names = ['naïve café.txt', '日本語のファイル.pdf', '😀 party.gif', "it's (ü) *test*.txt", 'tab\there.txt', 'Ωmega;,=.bin'];
    for (const name of names) {
      const v = contentDisposition(name);
      const p = parse(v);
      assert.equal(p.type, 'attachment');
      assert.ok(p.ext !== undefined, `${name}: ${v}`);
      assert.match(p.ext, /^(?:[A-Za-z0-9!#$&+\-.^_`|~]|%[0-9A-F]{2})*$/, name);
      assert.equal(decodeURIComponent(p.ext), name);
      assert.match(p.ascii ?? '', /^[\x20-\x7e]*$/, name);
      assert.doesNotMatch(v, /[\r\n]/, name);
    }
  });
});
