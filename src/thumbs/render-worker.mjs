// Decodes uploaded images (and draws share cards) in a process of its own. A small file can be an
// image whose decoder needs far more memory than its header suggests; here the server can watch the
// memory and kill the process past its budget (src/thumbs/render-process.ts), and a decoder crash
// costs a preview, not the server. Plain JS so it runs under plain node whatever loader the server uses.
import sharp from 'sharp';

// One libvips thread, no operation cache: each input is decoded once, and memory stays what one image costs.
sharp.concurrency(1);
sharp.cache(false);

/** Bytes per channel of each libvips band format sharp reports as `depth`. */
const DEPTH_BYTES = { uchar: 1, char: 1, ushort: 2, short: 2, uint: 4, int: 4, float: 4, complex: 8, double: 8, dpcomplex: 16 };

/**
 * What decoding costs, as a multiple of the decoded image, by how the decoder works. AVIF is decoded
 * whole through libheif and aom, several copies at once; an interlaced PNG, a progressive JPEG (its
 * coefficients) and a GIF frame are held whole; baseline JPEG, WebP, TIFF and plain PNG are read in
 * strips or shrunk on load. These refuse the known bombs before any decoding; the watchdog in the
 * server bounds what they do not foresee.
 */
function costFactor(meta) {
  if (meta.format === 'heif') return 6.5;
  if (meta.format === 'gif') return 1.3;
  if (meta.format === 'png' && meta.isProgressive) return 1.5;
  if (meta.format === 'jpeg' && meta.isProgressive) return 1.1;
  return 0.5;
}

/** Memory decoding the image would take, from its header alone; Infinity when the header does not say. */
function decodeCost(meta) {
  const per = meta.depth === undefined ? undefined : DEPTH_BYTES[meta.depth];
  if (!meta.width || !meta.height || !meta.channels || per === undefined) return Infinity;
  return meta.width * meta.height * meta.channels * per * costFactor(meta);
}

async function thumbnail(job) {
  const open = sharp(job.path, { limitInputPixels: job.maxPixels, failOn: 'error', sequentialRead: true });
  const meta = await open.metadata();
  const cost = decodeCost(meta);
  if (cost > job.budget) return { none: 'too_large', detail: `${meta.format} ${meta.width}x${meta.height}: about ${Math.round(cost / 2 ** 20)} MiB to decode` };
  const bytes = await open
    .rotate() // EXIF orientation
    .resize(job.px, job.px, { fit: 'inside', withoutEnlargement: true })
    .webp({ quality: 80 })
    .toBuffer();
  return { bytes };
}

async function card(job) {
  const bytes = await sharp(Buffer.from(job.svg), { limitInputPixels: job.maxPixels }).png({ compressionLevel: 8 }).toBuffer();
  return { bytes };
}

process.on('message', async (job) => {
  let answer;
  try {
    answer = job.t === 'card' ? await card(job) : await thumbnail(job);
  } catch (err) {
    // Whatever the decoder says about an upload means "not a usable image"; for a card it is a fault.
    answer = job.t === 'card' ? { error: String(err?.message ?? err) } : { none: 'undecodable', detail: String(err?.message ?? err) };
  }
  if (process.connected) process.send({ id: job.id, ...answer });
});
// The server went away (or let this process go when idle): nothing is left to do.
process.on('disconnect', () => process.exit(0));
if (process.connected) process.send({ ready: true });
