import { layout } from './html.ts';
import { html, humanSize, plural, type Safe } from '../util/html.ts';
import { dropZone, type View } from './views.ts';
import { DEFAULT_UPLOAD_OPTIONS, type UploadOptions } from './upload-options.ts';

export interface RequestView {
  readonly label: string | null;
  readonly max_bytes: number;
  readonly max_files: number;
  readonly total_size_bytes: number;
  readonly file_count: number;
  readonly expires_at: Date;
}

/**
 * GET /r/<token>: the drop page of an upload request. It shows the request's label and what room is
 * left, never the bundle's link or its files; after sending, a thank-you naming only what was sent.
 */
export function requestPage(v: View, r: RequestView, token: string, upload: UploadOptions = DEFAULT_UPLOAD_OPTIONS): Safe {
  const bytesLeft = Math.max(0, r.max_bytes - r.total_size_bytes);
  const filesLeft = Math.max(0, r.max_files - r.file_count);
  const body = html`<section class="card" id="compose">
<p class="eyebrow">Upload request</p>
<h1>${r.label || 'Send files'}</h1>
<p class="lead">Up to ${plural(filesLeft, 'file')} and ${humanSize(bytesLeft)} more. Open until
<time class="local-time" data-utc="${r.expires_at.toISOString()}">${r.expires_at.toISOString().slice(0, 16).replace('T', ' ')} UTC</time>.
Only the person who asked sees the files.</p>
<form id="drop-form" class="upload" data-endpoint="/api/v1/requests/${token}/upload" data-token="${token}" data-max="${bytesLeft}" data-files="${filesLeft}" data-tus-threshold="${upload.tusThresholdBytes}" data-tus-chunk="${upload.tusChunkBytes}">
${dropZone()}
<div class="total" id="total" hidden><progress id="total-bar" max="1" value="0"></progress><span id="total-text"></span></div>
<p class="error" id="error" role="alert" hidden></p>
<button class="btn primary big" id="send" type="submit" disabled>Send</button>
</form>
</section>
<section class="card result" id="thanks" hidden>
<p class="eyebrow">Sent</p>
<h2>Thank you</h2>
<p class="lead" id="thanks-text"></p>
<ul class="queue" id="sent-list"></ul>
</section>`;
  return layout({ title: `${r.label || 'Upload request'} · Sluice`, body, scripts: ['common.js', 'tus.js', 'request.js'], asset: v.asset });
}
