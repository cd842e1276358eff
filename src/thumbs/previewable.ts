/**
 * Which files get a preview (`/d/<id>?preview=1`, the thumbnails of pages and listings): raster
 * images only. SVG is untrusted markup and never rasterized; an encrypted bundle holds ciphertext
 * whatever its type says; a file with a download limit has no preview, since a preview is a copy of
 * the image that no limit counts.
 */
export function hasPreview(mimeType: string, o: { encrypted: boolean; maxDownloads: number | null }): boolean {
  const mime = mimeType.toLowerCase();
  return mime.startsWith('image/') && !mime.startsWith('image/svg') && !o.encrypted && o.maxDownloads === null;
}
