// `npm run bench`: upload, download, requests, zip, tus and embedded in sequence, each in its own process so one scenario's
// servers, page cache pressure and heap cannot leak into the next. Env knobs pass through (see bench/README.md).
import path from 'node:path';
import { spawn } from 'node:child_process';
import { existsSync, readdirSync, statSync } from 'node:fs';
import { BENCH_DIR, REPO_DIR } from './lib/report.ts';
import { loadResults, printTargets } from './lib/summary.ts';

const SCENARIOS = ['upload', 'download', 'requests', 'zip', 'tus', 'embedded'] as const;

function runScenario(name: string): Promise<number> {
  return new Promise((resolve) => {
    const child = spawn(process.execPath, ['--import', 'tsx', path.join(BENCH_DIR, `${name}.ts`)], {
      cwd: REPO_DIR,
      stdio: 'inherit',
    });
    child.on('error', () => resolve(1));
    child.on('exit', (code, signal) => resolve(code ?? (signal ? 1 : 0)));
  });
}

// a Ctrl-C reaches the whole foreground group; each scenario stops its own servers, so just wait for it
process.on('SIGINT', () => {});

const started = Date.now();
const failed: string[] = [];
for (const name of SCENARIOS) {
  const code = await runScenario(name);
  if (code !== 0) failed.push(`${name} (exit ${code})`);
  if (code === 130) break; // interrupted
}
// the result files this run wrote (each scenario writes one before it exits; none if every one failed early)
const resultsDir = path.join(BENCH_DIR, 'results');
const written = existsSync(resultsDir)
  ? readdirSync(resultsDir, { withFileTypes: true })
      .filter((e) => e.isFile() && e.name.endsWith('.json'))
      .map((e) => path.join(resultsDir, e.name))
      .filter((f) => statSync(f).mtimeMs >= started)
  : [];
printTargets(loadResults(written));
console.log(failed.length === 0 ? '\nall scenarios done' : `\nfailed: ${failed.join(', ')}`);
process.exitCode = failed.length === 0 ? 0 : 1;
