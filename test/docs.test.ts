/**
 * Every ```sh block of README.md and docs/*.md runs as written, in order, against a real server:
 * `http://localhost:8080` in a block stands for that server (BASE is set to it too). A block must
 * exit 0; a ```text block right after it is the output the text promises, `…` standing for
 * anything. A block the suite cannot run (a systemd install, a package install) follows a line
 * `<!-- not run: reason -->`; they are listed at the end. The blocks of one file share a shell
 * state (variables, functions) and a working directory, as a reader's terminal would.
 */
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { backends, ROOT, startServer, type TestServer } from './helpers/server.ts';

export interface DocBlock {
  readonly file: string;
  readonly line: number;
  readonly code: string;
  readonly expect: string | undefined;
  readonly notRun: string | undefined;
}

/** The ```sh blocks of a Markdown text, each with the ```text block that follows it and its not-run mark. */
export function shellBlocks(file: string, text: string): DocBlock[] {
  const lines = text.split('\n');
  const out: DocBlock[] = [];
  // Fences may be indented (inside a list item); the body loses that indentation.
  const fence = (from: number): { body: string; end: number } => {
    const indent = /^\s*/.exec(lines[from]!)![0].length;
    let end = from + 1;
    while (end < lines.length && !/^\s*```\s*$/.test(lines[end]!)) end++;
    return { body: lines.slice(from + 1, end).map((l) => l.slice(Math.min(indent, /^\s*/.exec(l)![0].length))).join('\n'), end };
  };
  for (let i = 0; i < lines.length; i++) {
    if (!/^\s*```sh\s*$/.test(lines[i]!)) {
      if (/^\s*```/.test(lines[i]!)) i = fence(i).end; // another language: skip its body
      continue;
    }
    let before = i - 1;
    while (before >= 0 && lines[before]!.trim() === '') before--;
    const notRun = /^\s*<!-- not run: (.+?) -->$/.exec(lines[before] ?? '')?.[1];
    const start = i;
    const { body, end } = fence(i);
    let next = end + 1;
    while (next < lines.length && lines[next]!.trim() === '') next++;
    let expect: string | undefined;
    if (/^\s*```text\s*$/.test(lines[next] ?? '')) {
      const t = fence(next);
      expect = t.body;
      i = t.end;
    } else i = end;
    out.push({ file, line: start + 1, code: body, expect, notRun });
  }
  return out;
}

/** Whether `output` is what `promised` shows, `…` standing for any text. */
export function outputMatches(output: string, promised: string): boolean {
  const norm = (s: string): string => s.split('\n').map((l) => l.trimEnd()).join('\n').trim();
  const pattern = norm(promised)
    .split('…')
    .map((part) => part.replace(/[.*+?^${}()|[\]\\]/g, '\\$&'))
    .join('[\\s\\S]*?');
  return new RegExp(`^${pattern}$`).test(norm(output));
}

// Runs before each block: the state the blocks before it left. After it (whatever its status) the
// variables and functions it made are kept for the next one.
const PROLOGUE = `__base=" $(compgen -v | tr '\\n' ' ') "
__save() {
  { for __v in $(compgen -v); do
      case "$__v" in __*|BASH*|FUNCNAME|PIPESTATUS|_) continue ;; esac
      case "$__base" in *" $__v "*) continue ;; esac
      declare -p "$__v" 2>/dev/null | grep -v '^declare -[a-zA-Z]*r'
    done
    declare -f | grep -v '^__save' ; } > .state.new 2>/dev/null || true
  mv .state.new .state
}
trap __save EXIT
[ -f .state ] && . ./.state
set -e
`;

const DOCS = ['README.md', ...fs.readdirSync(path.join(ROOT, 'docs')).filter((f) => f.endsWith('.md')).sort().map((f) => `docs/${f}`)];
const notRun: string[] = [];

for (const file of DOCS) {
  const blocks = shellBlocks(file, fs.readFileSync(path.join(ROOT, file), 'utf8'));
  for (const b of blocks) if (b.notRun !== undefined) notRun.push(`${b.file}:${b.line}: ${b.notRun}`);
  const runnable = blocks.filter((b) => b.notRun === undefined);
  if (runnable.length === 0) continue;

  describe(`shell examples of ${file}`, () => {
    let srv: TestServer;
    let work: string;
    before(async () => {
      // The anonymous budget as shipped: following the examples in order must not run out of it.
      // The webhook example's receiver runs on this machine, which the server may reach only when allowed.
      srv = await startServer(backends()[0]!, { RATE_LIMIT_ANON_PER_HOUR: '60', WEBHOOK_ALLOW_PRIVATE: '1' });
      // Inside the clone, so that `npx sluice` finds the project's own command.
      work = fs.mkdtempSync(path.join(ROOT, '.docs-run-'));
    });
    after(async () => {
      await srv?.close();
      if (work) fs.rmSync(work, { recursive: true, force: true });
    });

    for (const b of runnable) {
      test(`${b.file}:${b.line}`, { timeout: 180_000 }, () => {
        const here = (s: string): string => s.replaceAll('http://localhost:8080', srv.url).replaceAll('localhost:8080', new URL(srv.url).host);
        const r = spawnSync('bash', ['-c', PROLOGUE + here(b.code)], {
          cwd: work,
          env: { ...srv.env, BASE: srv.url, LC_ALL: 'C.UTF-8' },
          encoding: 'utf8',
          timeout: 170_000,
          maxBuffer: 64 << 20,
        });
        const shown = `--- block ---\n${b.code}\n--- stdout ---\n${r.stdout}\n--- stderr ---\n${r.stderr}`;
        assert.equal(r.status, 0, `exit status ${r.status}${r.signal ? ` (${r.signal})` : ''}\n${shown}`);
        if (b.expect !== undefined) assert.ok(outputMatches(r.stdout, here(b.expect)), `the output is not the one the text shows:\n--- promised ---\n${b.expect}\n${shown}`);
        assert.doesNotMatch(r.stdout + r.stderr, /Rate limit exceeded|HTTP\/[0-9.]+ 429/, `the anonymous budget ran out\n${shown}`);
      });
    }
  });
}

test('the examples that are not run say why', (t) => {
  for (const n of notRun) t.diagnostic(`not run: ${n}`);
  for (const n of notRun) assert.match(n, /: \S.{3,}$/, n);
});

test('the block parser: sh blocks, their promised output, the not-run mark', () => {
  const md = ['<!-- not run: installs packages -->', '```sh', 'apt-get install x', '```', '', '```sh', 'echo hi', '```', '```text', 'h…', '```', '```nginx', '```sh', '```'].join('\n');
  const got = shellBlocks('x.md', md);
  assert.equal(got.length, 2);
  assert.equal(got[0]!.notRun, 'installs packages');
  assert.equal(got[1]!.code, 'echo hi');
  assert.equal(got[1]!.expect, 'h…');
  assert.ok(outputMatches('hi\n', 'h…'));
  assert.ok(!outputMatches('ho', 'hi…'));
});
