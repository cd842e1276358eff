import fs from 'node:fs';

/**
 * Fills all of `target` from `fd` at file offset `pos`, continuing after short reads. The first read
 * is handed to libuv's pool before this returns, not on a later microtask: the body pump calls it just
 * before a send, so the pool thread copies the next chunk while the event loop sends this one. Behind
 * an `await`, every read started only after the send it was meant to overlap had returned, and a
 * cached download alternated read and send instead of overlapping them (bench/RESULTS.md).
 * `stillOpen` is checked before every read: after an abort the fd number may belong to another file.
 */
export function readFullyAt(
  fd: number,
  target: Buffer,
  pos: number,
  stillOpen: () => boolean,
  shortFile: () => Error,
): Promise<void> {
  return new Promise((resolve, reject) => {
    let done = 0;
    const step = (): void => {
      if (!stillOpen()) return reject(new Error('source closed'));
      fs.read(fd, target, done, target.length - done, pos + done, (err, n) => {
        if (err) return reject(err);
        if (n === 0) return reject(shortFile());
        done += n;
        if (done < target.length) step();
        else resolve();
      });
    };
    step();
  });
}
