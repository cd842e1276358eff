// Hashes file bytes off the event loop: SHA-256 and CRC-32 per upload stream, in arrival order,
// or of a whole file read here in 1 MiB pieces (one buffer per file job, so memory stays bounded).
// Buffers arrive transferred and go back transferred, so nothing is copied between threads.
// Plain JS so it runs in a worker thread whatever loader the main thread uses.
import { parentPort } from 'node:worker_threads';
import { createHash } from 'node:crypto';
import { open } from 'node:fs/promises';
import { crc32 } from 'node:zlib';

const streams = new Map();
const FILE_PIECE = 1 << 20;

async function digestFile(path) {
  const fh = await open(path, 'r');
  try {
    const hash = createHash('sha256');
    const buf = Buffer.allocUnsafe(FILE_PIECE);
    let crc = 0;
    let size = 0;
    for (;;) {
      const { bytesRead } = await fh.read(buf, 0, FILE_PIECE, size);
      if (bytesRead === 0) break;
      const view = buf.subarray(0, bytesRead);
      hash.update(view);
      crc = crc32(view, crc);
      size += bytesRead;
    }
    return { sha256: hash.digest('hex'), crc32: crc >>> 0, size };
  } finally {
    await fh.close();
  }
}

parentPort.on('message', (msg) => {
  if (msg.t === 'd') {
    let s = streams.get(msg.id);
    if (!s) {
      s = { hash: createHash('sha256'), crc: 0 };
      streams.set(msg.id, s);
    }
    const view = new Uint8Array(msg.buf, 0, msg.len);
    s.hash.update(view);
    s.crc = crc32(view, s.crc);
    parentPort.postMessage({ t: 'ack', id: msg.id, slot: msg.slot, buf: msg.buf }, [msg.buf]);
  } else if (msg.t === 'f') {
    const s = streams.get(msg.id) ?? { hash: createHash('sha256'), crc: 0 };
    streams.delete(msg.id);
    parentPort.postMessage({ t: 'digest', id: msg.id, sha256: s.hash.digest('hex'), crc32: s.crc >>> 0 });
  } else if (msg.t === 'x') {
    streams.delete(msg.id);
  } else if (msg.t === 'file') {
    digestFile(msg.path).then(
      (d) => parentPort.postMessage({ t: 'file', id: msg.id, ...d }),
      (err) => parentPort.postMessage({ t: 'file', id: msg.id, error: String(err?.message ?? err), code: err?.code }),
    );
  }
});
