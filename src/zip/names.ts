/** Longest entry name in UTF-8 bytes; far below the format's 16-bit limit and what file systems accept. */
const MAX_NAME_BYTES = 255;

// C0/C1 controls, line/paragraph separators and bidi overrides (a name must read as what it is).
const UNSAFE_CHARS = /[\u0000-\u001f\u007f-\u009f\u2028\u2029\u202a-\u202e\u2066-\u2069]/g;
// Path separators and the characters Windows refuses in names ("C:x" would also be a drive path).
const SEPARATORS = /[\\/:*?"<>|]/g;

/**
 * One archive entry name from a stored file name: a single path component that no extractor can
 * turn into a path outside its target directory (no separators, no leading dots, no controls).
 */
export function sanitizeEntryName(raw: string): string {
  let name = raw.normalize('NFC').replace(UNSAFE_CHARS, '').replace(SEPARATORS, '_');
  // Leading dots would make "..", "." or a hidden file; trailing dots and spaces vanish on Windows.
  name = name.replace(/^[\s.]+/, '').replace(/[\s.]+$/, '');
  name = truncateUtf8(name, MAX_NAME_BYTES);
  return name === '' ? 'file' : name;
}

function truncateUtf8(s: string, maxBytes: number): string {
  if (Buffer.byteLength(s) <= maxBytes) return s;
  let out = '';
  let bytes = 0;
  for (const ch of s) {
    const n = Buffer.byteLength(ch);
    if (bytes + n > maxBytes) break;
    out += ch;
    bytes += n;
  }
  return out;
}

/**
 * Sanitized names, unique case-insensitively (extraction onto macOS or Windows must not overwrite):
 * the first keeps its name, later ones become `a (1).txt`, `a (2).txt`, … in input order.
 */
export function uniqueEntryNames(raw: readonly string[]): string[] {
  return raw.map(entryNamer());
}

/**
 * uniqueEntryNames one name at a time, for callers that spread a long list over several turns of
 * the event loop: each call names the next entry, unique among those named before it.
 */
export function entryNamer(): (raw: string) => string {
  const used = new Set<string>();
  return (r) => {
    const name = sanitizeEntryName(r);
    let candidate = name;
    if (used.has(candidate.toLowerCase())) {
      const dot = name.lastIndexOf('.');
      // A "suffix" longer than a real extension is kept in the stem, so the counter stays visible.
      const [stem, ext] = dot > 0 && name.length - dot <= 32 ? [name.slice(0, dot), name.slice(dot)] : [name, ''];
      for (let n = 1; used.has(candidate.toLowerCase()); n++) {
        const suffix = ` (${n})${ext}`;
        candidate = truncateUtf8(stem, MAX_NAME_BYTES - Buffer.byteLength(suffix)) + suffix;
      }
    }
    used.add(candidate.toLowerCase());
    return candidate;
  };
}
