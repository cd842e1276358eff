// An interrupted `npm test` leaves nothing running: test/run.ts stops the passes and kills whatever
// the run started, detached daemons included, and a later run reaps what a killed one left.
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import path from 'node:path';
import { alive } from './helpers/reaper.ts';
import { ROOT } from './helpers/server.ts';
import { waitFor } from './helpers/wait.ts';

/** Starts test/run.ts on the fixture and resolves with the pids it reports once they run. */
function startRun(): Promise<{ run: ReturnType<typeof spawn>; pids: number[] }> {
  const run = spawn(process.execPath, ['--import', 'tsx', 'test/run.ts', path.join('test', 'fixtures', 'interrupted.ts')], {
    cwd: ROOT,
    // Not as a child of this test runner (NODE_TEST_CONTEXT would make its runner report to ours).
    env: Object.fromEntries(Object.entries(process.env).filter(([k]) => k !== 'NODE_TEST_CONTEXT')),
    stdio: ['ignore', 'pipe', 'pipe'],
    detached: true, // its own process group: a Ctrl-C reaches the whole group, as from a terminal
  });
  return new Promise((resolve, reject) => {
    let out = '';
    run.stdout!.setEncoding('utf8');
    run.stdout!.on('data', (c: string) => {
      out += c;
      const m = /READY (\d+) (\d+)/.exec(out);
      if (m) resolve({ run, pids: [Number(m[1]), Number(m[2])] });
    });
    run.once('exit', (code) => reject(new Error(`test/run.ts ended (${code}) before the fixture was ready:\n${out}`)));
  });
}

/** SIGKILL is sent, not waited for: a process may take a moment to be torn down. */
async function noneAlive(pids: number[], what: string): Promise<void> {
  await waitFor(what, () => pids.every((p) => !alive(p)), 30_000);
}

const exited = (p: ReturnType<typeof spawn>): Promise<number | null> =>
  p.exitCode !== null || p.signalCode !== null ? Promise.resolve(p.exitCode) : new Promise((r) => p.once('exit', (code) => r(code)));

describe('an interrupted test run', () => {
  for (const [signal, toGroup] of [['SIGTERM', false], ['SIGINT', true]] as const) {
    it(`${signal}${toGroup ? ' to the process group (Ctrl-C)' : ''}: nothing it started is left running`, async () => {
      const { run, pids } = await startRun();
      assert.ok(pids.every(alive));
      process.kill(toGroup ? -run.pid! : run.pid!, signal);
      const code = await exited(run);
      assert.equal(code, signal === 'SIGINT' ? 130 : 143);
      await noneAlive(pids, `nothing left running after ${signal}`);
    });
  }

  it('a run killed outright is cleaned up by the next one', async () => {
    const { run, pids } = await startRun();
    process.kill(-run.pid!, 'SIGKILL'); // nothing of the run can act; the detached daemon and the server live on
    await exited(run);
    assert.ok(alive(pids[1]!), 'the detached daemon outlived its run');
    const next = await startRun();
    await noneAlive(pids, 'the next run stopped what the killed one left');
    process.kill(next.run.pid!, 'SIGTERM');
    await exited(next.run);
    await noneAlive(next.pids, 'nothing of the second run left');
  });
});
