import { layout } from './html.ts';
import { html, humanSize, plural, type Safe } from '../util/html.ts';
import { isoUtc, sqlUtc } from '../util/time.ts';
import { DEFAULT_UPLOAD_OPTIONS, type UploadOptions } from './upload-options.ts';
import { expirySelect } from './expiry-select.ts';

import { hasPreview } from '../thumbs/previewable.ts';

/** What the templates need; `asset` maps a static name to its versioned URL. */
export interface View {
  readonly asset: (name: string) => string;
  readonly baseUrl: string;
}

/**
 * The View of a running server. `baseUrl` is read when a page renders: with PORT=0 and no BASE_URL
 * the origin names the port only once the server listens.
 */
export function serverView(assets: { url(name: string): string }, config: { readonly baseUrl: string }): View {
  return {
    asset: (name) => assets.url(name),
    get baseUrl() {
      return config.baseUrl;
    },
  };
}

/** The View of one request: its links name `origin` (see http/origin.ts). */
export function requestView(assets: { url(name: string): string }, origin: string): View {
  return { asset: (name) => assets.url(name), baseUrl: origin };
}

export interface FileView {
  readonly id: number;
  readonly name: string;
  readonly size: number;
  readonly mime_type: string;
  /** Complete downloads counted against the bundle's max_downloads. */
  readonly downloads_done?: number;
}

export interface BundleView {
  readonly short_code: string;
  readonly description: string | null;
  readonly file_count: number;
  readonly total_size_bytes: number;
  readonly expires_at: Date | null;
  /** Encrypted in the browser or shell with age: the server holds ciphertext and neutral names. */
  readonly is_encrypted?: boolean;
  readonly max_downloads?: number | null;
}

/** Expiry in UTC for the HTML; share.js/upload.js rewrite it in the viewer's local time. */
function expiry(at: Date | null): Safe {
  if (at === null) return html`Never expires`;
  return html`Expires <time class="local-time" datetime="${isoUtc(at)}" data-utc="${at.toISOString()}">${sqlUtc(at).slice(0, 16)} UTC</time>`;
}

function badge(f: FileView): string {
  const ext = /\.([a-z0-9]{1,4})$/i.exec(f.name)?.[1];
  return (ext ?? f.mime_type.split('/')[0] ?? 'file').toUpperCase().slice(0, 4);
}

/** One row of a file list; `query` carries an access token (`?t=…`) for locked bundles. */
export function fileRow(f: FileView, o: { query?: string; manage?: boolean; encrypted?: boolean; maxDownloads?: number | null } = {}): Safe {
  const q = o.query ?? '';
  const thumb = hasPreview(f.mime_type, { encrypted: o.encrypted === true, maxDownloads: o.maxDownloads ?? null })
    ? html`<img src="/d/${f.id}?preview=1${q ? `&${q.slice(1)}` : ''}" alt="" loading="lazy" decoding="async">`
    : html`<span class="badge">${badge(f)}</span>`;
  const action = o.manage
    ? html`<button class="btn danger" type="button" data-delete="${f.id}">Delete</button>`
    : html`<a class="btn" href="/d/${f.id}${q}" download>Download</a>`;
  // A limited bundle: the downloads this file has left.
  const left = o.maxDownloads ? ` · ${plural(Math.max(0, o.maxDownloads - (f.downloads_done ?? 0)), 'download')} left` : '';
  return html`<li class="file" data-id="${f.id}">
<span class="thumb">${thumb}</span>
<span class="info"><span class="name">${f.name}</span><span class="sub">${humanSize(f.size)} · ${f.mime_type}${left}</span></span>
${action}
</li>`;
}

/**
 * Link-preview tags. A locked bundle's preview names no description (it often says what the files
 * are) and no image (/og/ answers 404 without a credential, as every content path does).
 */
