// Hashes file bytes off the event loop: SHA-256 and CRC-32 per upload stream, in arrival order.
// Buffers arrive transferred and go back transferred, so nothing is copied between threads.
// Plain JS so it runs in a worker thread whatever loader the main thread uses.
import { parentPort } from 'node:worker_threads';
import { createHash } from 'node:crypto';
import { crc32 } from 'node:zlib';

const streams = new Map();

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
  }
});
