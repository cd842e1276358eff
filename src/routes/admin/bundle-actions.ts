// The operator's actions on a bundle, from its console page or a report's: quarantine, release,
// expire, delete, block a file's content, hash its files. Each goes through the same audited function
// as the CLI's (db/abuse-actions.ts), under the session's label, and then drops this process's cached
// copy of the bundle before it answers, so the next request here already sees the change (451 after a
// quarantine). Other processes and nodes drop theirs when the database announces the change (the
// sluice_bundle trigger, sql/0006 and 0012), as they do for a change made by the CLI.
import type { Route } from '../../http/server.ts';
import type { AdminSession } from '../../auth/admin-sessions.ts';
import { bundleByCode } from '../../db/abuse.ts';
import { blockAudited, deleteAudited, expireAudited, quarantineAudited } from '../../db/abuse-actions.ts';
import { fileOfBundle, unhashedOfBundle } from '../../db/admin-bundles.ts';
import { SHORT_CODE_RE } from '../../util/tokens.ts';
import { oneLine } from '../../util/names.ts';
import { humanSize, plural } from '../../util/html.ts';
import { MAX_FILES_PER_BUNDLE } from '../../db/bundles.ts';
import type { Deps } from '../../deps.ts';
import type { Console } from './console.ts';

/** How long an action waits for hashing before it answers that the hashing goes on. */
const HASH_WAIT_MS = 2_500;

/** The pages a form may come back to: a report's, a bundle's, the bundle list (with its search). */
const BACK_RE = /^\/admin\/(reports\/[1-9]\d{0,15}|bundles(\/[A-Za-z0-9]{5})?)(\?[A-Za-z0-9_.~%&=+-]{0,300})?$/;

type Bundle = NonNullable<Awaited<ReturnType<typeof bundleByCode>>>;
/** An action on bundle `b`: what the page it leads back to says it did. */
type Act = (s: AdminSession, b: Bundle, fields: Record<string, string>) => Promise<string>;

/**
 * What `promise` settles to within `ms`: its value, or its error as a notice; undefined if it has not
 * settled by then (it goes on; a later failure is logged).
 */
async function within<T>(deps: Deps, promise: Promise<T>, ms: number, what: string): Promise<{ value: T } | { failed: string } | undefined> {
  const settled = promise.then(
    (value) => ({ value }),
    (err: unknown) => {
      deps.log.error({ err }, `${what} failed`);
      return { failed: `${what} failed: ${err instanceof Error ? err.message : String(err)}` };
    },
  );
  let timer: ReturnType<typeof setTimeout> | undefined;
  const late = new Promise<undefined>((resolve) => {
    timer = setTimeout(() => resolve(undefined), ms);
  });
  try {
    return await Promise.race([settled, late]);
  } finally {
    clearTimeout(timer);
  }
}

/** The notice of an action that waited on hashing: its own, a failure, or that it goes on. */
const outcome = (r: { value: string } | { failed: string } | undefined, goesOn: string): string =>
  r === undefined ? goesOn : 'value' in r ? r.value : `${r.failed}.`;

export function bundleActionRoutes(deps: Deps, c: Console): Route[] {
  const hashing = deps.consoleHashing;
  const route = (action: string, act: Act): Route =>
    c.action(`/admin/bundles/:code/${action}`, async (ctx, s, fields) => {
      const code = ctx.params[0] ?? '';
      const own = `/admin/bundles/${code}`;
      const back = BACK_RE.test(fields.back ?? '') ? fields.back! : own;
      const b = SHORT_CODE_RE.test(code) ? await bundleByCode(deps.sql, code) : undefined;
      if (!b) return c.redirect(ctx, back === own ? '/admin/bundles' : back, `No bundle ${code}: it was deleted.`);
      const notice = await act(s, b, fields);
      deps.bundles.invalidate(b.id);
      // A deleted bundle's own page is gone: back to the list.
      c.redirect(ctx, action === 'delete' && fields.confirm === 'yes' && back === own ? '/admin/bundles' : back, notice);
    });

  const block: Act = async (s, b, fields) => {
    const file = /^[1-9]\d{0,15}$/.test(fields.file ?? '') ? await fileOfBundle(deps.sql, b.id, Number(fields.file)) : undefined;
    if (!file) return `That file is no longer in ${b.short_code}.`;
    const reason = oneLine(fields.reason ?? '').trim().slice(0, 200) || null;
    const blocked = (hex: string | null): Promise<string> => {
      if (hex === null) return Promise.resolve(`The file's bytes are missing from the store: nothing blocked.`);
      return blockAudited(deps.sql, Buffer.from(hex, 'hex'), reason, s.label).then((held) => {
        // A block holds every bundle with this content, on any node: drop every copy this process keeps.
        deps.bundles.invalidate(null);
        return `Blocked ${hex}${held.length ? `; quarantined ${held.join(' ')}` : ''}.`;
      });
    };
    if (file.sha256) return blocked(file.sha256);
    const done = await within(deps, hashing.hash([file], s.label).then(([hex]) => blocked(hex ?? null)), HASH_WAIT_MS, 'Hashing and blocking');
    return outcome(done, `Hashing the file (${humanSize(file.size)}) goes on on the server; its content is blocked as soon as its hash is known. Reload to see it.`);
  };

  const hash: Act = async (s, b) => {
    const files = await unhashedOfBundle(deps.sql, b.id, MAX_FILES_PER_BUNDLE);
    if (files.length === 0) return `Every file of ${b.short_code} has its SHA-256 recorded.`;
    const bytes = files.reduce((n, f) => n + f.size, 0);
    const hashed = hashing.hash(files, s.label).then((hexes) => `Hashed ${plural(hexes.filter((h) => h !== null).length, 'file')} of ${b.short_code}.`);
    return outcome(await within(deps, hashed, HASH_WAIT_MS, 'Hashing'), `Hashing ${plural(files.length, 'file')} (${humanSize(bytes)}) goes on on the server. Reload to see the hashes.`);
  };

  return [
    route('quarantine', async (s, b) =>
      (await quarantineAudited(deps.sql, b, true, s.label)) ? `Quarantined ${b.short_code}: every path of it answers 451.` : `${b.short_code} was already quarantined.`),
    route('release', async (s, b) =>
      (await quarantineAudited(deps.sql, b, false, s.label)) ? `Released ${b.short_code}.` : `${b.short_code} was not quarantined.`),
    route('expire', async (s, b) => {
      await expireAudited(deps.sql, b, s.label);
      return b.quarantined_at ? `Expired ${b.short_code} (quarantined: kept until released).` : `Expired ${b.short_code}.`;
    }),
    route('delete', async (s, b, fields) => {
      if (fields.confirm !== 'yes') return `Nothing deleted: tick the box beside the button to delete ${b.short_code}.`;
      const done = await deleteAudited(deps.sql, b, s.label, deps.blobs);
      if (!done) return `${b.short_code} was already deleted.`;
      for (const f of done.failed) deps.log.warn({ err: f.err, key: f.key }, 'stored file not removed: the sweeper removes it later');
      return `Deleted ${b.short_code} and its ${plural(done.files, 'file')}${done.failed.length ? ` (${done.failed.length} left for the sweeper)` : ''}.`;
    }),
    route('block', block),
    route('hash', hash),
  ];
}
