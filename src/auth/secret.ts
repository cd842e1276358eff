import fs from 'node:fs';
import path from 'node:path';
import { randomBytes } from 'node:crypto';
import { makeDir } from '../util/data-dir.ts';

/** SECRET, or one generated once into DATA_DIR/secret (mode 0600) and reused by every process. */
export function loadSecret(configured: string | undefined, dataDir: string): Buffer {
  if (configured) return Buffer.from(configured, 'utf8');
  const file = path.join(dataDir, 'secret');
  makeDir(dataDir);
  try {
    fs.writeFileSync(file, randomBytes(32).toString('hex'), { flag: 'wx', mode: 0o600 });
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== 'EEXIST') throw err;
  }
  const text = fs.readFileSync(file, 'utf8').trim();
  if (text.length < 32) throw new Error(`${file} is too short to be a secret; delete it to generate a new one`);
  return Buffer.from(text, 'utf8');
}
