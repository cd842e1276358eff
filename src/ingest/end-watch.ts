/** A body busboy has not closed 1–2 s after its last byte was parsed is malformed (see watchEnd). */
const END_CHECK_MS = 1000;
const END_GRACE_TICKS = 2;

/**
 * After the body's last byte, busboy closes (or errs) as soon as it has parsed what it holds: it
 * parses synchronously, and file streams are consumed as they flow. One body keeps it waiting for
 * good: a closing delimiter, then another part the body ends inside ("--b--", "--b", a part head,
 * bytes). busboy 1.6 takes the form as complete at the first delimiter and then waits for that
 * part's end, which never comes; the request hung until the idle timeout dropped it with no
 * answer. So once busboy has held no unparsed input (`busy()` false) for END_GRACE_TICKS checks in
 * a row without closing, `stuck` runs. The caller clears the returned timer when busboy closes.
 */
export function watchEnd(busy: () => boolean, stuck: () => void): NodeJS.Timeout {
  let idle = 0;
  const timer = setInterval(() => {
    idle = busy() ? 0 : idle + 1;
    if (idle >= END_GRACE_TICKS) stuck();
  }, END_CHECK_MS);
  timer.unref();
  return timer;
}
