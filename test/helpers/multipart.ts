import { randomBytes } from 'node:crypto';

export interface Part {
  name: string;
  value?: string;
  filename?: string;
  contentType?: string;
  data?: Buffer;
}

/** Builds a multipart/form-data body in memory (small test payloads only). */
export function multipart(parts: Part[], boundary = `----sluice${randomBytes(8).toString('hex')}`): {
  body: Buffer;
  contentType: string;
} {
  const chunks: Buffer[] = [];
  for (const p of parts) {
    let head = `--${boundary}\r\nContent-Disposition: form-data; name="${p.name}"`;
    if (p.filename !== undefined) head += `; filename="${p.filename}"`;
    head += '\r\n';
    if (p.filename !== undefined) head += `Content-Type: ${p.contentType ?? 'application/octet-stream'}\r\n`;
    chunks.push(Buffer.from(`${head}\r\n`, 'utf8'), p.data ?? Buffer.from(p.value ?? '', 'utf8'), Buffer.from('\r\n'));
  }
  chunks.push(Buffer.from(`--${boundary}--\r\n`));
  return { body: Buffer.concat(chunks), contentType: `multipart/form-data; boundary=${boundary}` };
}

/** A file part as the upload form sends it (field `files[]`). */
export const filePart = (filename: string, data: Buffer | string, contentType?: string): Part => ({
  name: 'files[]', filename, data: Buffer.isBuffer(data) ? data : Buffer.from(data), contentType,
});
