/**
 * Type=notify without systemd: a Unix datagram socket played by Python stands in for PID 1 (and
 * closes the BARRIER=1 descriptors as PID 1 does), so the real systemd-notify round trip is tested.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawn, spawnSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { startServer } from './helpers/server.ts';

const PY = fs.existsSync('/usr/bin/python3') ? '/usr/bin/python3' : 'python3';
const RECEIVER = `
import array, json, os, socket, sys
s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
s.bind(sys.argv[1])
print(json.dumps("listening"), flush=True)
while True:
    data, anc, _, _ = s.recvmsg(4096, socket.CMSG_SPACE(64))
    for level, kind, d in anc:
        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
            fds = array.array("i")
            fds.frombytes(d[: len(d) - len(d) % fds.itemsize])
            for fd in fds:
                os.close(fd)
    print(json.dumps(data.decode()), flush=True)
`;
import { waitFor } from './helpers/wait.ts';
const skip = spawnSync('systemd-notify', ['--version']).error ? 'no systemd-notify' : spawnSync(PY, ['--version']).error ? 'no python3' : false;

test('NOTIFY_SOCKET set: READY=1 once listening, STOPPING=1 on SIGTERM, exit 0', { skip }, async () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'sl-notify-'));
  const sock = path.join(dir, 'notify');
  const receiver = spawn(PY, ['-c', RECEIVER, sock], { stdio: ['ignore', 'pipe', 'inherit'] });
  const messages: string[] = [];
  let buf = '';
  receiver.stdout.setEncoding('utf8').on('data', (c: string) => {
    buf += c;
    for (let i = buf.indexOf('\n'); i >= 0; i = buf.indexOf('\n')) {
      messages.push(JSON.parse(buf.slice(0, i)) as string);
      buf = buf.slice(i + 1);
    }
  });
  const nextNotice = (what: RegExp): Promise<string> => waitFor(`${what} among the notifications`, () => messages.find((x) => what.test(x)), 10_000);
  try {
    await nextNotice(/^listening$/);
    const srv = await startServer('embedded', { NOTIFY_SOCKET: sock });
    try {
      const ready = await nextNotice(/^READY=1/m);
      assert.match(ready, new RegExp(`^STATUS=serving on port ${srv.port}$`, 'm'));
      const exit = new Promise<number | null>((r) => srv.proc.once('exit', (code) => r(code)));
      srv.proc.kill('SIGTERM');
      await nextNotice(/^STOPPING=1$/m);
      assert.equal(await exit, 0);
      // The barrier systemd-notify waits on was answered: it did not time out (no warning logged).
      assert.ok(messages.includes('BARRIER=1'));
    } finally {
      await srv.close();
    }
  } finally {
    receiver.kill();
    fs.rmSync(dir, { recursive: true, force: true });
  }
});
