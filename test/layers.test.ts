/**
 * The shape of src/ (docs/internals.md, "Layers"): dependency-cruiser holds the layer rules and "no
 * cycles" (.dependency-cruiser.cjs); this file runs it, and holds the size limits of files and
 * functions.
 */
import { describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import ts from 'typescript';
import { ROOT } from './helpers/server.ts';

const MAX_FILE_LINES = 300;
const MAX_FUNCTION_LINES = 80;

const sources = (dir: string): string[] =>
  fs.readdirSync(dir, { withFileTypes: true }).flatMap((e) => {
    const p = path.join(dir, e.name);
    if (e.isDirectory()) return sources(p);
    return /\.(ts|mjs)$/.test(e.name) ? [p] : [];
  });

export interface LongFunction {
  readonly where: string;
  readonly name: string;
  readonly lines: number;
}

/**
 * A function's length is its own lines: from its first line to its last, less the inner lines of
 * the functions written inside it, which are measured on their own. A factory that returns its
 * methods as closures is thus held to the limit method by method, as a class would be.
 */
export function longFunctions(file: string, text: string, limit: number): LongFunction[] {
  const sf = ts.createSourceFile(file, text, ts.ScriptTarget.Latest, true);
  const line = (pos: number): number => sf.getLineAndCharacterOfPosition(pos).line;
  const hasBody = (n: ts.Node): n is ts.FunctionLikeDeclaration => ts.isFunctionLike(n) && (n as ts.FunctionLikeDeclaration).body !== undefined;
  const ownLines = (fn: ts.FunctionLikeDeclaration): number => {
    const first = line(fn.getStart(sf));
    const last = line(fn.end);
    let inner = 0;
    const skipInner = (n: ts.Node): void => {
      if (hasBody(n)) {
        inner += Math.max(0, line(n.end) - line(n.getStart(sf)) - 1);
        return;
      }
      ts.forEachChild(n, skipInner);
    };
    ts.forEachChild(fn, skipInner);
    return last - first + 1 - inner;
  };
  const nameOf = (fn: ts.FunctionLikeDeclaration): string => {
    if (fn.name) return fn.name.getText(sf);
    const p = fn.parent;
    if ((ts.isVariableDeclaration(p) || ts.isPropertyAssignment(p)) && p.name) return p.name.getText(sf);
    return '(anonymous)';
  };
  const out: LongFunction[] = [];
  const visit = (n: ts.Node): void => {
    if (hasBody(n)) {
      const lines = ownLines(n);
      if (lines > limit) out.push({ where: `${file}:${line(n.getStart(sf)) + 1}`, name: nameOf(n), lines });
    }
    ts.forEachChild(n, visit);
  };
  visit(sf);
  return out;
}

describe('the layers of src/', () => {
  test('imports point down the layers and nothing imports in a circle (dependency-cruiser)', () => {
    const cli = path.join(ROOT, 'node_modules/dependency-cruiser/bin/dependency-cruise.mjs');
    const run = spawnSync(process.execPath, [cli, '--config', '.dependency-cruiser.cjs', '--output-type', 'err', 'src'], {
      cwd: ROOT,
      encoding: 'utf8',
    });
    assert.equal(run.status, 0, `dependency-cruiser found layer violations or cycles:\n${run.stdout}${run.stderr}`);
  });

  test(`no source file is over ${MAX_FILE_LINES} lines`, () => {
    const long = sources(path.join(ROOT, 'src'))
      .map((f) => ({ f: path.relative(ROOT, f), n: fs.readFileSync(f, 'utf8').trimEnd().split('\n').length }))
      .filter((x) => x.n > MAX_FILE_LINES);
    assert.deepEqual(long, [], 'split these files into smaller modules');
  });

  test(`no function is over ${MAX_FUNCTION_LINES} lines of its own`, () => {
    const long = sources(path.join(ROOT, 'src')).flatMap((f) => longFunctions(path.relative(ROOT, f), fs.readFileSync(f, 'utf8'), MAX_FUNCTION_LINES));
    assert.deepEqual(long, [], 'break these functions into named steps');
  });

  test('a function is measured without the functions written inside it', () => {
    const body = (n: number): string => Array.from({ length: n }, (_, i) => `  const v${i} = ${i};`).join('\n');
    const text = `function outer() {\n${body(10)}\n  const inner = () => {\n${body(100)}\n  };\n  return inner;\n}\n`;
    const found = longFunctions('x.ts', text, 80);
    assert.deepEqual(found.map((f) => [f.name, f.lines]), [['inner', 102]]);
    assert.deepEqual(longFunctions('x.ts', text, 10).map((f) => [f.name, f.lines]), [['outer', 15], ['inner', 102]]);
  });
});
