// Checksums file bytes off the event loop: the CRC-32 of each upload stream, in arrival order, or of
// a whole file read here in 1 MiB pieces (one buffer per file job, so memory stays bounded).
// Buffers arrive transferred and go back transferred, so nothing is copied between threads.
// Plain JS so it runs in a worker thread whatever loader the main thread uses.
import { parentPort } from 'node:worker_threads';
import { open } from 'node:fs/promises';
import { crc32 } from '../util/crc32.mjs';

const streams = new Map();
const FILE_PIECE = 1 << 20;
/**
 * Read buffers, reused: a tus upload hashes ahead after every PATCH, and a fresh 1 MiB buffer each
 * time piled up as garbage this thread seldom collects (it allocates little else).
 */
const pieces = [];
/**
 * Files hashed ahead while they grow (tus parts), by key: { crc, pos, chain }. A state covers
 * bytes [0, pos) of the part. They come from the file (`ahead`: bytes below a durable offset, which
 * never change) or from memory as a PATCH streams (`feed`: a copy of bytes about to be written at
 * exactly `pos`). Fed bytes may run past what the PATCH made durable (a failed write or sync, a
 * checksum mismatch): the `ahead` that follows every PATCH names the durable offset, and a state
 * past it starts over from 0. An evicted or missing state only means reading from 0 again. Every
 * step runs on the state's chain, in message order, so a read and a feed never interleave.
 */
const followed = new Map();
const MAX_FOLLOWED = 256;

/** Hashes `path` from `st.pos` up to `upto` bytes (to its end when null), 1 MiB at a time. */
async function advance(st, path, upto) {
  const fh = await open(path, 'r');
  const buf = pieces.pop() ?? Buffer.allocUnsafeSlow(FILE_PIECE);
  try {
    while (upto === null || st.pos < upto) {
      const want = upto === null ? FILE_PIECE : Math.min(FILE_PIECE, upto - st.pos);
      const { bytesRead } = await fh.read(buf, 0, want, st.pos);
      if (bytesRead === 0) break;
      const view = buf.subarray(0, bytesRead);
      st.crc = crc32(view, st.crc);
      st.pos += bytesRead;
    }
  } finally {
    if (pieces.length < 4) pieces.push(buf);
    await fh.close();
  }
}

const fresh = () => ({ crc: 0, pos: 0, chain: Promise.resolve() });

function stateOf(key) {
  let st = followed.get(key);
  if (!st) {
    st = fresh();
    followed.set(key, st);
    if (followed.size > MAX_FOLLOWED) followed.delete(followed.keys().next().value);
  }
  return st;
}

async function digestFile(path, key) {
  const st = key ? stateOf(key) : fresh();
  // After the catch-ups queued before it; the state is finished here, so it goes.
  await st.chain;
  if (key) followed.delete(key);
  await advance(st, path, null);
  return { crc32: st.crc >>> 0, size: st.pos };
}

parentPort.on('message', (msg) => {
  if (msg.t === 'd') {
    const view = new Uint8Array(msg.buf, 0, msg.len);
    streams.set(msg.id, crc32(view, streams.get(msg.id) ?? 0));
    parentPort.postMessage({ t: 'ack', id: msg.id, slot: msg.slot, buf: msg.buf }, [msg.buf]);
  } else if (msg.t === 'f') {
    const crc = streams.get(msg.id) ?? 0;
    streams.delete(msg.id);
    parentPort.postMessage({ t: 'digest', id: msg.id, crc32: crc >>> 0 });
  } else if (msg.t === 'x') {
    streams.delete(msg.id);
  } else if (msg.t === 'feed') {
    const st = stateOf(msg.key);
    st.chain = st.chain.then(() => {
      // Anything but the next bytes (a state that started over, or was evicted) is left to `ahead`.
      if (msg.at !== st.pos) return;
      st.crc = crc32(new Uint8Array(msg.buf, 0, msg.len), st.crc);
      st.pos += msg.len;
    }).catch(() => followed.delete(msg.key));
    st.chain.then(() => parentPort.postMessage({ t: 'ack', id: msg.id, slot: 0, buf: msg.buf }, [msg.buf]));
  } else if (msg.t === 'ahead') {
    const st = stateOf(msg.key);
    // A failed catch-up (the part was removed) drops the state: the final digest starts over.
    st.chain = st.chain
      .then(() => {
        if (st.pos > msg.upto) Object.assign(st, { crc: 0, pos: 0 });
        if (st.pos < msg.upto) return advance(st, msg.path, msg.upto);
      })
      .catch(() => followed.delete(msg.key));
  } else if (msg.t === 'file') {
    digestFile(msg.path, msg.key).then(
      (d) => parentPort.postMessage({ t: 'file', id: msg.id, ...d }),
      (err) => parentPort.postMessage({ t: 'file', id: msg.id, error: String(err?.message ?? err), code: err?.code }),
    );
  }
});
