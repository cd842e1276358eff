import v8 from 'node:v8';
import vm from 'node:vm';

let minorGc: ((o: { type: 'minor' }) => void) | null | undefined;

/** V8's own collector, for a minor (young-generation) collection; null where it cannot be had. */
function collector(): ((o: { type: 'minor' }) => void) | null {
  if (minorGc !== undefined) return minorGc;
  try {
    v8.setFlagsFromString('--expose-gc');
    minorGc = vm.runInNewContext('gc') as (o: { type: 'minor' }) => void;
  } catch {
    minorGc = null;
  } finally {
    v8.setFlagsFromString('--no-expose-gc');
  }
  return typeof minorGc === 'function' ? minorGc : (minorGc = null);
}

/**
 * Counts bytes that went through buffers the runtime allocated and dropped (an HTTP client's socket
 * reads, copied out at once), and runs a minor collection after every `everyBytes` of them. V8 frees
 * such buffers only when its young generation fills with objects or external memory has grown by
 * tens of MiB; a stream that allocates little else would hold that much garbage in RSS. A minor
 * collection of a small young generation takes well under a millisecond.
 */
export function createGarbageMeter(everyBytes: number): (bytes: number) => void {
  let since = 0;
  return (bytes) => {
    since += bytes;
    if (since < everyBytes) return;
    since = 0;
    collector()?.({ type: 'minor' });
  };
}
