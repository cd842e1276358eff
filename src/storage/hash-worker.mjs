// Hashes file bytes off the event loop: SHA-256 per upload stream, in arrival order.
// Plain JS so it runs in a worker thread whatever loader the main thread uses.
import { parentPort } from 'node:worker_threads';
import { createHash } from 'node:crypto';

const streams = new Map();

parentPort.on('message', (msg) => {
  if (msg.t === 'd') {
    let s = streams.get(msg.id);
    if (!s) {
      s = { hash: createHash('sha256') };
      streams.set(msg.id, s);
    }
    const view = new Uint8Array(msg.sab, 0, msg.len);
    s.hash.update(view);
    parentPort.postMessage({ t: 'ack', id: msg.id, slot: msg.slot });
  } else if (msg.t === 'f') {
    const s = streams.get(msg.id) ?? { hash: createHash('sha256') };
    streams.delete(msg.id);
    parentPort.postMessage({ t: 'digest', id: msg.id, sha256: s.hash.digest('hex') });
  } else if (msg.t === 'x') {
    streams.delete(msg.id);
  }
});