function ogTags(v: View, b: BundleView, locked: boolean): Safe {
  // An encrypted bundle's card names nothing the uploader typed, even a description sent in clear.
  const title = b.description && !locked && !b.is_encrypted ? b.description.slice(0, 80) : `${plural(b.file_count, 'file')} on Sluice`;
  const note = [locked ? 'password-protected' : '', b.is_encrypted ? 'end-to-end encrypted' : ''].filter(Boolean).join(', ');
  const desc = `${plural(b.file_count, 'file')}, ${humanSize(b.total_size_bytes)} shared with Sluice${note ? ` (${note})` : ''}`;
  const image = `${v.baseUrl}/og/${b.short_code}.png`;
  return html`<meta name="description" content="${desc}">
<meta property="og:type" content="website">
<meta property="og:site_name" content="Sluice">
<meta property="og:title" content="${title}">
<meta property="og:description" content="${desc}">
<meta property="og:url" content="${v.baseUrl}/${b.short_code}">
${locked
  ? html`<meta name="twitter:card" content="summary">`
  : html`<meta property="og:image" content="${image}">
<meta property="og:image:width" content="1200">
<meta property="og:image:height" content="630">
<meta name="twitter:card" content="summary_large_image">
<meta name="twitter:image" content="${image}">`}
<meta name="twitter:title" content="${title}">
<meta name="twitter:description" content="${desc}">
<meta name="robots" content="noindex">`;
}

/** The password form of a locked bundle; common.js (SluiceUi.unlock) posts it to /api/verify-access. */
function unlockForm(code: string): Safe {
  return html`<form id="unlock" class="unlock" method="post" action="/api/verify-access">
<input type="hidden" name="short_code" value="${code}">
<label for="pw"><span class="lock" aria-hidden="true"></span>These files are protected by a password.</label>
<div class="row"><input id="pw" name="password" type="password" required autocomplete="current-password" placeholder="Password">
<button class="btn primary" type="submit">Unlock</button></div>
<p class="error" role="alert" hidden></p>
</form>`;
}

/** Files listed per share page: a bundle of thousands of files is shown a page at a time. */
export const FILES_PER_PAGE = 100;

/** The 1-based page number of `?page=`, clamped to the pages there are (anything else: 1). */
export function pageNumber(raw: string | null, fileCount: number): number {
  const pages = Math.max(1, Math.ceil(fileCount / FILES_PER_PAGE));
  const n = raw !== null && /^[1-9]\d{0,6}$/.test(raw) ? Number(raw) : 1;
  return Math.min(n, pages);
}

/** Links to the previous and next pages of a long list; `query` is '' or `?t=…`. */
function pager(code: string, page: number, count: number, query: string): Safe | null {
  const pages = Math.ceil(count / FILES_PER_PAGE);
  if (pages <= 1) return null;
  const href = (n: number): string => `/${code}?page=${n}${query ? `&${query.slice(1)}` : ''}`;
  const first = (page - 1) * FILES_PER_PAGE + 1;
  const last = Math.min(count, page * FILES_PER_PAGE);
  return html`<nav class="pager" aria-label="File list pages">
${page > 1 ? html`<a class="btn" rel="prev" href="${href(page - 1)}">Previous</a>` : null}
<span class="muted">Files ${first}–${last} of ${count} · page ${page} of ${pages}</span>
${page < pages ? html`<a class="btn" rel="next" href="${href(page + 1)}">Next</a>` : null}
</nav>`;
}

/**
 * GET /<code>: the file list (page `page`, FILES_PER_PAGE files), or the password form when the
 * bundle is locked for this viewer.
 */
