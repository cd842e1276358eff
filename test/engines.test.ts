/**
 * `npm ci` on any Node that package.json's `engines` admits installs without an EBADENGINE warning:
 * every locked package's own `engines.node` takes every version ours takes.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { createRequire } from 'node:module';
import fs from 'node:fs';
import path from 'node:path';
import { ROOT } from './helpers/server.ts';

const semver = createRequire(import.meta.url)('semver') as { subset(sub: string, dom: string): boolean; satisfies(v: string, r: string): boolean };

test('every locked package runs on every Node that package.json admits', () => {
  const ours = (JSON.parse(fs.readFileSync(path.join(ROOT, 'package.json'), 'utf8')) as { engines: { node: string } }).engines.node;
  const lock = JSON.parse(fs.readFileSync(path.join(ROOT, 'package-lock.json'), 'utf8')) as {
    packages: Record<string, { version?: string; os?: string[]; engines?: { node?: string } | string[] }>;
  };
  const narrower = Object.entries(lock.packages).flatMap(([name, p]) => {
    const theirs = Array.isArray(p.engines) ? undefined : p.engines?.node;
    // Builds for other systems (sharp's Windows and macOS packages) are never installed on Linux.
    if (p.os && !p.os.includes('linux')) return [];
    return name !== '' && theirs !== undefined && !semver.subset(ours, theirs) ? [`${name}@${p.version}: node ${theirs}`] : [];
  });
  assert.deepEqual(narrower, [], `these packages want a narrower Node than package.json's "${ours}"`);
  assert.ok(semver.satisfies(process.versions.node, ours), `this Node (${process.versions.node}) is outside package.json's engines "${ours}"`);
});

test('every locked package with an install script is reviewed in allowScripts (npm 11 warns, npm 12 blocks)', () => {
  const pkg = JSON.parse(fs.readFileSync(path.join(ROOT, 'package.json'), 'utf8')) as { allowScripts?: Record<string, boolean> };
  const lock = JSON.parse(fs.readFileSync(path.join(ROOT, 'package-lock.json'), 'utf8')) as {
    packages: Record<string, { hasInstallScript?: boolean; os?: string[] }>;
  };
  const unreviewed = Object.entries(lock.packages)
    .filter(([name, p]) => name !== '' && p.hasInstallScript && (!p.os || p.os.includes('linux')))
    .map(([name]) => name.slice(name.lastIndexOf('node_modules/') + 'node_modules/'.length))
    .filter((name) => pkg.allowScripts?.[name] === undefined);
  assert.deepEqual(unreviewed, [], 'approve or deny their scripts: npm install-scripts approve <name>');
});
