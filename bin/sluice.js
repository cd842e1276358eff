#!/usr/bin/env -S node --max-semi-space-size=4
// The V8 flag keeps the young generation at 4 MiB semi-spaces instead of 16: a streaming server's
// garbage is short-lived buffers, and the larger nursery only raised peak RSS (bench/RESULTS.md).
// `npm start` and systemd/sluice.service pass the same flag; test/observability.test.ts holds them equal.
// Starts Sluice from a compiled bundle of src/ (dist/) under plain node. Running the TypeScript
// through tsx's loader instead costs an extra loader thread and about 40 MiB of RSS for the life of
// the process, so the bundle is (re)built whenever a source changed: esbuild takes ~0.1 s,
// dependencies stay external in node_modules. The bundle is split at dynamic imports, so what only
// some installations use (the S3 SDK, Redis) is loaded only where it is configured. If the tree
// cannot be written (a read-only install without a prebuilt bundle), it falls back to tsx.
// "Changed" is decided by content, not mtimes (a deploy with rsync -a or tar keeps old mtimes):
// a digest of every source file and of this launcher is stored with the bundle's entry name.
import fs from 'node:fs';
import { createHash } from 'node:crypto';
import { spawnSync } from 'node:child_process';
import path from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
const SRC = path.join(ROOT, 'src');
const DIST = path.join(ROOT, 'dist');
/** "<digest> <entry file name>" of the current build. */
const STAMP = path.join(DIST, 'current');
/** Files of older builds are removed once this old: a server started from one has loaded them all by then. */
const OLD_BUILD_MS = 10 * 60 * 1000;

/** Digest of what the bundle is made from: every .ts and .mjs under src/ (path and bytes) and this file. */
function sourceDigest() {
  const h = createHash('sha256');
  const walk = (dir) => {
    for (const entry of fs.readdirSync(dir, { withFileTypes: true }).sort((a, b) => (a.name < b.name ? -1 : 1))) {
      const p = path.join(dir, entry.name);
      if (entry.isDirectory()) walk(p);
      else if (/\.(ts|mts|mjs)$/.test(entry.name)) h.update(`${path.relative(ROOT, p)}\0`).update(fs.readFileSync(p)).update('\0');
    }
  };
  walk(SRC);
  h.update(fs.readFileSync(fileURLToPath(import.meta.url)));
  return h.digest('hex');
}

/** The entry file of the build made from `digest`, or null. */
function freshEntry(digest) {
  try {
    const [stamped, name] = fs.readFileSync(STAMP, 'utf8').trim().split(' ');
    const entry = path.join(DIST, name ?? '');
    return stamped === digest && name && fs.existsSync(entry) ? entry : null;
  } catch {
    return null;
  }
}

/** Writes `data` to `file` through a temp file and a rename, so a concurrent start never loads half a file. */
function writeWhole(file, data) {
  const tmp = `${file}.${process.pid}.tmp`;
  fs.writeFileSync(tmp, data);
  fs.renameSync(tmp, file);
}

async function build(digest) {
  const esbuild = await import('esbuild');
  try {
    const out = await esbuild.build({
      entryPoints: { sluice: path.join(SRC, 'cli', 'main.ts') },
      outdir: DIST,
      write: false,
      bundle: true,
      splitting: true,
      entryNames: '[name]-[hash]',
      chunkNames: 'chunk-[hash]',
      outExtension: { '.js': '.mjs' },
      packages: 'external',
      platform: 'node',
      format: 'esm',
      target: 'node20',
      logLevel: 'error',
    });
    fs.mkdirSync(DIST, { recursive: true });
    // Names carry a hash of their content, so a file of the same name is the same file.
    for (const f of out.outputFiles) writeWhole(f.path, f.contents);
    const entry = out.outputFiles.find((f) => path.basename(f.path).startsWith('sluice-'));
    writeWhole(STAMP, `${digest} ${path.basename(entry.path)}\n`);
    const keep = new Set([...out.outputFiles.map((f) => path.basename(f.path)), 'current']);
    for (const name of fs.readdirSync(DIST)) {
      const p = path.join(DIST, name);
      try {
        if (!keep.has(name) && Date.now() - fs.statSync(p).mtimeMs > OLD_BUILD_MS) fs.rmSync(p, { force: true });
      } catch {
        // another start removed it first
      }
    }
  } finally {
    // esbuild works through a helper process: end it.
    await esbuild.stop();
  }
}

if (process.argv[2] === 'build') {
  // `npm run build`: for installs whose tree is read-only at run time (the systemd unit).
  const digest = sourceDigest();
  try {
    await build(digest);
  } catch (err) {
    process.stderr.write(`${err.code ?? err.message}\n`);
    process.exit(1);
  }
  process.stdout.write(`built ${path.relative(ROOT, freshEntry(digest))}\n`);
  process.exit(0);
}

const digest = sourceDigest();
let entry = freshEntry(digest);
if (!entry) {
  // Built by a child process: esbuild's module would otherwise stay in this process's memory for life.
  const child = spawnSync(process.execPath, [fileURLToPath(import.meta.url), 'build'], { stdio: ['ignore', 'ignore', 'pipe'], encoding: 'utf8' });
  entry = child.status === 0 ? freshEntry(digest) : null;
  if (!entry) {
    const why = (child.stderr || child.error?.message || `exit ${child.status}`).trim().split('\n').at(-1);
    process.stderr.write(`sluice: cannot build dist/ (${why}); running the sources through tsx\n`);
  }
}
if (entry) await import(pathToFileURL(entry).href);
else {
  const { register } = await import('tsx/esm/api');
  register();
  await import(pathToFileURL(path.join(SRC, 'cli', 'main.ts')).href);
}
