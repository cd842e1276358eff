// A bundle as the console shows it, on its own page and beside a report: what it is, its files with
// their hashes, and the operator's actions on it as plain forms (no script needed). Every form posts to
// /admin/bundles/<code>/<action> with the session's CSRF token and the page to come back to.
import { when } from './list-views.ts';
import { html, humanSize, plural, type Safe } from '../../util/html.ts';
import { sqlUtc } from '../../util/time.ts';
import type { BundleDetail, BundleListRow, ConsoleFile } from '../../db/admin-bundles.ts';
import { csrfField } from './layout.ts';

/** A time in UTC as the CLI prints it (the lists' own). */
export const at = when;

/** Quarantined, expired or active. */
export function bundleState(b: Pick<BundleListRow, 'quarantined_at' | 'is_expired'>): Safe {
  if (b.quarantined_at) return html`<strong>quarantined</strong> <span class="muted">since ${sqlUtc(b.quarantined_at)}</span>`;
  return b.is_expired ? html`<span class="muted">expired</span>` : html`active`;
}

export const owner = (prefix: string | null): Safe =>
  prefix === null ? html`<span class="muted">anonymous</span>` : html`<a class="mono" href="/admin/bundles?q=${prefix}">${prefix}</a>`;

/** What the forms of a bundle's section carry. */
export interface FormContext {
  readonly csrf: string;
  /** A console path: the page the form is on. */
  readonly back: string;
}

/** What the files table needs besides its rows. */
export interface FilesContext extends FormContext {
  /** The reason a block from this page records (the report it came from, or the bundle). */
  readonly reason: string;
  /** The next page of files; null on the last. */
  readonly more: string | null;
  /** Whether a file is being hashed on the server now. */
  readonly hashing: (fileId: number) => boolean;
}

/** A form of one button posting to the bundle's `action`; `extra`: its other fields. */
function actionForm(code: string, action: string, f: FormContext, label: string, o: { danger?: boolean; extra?: Safe } = {}): Safe {
  return html`<form method="post" action="/admin/bundles/${code}/${action}" class="inline">${csrfField(f.csrf)}<input type="hidden" name="back" value="${f.back}">${o.extra ?? null}<button class="btn${o.danger ? ' danger' : ''}" type="submit">${label}</button></form>`;
}

/** Quarantine or release, expire, delete (a ticked box confirms it: no script asks). */
export function bundleActions(b: BundleDetail, f: FormContext): Safe {
  const code = b.short_code;
  return html`<div class="actions">
${b.quarantined_at ? actionForm(code, 'release', f, 'Release') : actionForm(code, 'quarantine', f, 'Quarantine (451)', { danger: true })}
${b.is_expired ? null : actionForm(code, 'expire', f, 'Expire now')}
${actionForm(code, 'delete', f, 'Delete bundle and files', {
  danger: true,
  extra: html`<label class="inline"><input type="checkbox" name="confirm" value="yes" required> delete for good</label>`,
})}
</div>`;
}

/** The bundle's fields, as rows of a two-column table. */
export function bundleFacts(b: BundleDetail): Safe {
  const rows: Array<[string, unknown]> = [
    ['Code', html`<a class="mono" href="/admin/bundles/${b.short_code}">${b.short_code}</a> · <a href="/${b.short_code}">share page</a>`],
    ['Vanity name', b.vanity ?? html`<span class="muted">none</span>`],
    ['State', bundleState(b)],
    ['Created', at(b.created_at)],
    ['Expires', at(b.expires_at)],
    ['Owner key', b.key_prefix === null ? owner(null) : html`${owner(b.key_prefix)}${b.key_label ? html` <bdi>${b.key_label}</bdi>` : null}`],
    ['Size', html`${humanSize(b.total_size_bytes)} in ${plural(b.file_count, 'file')}`],
    ['Downloads', html`${b.downloads}${b.max_downloads === null ? null : html` <span class="muted">(limit ${b.max_downloads} per file)</span>`}`],
    ['Protection', [b.has_password ? 'password' : null, b.is_encrypted ? 'end-to-end encrypted' : null].filter(Boolean).join(', ') || html`<span class="muted">none</span>`],
  ];
  return html`<table class="grid"><tbody>
${rows.map(([k, v]) => html`<tr><th scope="row">${k}</th><td>${v}</td></tr>\n`)}
</tbody></table>`;
}

/**
 * The files, a page at a time: name, size, SHA-256 (when recorded), downloads, and a button that
 * blocks the file's content (hashing it first when no hash is recorded). `more`: the next page's href.
 */
export function fileTable(b: BundleDetail, files: readonly ConsoleFile[], f: FilesContext): Safe {
  const block = (file: ConsoleFile): Safe =>
    actionForm(b.short_code, 'block', f, file.sha256 ? 'Block this content' : 'Hash and block', {
      danger: true,
      extra: html`<input type="hidden" name="file" value="${file.id}"><input type="hidden" name="reason" value="${f.reason}">`,
    });
  const hashCell = (file: ConsoleFile): Safe => {
    if (file.sha256) return html`<span class="mono">${file.sha256}</span>`;
    return html`<span class="muted">${f.hashing(file.id) ? 'being hashed now' : 'not recorded'}</span>`;
  };
  return html`<table class="grid">
<thead><tr><th>Name</th><th>Size</th><th>SHA-256</th><th>Downloads</th><th></th></tr></thead>
<tbody>
${files.map((file) => html`<tr><td><bdi>${file.name}</bdi> <span class="muted">${file.mime_type}</span></td><td>${humanSize(file.size)}</td><td>${hashCell(file)}</td><td>${file.download_count}</td><td>${block(file)}</td></tr>\n`)}
</tbody></table>
${files.length === 0 ? html`<p class="muted">No files.</p>` : null}
${f.more ? html`<nav class="pager"><a class="btn" href="${f.more}" rel="next">More files</a></nav>` : null}
${b.unhashed > 0
  ? html`<p class="muted">${plural(b.unhashed, 'file')} (${humanSize(b.unhashed_bytes)}) stored without a recorded SHA-256: search by hash does not find them until they are hashed.</p>
${actionForm(b.short_code, 'hash', f, `Hash ${plural(b.unhashed, 'file')} now`)}`
  : null}`;
}

/** The bundle's facts, actions and files, as one section. */
export function bundlePanel(b: BundleDetail, files: readonly ConsoleFile[], f: FilesContext): Safe {
  return html`<section class="card">
<h2>Bundle <span class="mono">${b.short_code}</span></h2>
${bundleFacts(b)}
${bundleActions(b, f)}
<h2>Files</h2>
${fileTable(b, files, f)}
</section>`;
}
