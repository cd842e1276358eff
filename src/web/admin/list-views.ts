// What the console's lists share: times as the CLI prints them, and the pager of a keyset-paged list.
import { html, type Safe } from '../../util/html.ts';
import { sqlUtc } from '../../util/time.ts';

/** A time in UTC, as the CLI prints it; `none` when there is none. */
export const when = (d: Date | null, none = 'never'): Safe =>
  d === null ? html`<span class="muted">${none}</span>` : html`<time datetime="${d.toISOString()}">${sqlUtc(d)}</time>`;

/**
 * The links under a list: back to the newest page (when this is a later one) and on to older rows
 * (when there are more). `keep`: the list's filters, carried along.
 */
export function pager(path: string, o: { keep?: Record<string, string>; next: string | null; later: boolean }): Safe | null {
  if (o.next === null && !o.later) return null;
  const href = (extra: Record<string, string>): string => {
    const q = new URLSearchParams({ ...o.keep, ...extra }).toString();
    return q ? `${path}?${q}` : path;
  };
  return html`<nav class="pager" aria-label="Pages">
${o.later ? html`<a class="btn" href="${href({})}">Newest</a>` : null}
${o.next !== null ? html`<a class="btn" href="${href({ before: o.next })}" rel="next">Older</a>` : null}
</nav>`;
}

/** A refusal shown above a form. */
export const problem = (error: string | undefined): Safe | null => (error ? html`<p class="error" role="alert">${error}</p>` : null);
