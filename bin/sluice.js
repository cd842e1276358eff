#!/usr/bin/env -S node --max-semi-space-size=4
// The V8 flag keeps the young generation at 4 MiB semi-spaces instead of 16: a streaming server's
// garbage is short-lived buffers, and the larger nursery only raised peak RSS (bench/RESULTS.md).
// `npm start` and systemd/sluice.service pass the same flag; test/observability.test.ts holds them equal.
// Starts Sluice from a compiled bundle of src/ (dist/sluice.mjs) under plain node. Running the
// TypeScript through tsx's loader instead costs an extra loader thread and about 40 MiB of RSS
// for the life of the process, so the bundle is (re)built here whenever a source file is newer
// than it: esbuild takes ~0.1 s, dependencies stay external in node_modules. If the tree cannot
// be written (a read-only install without a prebuilt bundle), it falls back to tsx.
// "Changed" is decided by content, not mtimes (a deploy with rsync -a or tar keeps old mtimes):
// a digest of every source file and of this launcher is stored next to the bundle.
import fs from 'node:fs';
import { createHash } from 'node:crypto';
import path from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
const SRC = path.join(ROOT, 'src');
const BUNDLE = path.join(ROOT, 'dist', 'sluice.mjs');
const STAMP = `${BUNDLE}.digest`;

/** Digest of what the bundle is made from: every .ts under src/ (path and bytes) and this file. */
function sourceDigest() {
  const h = createHash('sha256');
  const walk = (dir) => {
    for (const entry of fs.readdirSync(dir, { withFileTypes: true }).sort((a, b) => (a.name < b.name ? -1 : 1))) {
      const p = path.join(dir, entry.name);
      if (entry.isDirectory()) walk(p);
      else if (entry.name.endsWith('.ts')) h.update(`${path.relative(ROOT, p)}\0`).update(fs.readFileSync(p)).update('\0');
    }
  };
  walk(SRC);
  h.update(fs.readFileSync(fileURLToPath(import.meta.url)));
  return h.digest('hex');
}

function bundleIsFresh(digest) {
  try {
    return fs.existsSync(BUNDLE) && fs.readFileSync(STAMP, 'utf8') === digest;
  } catch {
    return false;
  }
}

async function build(digest) {
  const esbuild = await import('esbuild');
  // Built beside the target and renamed over it, so concurrent starts never load a half-written file.
  const tmp = `${BUNDLE}.${process.pid}.tmp.mjs`;
  try {
    await esbuild.build({
      entryPoints: [path.join(SRC, 'cli', 'main.ts')],
      outfile: tmp,
      bundle: true,
      packages: 'external',
      platform: 'node',
      format: 'esm',
      target: 'node20',
      logLevel: 'error',
    });
    fs.renameSync(tmp, BUNDLE);
    fs.writeFileSync(`${STAMP}.${process.pid}`, digest);
    fs.renameSync(`${STAMP}.${process.pid}`, STAMP);
  } finally {
    fs.rmSync(tmp, { force: true });
    // esbuild works through a helper process: end it, or it lives as long as the server.
    await esbuild.stop();
  }
}

if (process.argv[2] === 'build') {
  // `npm run build`: for installs whose tree is read-only at run time (the systemd unit).
  fs.mkdirSync(path.dirname(BUNDLE), { recursive: true });
  await build(sourceDigest());
  process.stdout.write(`built ${path.relative(ROOT, BUNDLE)}\n`);
  process.exit(0);
}

let entry = BUNDLE;
const digest = sourceDigest();
if (!bundleIsFresh(digest)) {
  try {
    fs.mkdirSync(path.dirname(BUNDLE), { recursive: true });
    await build(digest);
  } catch (err) {
    process.stderr.write(`sluice: cannot build ${path.relative(ROOT, BUNDLE)} (${err.code ?? err.message}); running the sources through tsx\n`);
    entry = null;
  }
}
if (entry) await import(pathToFileURL(entry).href);
else {
  const { register } = await import('tsx/esm/api');
  register();
  await import(pathToFileURL(path.join(SRC, 'cli', 'main.ts')).href);
}
