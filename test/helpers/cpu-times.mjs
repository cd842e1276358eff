// Loaded into every test file's process (test/run.ts): at exit it appends the file's CPU seconds, its
// own and those of the processes it started and waited for (servers, CLI runs, initdb), to
// $SLUICE_CPU_TIMES. Daemons that detach (Ceph) are not counted. Linux only, like the suite.
import fs from 'node:fs';

const out = process.env.SLUICE_CPU_TIMES;
const file = process.argv[1];
if (out && file?.endsWith('.ts')) {
  process.on('exit', () => {
    try {
      const stat = fs.readFileSync('/proc/self/stat', 'utf8');
      // After "pid (comm) ": state is field 0; utime, stime, cutime, cstime are 11 to 14, in clock ticks.
      const f = stat.slice(stat.lastIndexOf(')') + 2).split(' ').map(Number);
      fs.appendFileSync(out, `${JSON.stringify({ file, own: (f[11] + f[12]) / 100, children: (f[13] + f[14]) / 100 })}\n`);
    } catch {
      // (no /proc: nothing recorded)
    }
  });
}
