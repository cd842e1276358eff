#!/usr/bin/env node
// Starts Sluice from a compiled bundle of src/ (dist/sluice.mjs) under plain node. Running the
// TypeScript through tsx's loader instead costs an extra loader thread and about 40 MiB of RSS
// for the life of the process, so the bundle is (re)built here whenever a source file is newer
// than it: esbuild takes ~0.1 s, dependencies stay external in node_modules. If the tree cannot
// be written (a read-only install without a prebuilt bundle), it falls back to tsx.
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
const SRC = path.join(ROOT, 'src');
const BUNDLE = path.join(ROOT, 'dist', 'sluice.mjs');

function newestSource(dir) {
  let newest = 0;
  for (const entry of fs.readdirSync(dir, { withFileTypes: true })) {
    const p = path.join(dir, entry.name);
    if (entry.isDirectory()) newest = Math.max(newest, newestSource(p));
    else if (entry.name.endsWith('.ts')) newest = Math.max(newest, fs.statSync(p).mtimeMs);
  }
  return newest;
}

function bundleIsFresh() {
  try {
    return fs.statSync(BUNDLE).mtimeMs >= newestSource(SRC);
  } catch {
    return false;
  }
}

async function build() {
  const esbuild = await import('esbuild');
  // Built beside the target and renamed over it, so concurrent starts never load a half-written file.
  const tmp = `${BUNDLE}.${process.pid}.tmp.mjs`;
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
  // esbuild works through a helper process: end it, or it lives as long as the server.
  await esbuild.stop();
  fs.renameSync(tmp, BUNDLE);
}

if (process.argv[2] === 'build') {
  // `npm run build`: for installs whose tree is read-only at run time (the systemd unit).
  fs.mkdirSync(path.dirname(BUNDLE), { recursive: true });
  await build();
  process.stdout.write(`built ${path.relative(ROOT, BUNDLE)}\n`);
  process.exit(0);
}

let entry = BUNDLE;
if (!bundleIsFresh()) {
  try {
    fs.mkdirSync(path.dirname(BUNDLE), { recursive: true });
    await build();
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
