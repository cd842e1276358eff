// Reference, not a peer: the stack's own receive ceiling. uWebSockets.js, loaded as Sluice loads it
// (the native binary or nothing), taking an upload's body and doing nothing with it but the one
// copy every uWS handler must make (the chunk's memory is reused once onData returns), into one
// reused buffer. No parsing, no disk. What Sluice takes longer than this row is its own work on the
// bytes (parsing, checksumming, writing) and the wait for the disk. Env: PORT (DIR is not used).
import { serveUws, uploadReply } from '../lib/uws-baseline.ts';

const sink = Buffer.allocUnsafe(1 << 20);

serveUws('uws-sink', (res) => {
  let aborted = false;
  let size = 0;
  res.onAborted(() => (aborted = true));
  res.onData((ab, isLast) => {
    const chunk = new Uint8Array(ab);
    size += chunk.length;
    sink.set(chunk.length <= sink.length ? chunk : chunk.subarray(0, sink.length));
    if (!isLast || aborted) return;
    res.cork(() => res.writeStatus('201 Created').writeHeader('content-type', 'application/json').end(uploadReply(size)));
  });
});
