// The encrypted manifest of an end-to-end encrypted bundle: the real names, types and description,
// encrypted like the files. The upload page, the share page and the command-line client share it.

/** The stored name of a bundle's encrypted manifest (file names, types, description). */
export const MANIFEST_NAME = 'manifest.age';

/** A manifest is a few KiB per thousand files; a larger one is not read. */
export const MANIFEST_MAX = 8 * 1024 * 1024;

export interface ManifestEntry {
  /** The name the file is stored under (`1.age`, …). */
  readonly stored: string;
  readonly name: string;
  readonly type: string;
  readonly size: number;
}

export interface Manifest {
  readonly sluice_manifest: 1;
  readonly description: string | null;
  readonly files: readonly ManifestEntry[];
}

/** A manifest read back, or null if the JSON is not one (then names are shown as stored). */
export function parseManifest(text: string): Manifest | null {
  let m: unknown;
  try {
    m = JSON.parse(text);
  } catch {
    return null;
  }
  const o = m as Partial<Manifest> | null;
  if (!o || o.sluice_manifest !== 1 || !Array.isArray(o.files)) return null;
  const files = o.files.filter(
    (f) => f && typeof f.stored === 'string' && typeof f.name === 'string' && typeof f.size === 'number',
  ).map((f) => ({ stored: f.stored, name: f.name, type: typeof f.type === 'string' ? f.type : 'application/octet-stream', size: f.size }));
  return { sluice_manifest: 1, description: typeof o.description === 'string' ? o.description : null, files };
}

