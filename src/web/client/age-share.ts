// The share page of an encrypted bundle (#share[data-encrypted]): reads the key from the link's
// fragment, decrypts the manifest to show the real names and description, and saves files
// decrypted, through the service worker (any size) or, without one, in memory (small files only).
import { decryptStream, decryptText, failure, isIdentity, keyFromHash, MANIFEST_MAX, MANIFEST_NAME, parseManifest, type Manifest, type ManifestEntry } from './age-core.ts';
import { saveDecrypted, type SaveItem } from './age-save.ts';

interface FileRow {
  readonly id: number;
  readonly name: string;
  readonly size: number;
  readonly mime_type: string;
}

const $ = (id: string): HTMLElement | null => document.getElementById(id);

export function openSharePage(): void {
  const share = $('share');
  if (!share || share.getAttribute('data-encrypted') !== '1') return;
  const code = share.getAttribute('data-code') ?? '';
  const note = $('e2e-note')!;
  const say = (text: string, bad = false): void => {
    note.textContent = text;
    note.classList.toggle('error', bad);
  };
  const key = keyFromHash(window.location.hash);
  if (key === null) {
    say('These files are end-to-end encrypted. This link has no key (the part after “#key=”), so they cannot be opened here: ask the sender for the full link.', true);
    return;
  }
  if (!isIdentity(key)) {
    say('The key in this link is damaged (it must read “#key=AGE-SECRET-KEY-1…”). Ask the sender for the full link.', true);
    return;
  }
  // Decryption runs on Web Crypto, which browsers give only to secure pages: HTTPS, or localhost.
  if (!window.isSecureContext || !globalThis.crypto?.subtle) {
    say('These files are end-to-end encrypted, and browsers decrypt only on pages served over HTTPS or from localhost. Open this link at such an address, or save the files and open them with the age command.', true);
    return;
  }
  const start = (token: string | null): void => {
    say('Decrypting the file list…');
    open(code, key, token, say).catch((err: unknown) => say(`These files cannot be opened: ${failure(err)}.`, true));
  };
  // A locked bundle lists its files once unlocked: share.js says so with the access token.
  if (share.querySelector('#unlock')) document.addEventListener('sluice:unlocked', (e) => start((e as CustomEvent<string>).detail));
  else start(new URLSearchParams(window.location.search).get('t'));
}

async function open(code: string, key: string, token: string | null, say: (t: string, bad?: boolean) => void): Promise<void> {
  const q = token ? `?t=${encodeURIComponent(token)}` : '';
  const res = await fetch(`/api/v1/bundle/${encodeURIComponent(code)}`, { headers: token ? { 'X-Access-Token': token } : {} });
  if (!res.ok) throw new Error(`the server answered HTTP ${res.status}`);
  const files = ((await res.json()) as { files: FileRow[] }).files;
  const manifestRow = files.find((f) => f.name === MANIFEST_NAME && f.size <= MANIFEST_MAX);
  let manifest: Manifest | null = null;
  if (manifestRow) {
    const bytes = new Uint8Array(await (await fetch(`/d/${manifestRow.id}${q}`)).arrayBuffer());
    manifest = parseManifest(await decryptText(key, bytes));
  } else if (files[0]) {
    // No manifest (files uploaded from a shell): the first file's header tells whether the key fits.
    const first = await fetch(`/d/${files[0].id}${q}`);
    const plain = await decryptStream(key, first.body!);
    await plain.cancel();
  }
  const byStored = new Map<string, ManifestEntry>((manifest?.files ?? []).map((f) => [f.stored, f]));
  const content = files.filter((f) => !(manifest && f === manifestRow));
  const items = new Map<number, SaveItem>();
  for (const f of content) {
    const m = byStored.get(f.name);
    // Without a manifest entry a file is named as stored, less the `.age` a shell upload ends with.
    items.set(f.id, { url: `/d/${f.id}${q}`, name: m?.name ?? (f.name.replace(/\.age$/i, '') || f.name), type: m?.type ?? 'application/octet-stream', size: m?.size ?? f.size });
  }
  render(code, key, items, manifest, manifestRow?.id ?? null, say);
}

/** Shows the decrypted names and wires the download buttons and "Download all". */
function render(code: string, key: string, items: Map<number, SaveItem>, manifest: Manifest | null, manifestId: number | null, say: (t: string, bad?: boolean) => void): void {
  const human = (window as unknown as { SluiceUi: { human(n: number): string } }).SluiceUi.human;
  document.querySelectorAll<HTMLElement>('#files li.file').forEach((li) => {
    const id = Number(li.getAttribute('data-id'));
    if (id === manifestId) {
      li.hidden = true;
      return;
    }
    const item = items.get(id);
    if (!item) return;
    li.querySelector('.name')!.textContent = item.name;
    li.querySelector('.sub')!.textContent = `${human(item.size)} · ${item.type}`;
    const badge = li.querySelector('.badge');
    if (badge) badge.textContent = (/\.([a-z0-9]{1,4})$/i.exec(item.name)?.[1] ?? 'file').toUpperCase();
    const a = li.querySelector<HTMLAnchorElement>('a.btn');
    a?.addEventListener('click', (e) => {
      e.preventDefault();
      void run([item], null);
    });
  });
  const all = [...items.values()];
  const h1 = document.querySelector('#share h1');
  if (h1 && h1.firstChild) h1.firstChild.textContent = `${all.length} ${all.length === 1 ? 'file' : 'files'} `;
  if (manifest?.description) {
    const p = document.createElement('p');
    p.className = 'desc';
    p.textContent = manifest.description;
    document.querySelector('#share .meta')?.before(p);
  }
  $('zip')?.addEventListener('click', (e) => {
    e.preventDefault();
    void run(all, `${code}.zip`);
  });
  const intro = manifest
    ? 'End-to-end encrypted: names and files are decrypted in this browser with the key in this link.'
    : 'End-to-end encrypted: files are decrypted in this browser with the key in this link. They were uploaded without a file list, so their names are shown as stored (less “.age”).';
  say(intro);
  document.body.setAttribute('data-e2e', 'ready');

  async function run(list: SaveItem[], zipName: string | null): Promise<void> {
    const what = zipName ?? list[0]!.name;
    say(`Decrypting “${what}”…`);
    const r = await saveDecrypted(list, zipName, key);
    if (r.ok) say(r.message);
    else say(r.message, true);
  }
}