export function sharePage(v: View, b: BundleView, files: readonly FileView[] | null, query: string, page = 1): Safe {
  const code = b.short_code;
  const shown = files?.slice((page - 1) * FILES_PER_PAGE, page * FILES_PER_PAGE) ?? null;
  const nav = files === null ? null : pager(code, page, files.length, query);
  const list =
    files === null
      ? html`${unlockForm(code)}
<div id="unlocked" hidden>
<div class="actions"><a class="btn primary" id="zip" href="/zip/${code}" download>Download all as .zip</a></div>
<ul class="files" id="files"></ul>
</div>`
      : html`<div class="actions"><a class="btn primary" id="zip" href="/zip/${code}${query}" download>Download all as .zip</a></div>
<ul class="files" id="files">${shown!.map((f) => fileRow(f, { query, encrypted: b.is_encrypted === true, maxDownloads: b.max_downloads ?? null }))}</ul>
${nav}`;
  const enc = b.is_encrypted === true;
  // age.js reads the key from the link's fragment and decrypts here (see src/web/client/age-share.ts).
  const body = html`<section class="card share" id="share" data-code="${code}"${enc ? html` data-encrypted="1" data-sw="${v.asset('age-sw.js')}"` : null}>
<p class="eyebrow">Shared files${enc ? ' · end-to-end encrypted' : ''}</p>
<h1>${plural(b.file_count, 'file')} <span class="muted">· ${humanSize(b.total_size_bytes)}</span></h1>
${b.description && files !== null ? html`<p class="desc">${b.description}</p>` : null}
<p class="meta">${expiry(b.expires_at)}</p>
${enc ? html`<p class="e2e-note" id="e2e-note" role="status">These files are end-to-end encrypted. Decrypting them needs this page's script and the key in the link.</p>` : null}
${list}
${reportLink(code)}
</section>`;
  const head = ogTags(v, b, files === null);
  const scripts = enc ? ['common.js', 'share.js', 'age.js'] : ['common.js', 'share.js'];
  return layout({ title: `${plural(b.file_count, 'file')} · Sluice`, head, body, scripts, asset: v.asset });
}

/** The target files are picked or dropped on, and the queue that lists them (upload and drop pages). */
export const dropZone = (): Safe => html`<label class="drop" id="drop">
<input type="file" id="pick" name="files[]" multiple>
<span class="drop-icon" aria-hidden="true"></span>
<span class="drop-title">Drop files here</span>
<span class="drop-sub">or <u>choose files</u> from your device</span>
</label>
<ul class="queue" id="queue"></ul>`;

/** The upload form; with `token` it appends to that bundle instead of creating one (`expiryDays`: the new bundle's default). */
function uploadForm(v: View, o: { token?: string; maxBytes: number; expiryDays?: number; upload: UploadOptions }): Safe {
  const endpoint = o.token ? `/api/v1/upload/${o.token}` : '/api/v1/upload';
  return html`<form id="upload" class="upload" data-endpoint="${endpoint}" data-base="${v.baseUrl}" data-mode="${o.token ? 'append' : 'new'}" data-max="${o.maxBytes}" data-tus-threshold="${o.upload.tusThresholdBytes}" data-tus-chunk="${o.upload.tusChunkBytes}">
${dropZone()}
${o.token
  ? null
  : html`<details class="options"><summary>Description, password, notification, download limit, expiry</summary>
<label>Description <textarea name="description" maxlength="1000" rows="2" placeholder="What is this?"></textarea></label>
<label>Password <input type="password" name="access_password" autocomplete="new-password" placeholder="Leave empty for a public link"></label>
<label>Notify me of downloads <input type="email" name="notify_email" maxlength="255" placeholder="you@example.com"></label>
<label>Download limit <input type="number" name="max_downloads" min="1" max="1000" step="1" inputmode="numeric" placeholder="Unlimited: each file can be downloaded this many times"></label>
${o.expiryDays === undefined ? null : expirySelect(o.expiryDays)}
<label>API key <input type="password" id="api-key" autocomplete="off" spellcheck="false" placeholder="sk_… kept in this browser only, sent only to this site"></label>
<label id="vanity-row" hidden>Vanity name (Premium) <input name="vanity" maxlength="48" spellcheck="false" placeholder="team-photos"></label>
</details>
<label class="check"><input type="checkbox" id="encrypt" name="encrypt"> Encrypt in this browser <span class="muted">· names, description and files; the server never sees the key</span></label>`}
<div class="total" id="total" hidden><progress id="total-bar" max="1" value="0"></progress><span id="total-text"></span></div>
<p class="error" id="error" role="alert" hidden></p>
<button class="btn primary big" id="send" type="submit" disabled>${o.token ? 'Add files' : 'Upload'}</button>
</form>`;
}

function linkBox(id: string, value: string, label: string): Safe {
  return html`<label class="field-label" for="${id}">${label}</label>
<div class="copy-row"><input id="${id}" readonly value="${value}"><button class="btn" type="button" data-copy="${id}">Copy</button></div>`;
}

/** GET / */
export function uploadPage(v: View, maxBytes: number, expiryDays: number, upload = DEFAULT_UPLOAD_OPTIONS): Safe {
  const body = html`<section class="card" id="compose">
<h1>Share files, simply.</h1>
<p class="lead">Up to ${humanSize(maxBytes)} per bundle, no account. Links expire after ${plural(expiryDays, 'day')}.
Bigger bundles and longer-lasting links come with an <a href="/api-keys">API key</a>.</p>
${uploadForm(v, { maxBytes, expiryDays, upload })}
</section>
<section class="card result" id="result" hidden>
<p class="eyebrow">Done</p>
<h2>Your link is ready</h2>
${linkBox('share-link', '', 'Share link')}
<p class="e2e-note warn" id="e2e-warning" hidden>This link is the key. Anyone who has it can decrypt the files, and nobody can without it: the server does not keep the key, so a lost link cannot be recovered.</p>
<div class="qr-wrap"><img id="qr" class="qr" alt="QR code of the share link"></div>
${linkBox('upload-link', '', 'Upload link: keep this to add or delete files')}
<div class="actions"><a class="btn primary" id="open-share" href="/">Open share page</a><a class="btn" href="/">Share more files</a></div>
</section>`;
  return layout({ title: 'Sluice · share files', body, scripts: ['qrcode.js', 'common.js', 'tus.js', 'age.js', 'upload-send.js', 'upload.js'], asset: v.asset });
}

/**
 * GET /u/<token>: the bundle's links, its files with delete buttons, and the form that adds files.
 * `files` is null when the bundle is locked for this viewer: the upload token lets them add and
 * delete files, but listing them takes the password like every content path (the form below
 * reloads the page with ?t=<access token>; `query` carries it into the thumbnails).
 */
export function managePage(
  v: View, b: BundleView, files: readonly FileView[] | null, token: string, maxBytes: number,
  upload = DEFAULT_UPLOAD_OPTIONS, query = '',
): Safe {
  const shareUrl = `${v.baseUrl}/${b.short_code}`;
  const list =
    files === null
      ? html`<p class="muted">The files already in this bundle are listed once it is unlocked.</p>
${unlockForm(b.short_code)}
<ul class="files" id="files"></ul>`
      : html`<ul class="files" id="files">${files.map((f) => fileRow(f, { manage: true, query, encrypted: b.is_encrypted === true, maxDownloads: b.max_downloads ?? null }))}</ul>
${files.length === 0 ? html`<p class="muted" id="empty">No files left in this bundle.</p>` : null}`;
  const body = html`<section class="card" id="manage" data-token="${token}" data-code="${b.short_code}">
<p class="eyebrow">Manage bundle</p>
<h1>${plural(b.file_count, 'file')} <span class="muted">· ${humanSize(b.total_size_bytes)}</span></h1>
<p class="meta">${expiry(b.expires_at)}</p>
${linkBox('share-link', shareUrl, 'Share link')}
<div class="qr-wrap"><img id="qr" class="qr" alt="QR code of the share link" data-qr="${shareUrl}"></div>
${list}
</section>
${b.is_encrypted
  ? html`<section class="card"><h2>Add files</h2><p class="muted">This bundle is end-to-end encrypted: files are added to it from a shell, encrypted with age to the bundle's recipient (see the README).</p></section>`
  : html`<section class="card" id="compose">
<h2>Add files</h2>
${uploadForm(v, { token, maxBytes, upload })}
</section>`}`;
  return layout({ title: `Manage ${b.short_code} · Sluice`, body, scripts: ['qrcode.js', 'common.js', 'tus.js', 'upload-send.js', 'upload.js'], asset: v.asset });
}

export function notFoundPage(v: View): Safe {
  const body = html`<section class="card center">
<p class="big-code">404</p>
<h1>Nothing here</h1>
<p class="lead">This link is wrong, or its files have expired or were deleted.</p>
<div class="actions"><a class="btn primary" href="/">Share your own files</a></div>
</section>`;
  return layout({ title: 'Not found · Sluice', body, asset: v.asset });
}

/** A content path refused by its budget (429): what happened and when to come back. */
export function slowDownPage(v: View, retryAfterSeconds: number): Safe {
  const minutes = Math.max(1, Math.ceil(retryAfterSeconds / 60));
  const body = html`<section class="card center">
<p class="big-code">429</p>
<h1>Too many requests</h1>
<p class="lead">Too many pages or files were asked for from your address. Please try again in ${minutes === 1 ? 'a minute' : `${minutes} minutes`}.</p>
</section>`;
  return layout({ title: 'Too many requests · Sluice', body, asset: v.asset });
}

/** The "Report" link every share page carries (its password prompt too). */
export const reportLink = (code: string): Safe =>
  html`<p class="meta report"><a href="/report/${code}" rel="nofollow">Report abuse</a></p>`;
