import fsp from 'node:fs/promises';

/**
 * Raster formats we hand to the decoder, recognized by their leading bytes. libvips picks its
 * loader from the content, not the declared type, so an SVG (or anything else) uploaded as
 * image/png would otherwise reach librsvg: only these signatures are ever decoded.
 */
const SIGNATURES: ReadonlyArray<readonly [string, (b: Buffer) => boolean]> = [
  ['png', (b) => b.subarray(0, 8).equals(Buffer.from('89504e470d0a1a0a', 'hex'))],
  ['jpeg', (b) => b[0] === 0xff && b[1] === 0xd8 && b[2] === 0xff],
  ['gif', (b) => /^GIF8[79]a/.test(b.toString('latin1', 0, 6))],
  ['webp', (b) => b.toString('latin1', 0, 4) === 'RIFF' && b.toString('latin1', 8, 12) === 'WEBP'],
  ['avif', (b) => b.toString('latin1', 4, 8) === 'ftyp' && /^(avif|avis|heic|heix|mif1)$/.test(b.toString('latin1', 8, 12))],
  ['tiff', (b) => /^(II\*\0|MM\0\*)$/.test(b.toString('latin1', 0, 4))],
];

/** The raster format of the file's first bytes, or null (unknown, SVG, text, missing file). */
export async function sniffRaster(file: string): Promise<string | null> {
  let fh: fsp.FileHandle | undefined;
  try {
    fh = await fsp.open(file, 'r');
    const head = Buffer.alloc(16);
    const { bytesRead } = await fh.read(head, 0, head.length, 0);
    if (bytesRead < 12) return null;
    return SIGNATURES.find(([, test]) => test(head))?.[0] ?? null;
  } catch {
    return null;
  } finally {
    await fh?.close();
  }
}
