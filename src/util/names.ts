/** C0 and C1 control characters (tabs and line breaks among them), as a character-class body. */
export const CONTROL_CHARS = '\\u0000-\\u001f\\u007f-\\u009f';
/**
 * Bidirectional overrides and isolates: they reorder the text around them, so a name or a
 * description could show a file type reversed or spill its direction into a chat app's link preview.
 */
const BIDI_CHARS = '\\u202a-\\u202e\\u2066-\\u2069';
/** What a file name never keeps: controls, the Unicode line and paragraph separators, bidi controls. */
const NAME_UNSAFE = new RegExp(`[${CONTROL_CHARS}\\u2028\\u2029${BIDI_CHARS}]`, 'g');
const BIDI_CONTROLS = new RegExp(`[${BIDI_CHARS}]`, 'g');
/** What free text from a client never keeps: bidi controls, and controls other than line breaks and tabs. */
const TEXT_UNSAFE = new RegExp(`[\\u0000-\\u0008\\u000b\\u000c\\u000e-\\u001f\\u007f-\\u009f${BIDI_CHARS}]`, 'g');
const LINE_BREAKS = new RegExp(`[${CONTROL_CHARS}\\u2028\\u2029]+`, 'g');

/** Free text from a client (a report's details or contact) as stored: bidi controls and other controls gone. */
export function cleanText(s: string): string {
  return s.replace(/\r\n?/g, '\n').replace(TEXT_UNSAFE, '');
}

/**
 * Client text on one line for an operator (a terminal, a mail): every run of controls and line
 * separators becomes a space, and bidi controls go, so the text reads as stored, in order.
 */
export function oneLine(s: string): string {
  return s.replace(BIDI_CONTROLS, '').replace(LINE_BREAKS, ' ');
}

/** Longest kept file name, in code points; a longer one is cut in its stem (see shorten). */
const MAX_NAME = 255;
/** An extension up to this long (dot included) survives the cut. */
const MAX_KEPT_EXT = 16;

/** A display name from a client's file name: no control characters, no path, bounded length. */
export function cleanFileName(raw: string | undefined): string {
  let name = (raw ?? '').normalize('NFC');
  name = name.replace(NAME_UNSAFE, '');
  name = name.split(/[\\/]/).pop() ?? '';
  name = name.trim().replace(/^\.+$/, '');
  return name === '' ? 'file' : shorten(name);
}

/** Cuts a name to MAX_NAME code points, keeping a short extension: `<long stem>.pdf` stays a PDF. */
function shorten(name: string): string {
  const chars = [...name];
  if (chars.length <= MAX_NAME) return name;
  const dot = name.lastIndexOf('.');
  const ext = dot > 0 ? [...name.slice(dot)] : [];
  const keep = ext.length > 1 && ext.length <= MAX_KEPT_EXT ? ext : [];
  return [...chars.slice(0, MAX_NAME - keep.length), ...keep].join('');
}

const EXT_TYPES: Record<string, string> = {
  jpg: 'image/jpeg', jpeg: 'image/jpeg', png: 'image/png', gif: 'image/gif', webp: 'image/webp', avif: 'image/avif',
  svg: 'image/svg+xml', bmp: 'image/bmp', tif: 'image/tiff', tiff: 'image/tiff', ico: 'image/x-icon',
  heic: 'image/heic', pdf: 'application/pdf', zip: 'application/zip', gz: 'application/gzip', tar: 'application/x-tar',
  '7z': 'application/x-7z-compressed', txt: 'text/plain', md: 'text/markdown', csv: 'text/csv', json: 'application/json',
  html: 'text/html', htm: 'text/html', css: 'text/css', js: 'text/javascript', xml: 'application/xml',
  mp4: 'video/mp4', webm: 'video/webm', mov: 'video/quicktime', mkv: 'video/x-matroska', mp3: 'audio/mpeg',
  wav: 'audio/wav', ogg: 'audio/ogg', flac: 'audio/flac', iso: 'application/x-iso9660-image',
};

/** The declared type when it is a plausible media type, else a guess from the extension. */
export function cleanMimeType(declared: string | undefined, name: string): string {
  const t = (declared ?? '').split(';')[0]!.trim().toLowerCase();
  if (/^[a-z0-9][a-z0-9!#$&^_.+-]{0,63}\/[a-z0-9][a-z0-9!#$&^_.+-]{0,126}$/.test(t) && t !== 'application/octet-stream') {
    return t;
  }
  const ext = /\.([a-z0-9]{1,5})$/i.exec(name)?.[1]?.toLowerCase();
  return (ext && EXT_TYPES[ext]) ?? 'application/octet-stream';
}

/** A description as given, less its bidirectional controls (line breaks stay); nothing left is none. */
export function cleanDescription(d: string | null): string | null {
  const kept = d?.replace(BIDI_CONTROLS, '') ?? '';
  return kept === '' ? null : kept;
}

/**
 * A bundle description as stored: at most 1000 characters and no NUL, which PostgreSQL text cannot
 * hold (it would be a 500). Returns the error code for anything else.
 */
export function descriptionProblem(d: string | null): 'DESCRIPTION_TOO_LONG' | 'INVALID_DESCRIPTION' | null {
  if (d === null) return null;
  if (d.includes('\0')) return 'INVALID_DESCRIPTION';
  return [...d].length > 1000 ? 'DESCRIPTION_TOO_LONG' : null;
}

/** Lenient but bounded check of a notification address. */
export const isEmail = (s: string): boolean =>
  s.length <= 255 && /^[^\s\u0000-\u001f\u007f@<>()[\]\\,;:"]+@[a-z0-9](?:[a-z0-9-]*[a-z0-9])?(?:\.[a-z0-9](?:[a-z0-9-]*[a-z0-9])?)+$/i.test(s);
