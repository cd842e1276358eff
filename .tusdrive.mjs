import http from 'node:http';
const base = process.argv[2]; const size = Number(process.argv[3] ?? 900) * 1048576; const piece = Number(process.argv[4] ?? 8) * 1048576;
const agent = new http.Agent({ keepAlive: true, maxSockets: 1 });
const buf = Buffer.alloc(1048576, 7);
function send(url, method, headers, len) {
  return new Promise((resolve, reject) => {
    const req = http.request(url, { method, agent, headers: { ...headers, 'content-length': String(len) } });
    req.on('error', reject);
    req.on('response', (res) => { let b = ''; res.on('data', (c) => (b += c)); res.on('end', () => resolve({ status: res.statusCode, headers: res.headers, body: b })); });
    (async () => { for (let o = 0; o < len; o += buf.length) { if (!req.write(buf.subarray(0, Math.min(buf.length, len - o)))) await new Promise((r) => req.once('drain', r)); } req.end(); })();
  });
}
for (let round = 0; round < Number(process.argv[5] ?? 3); round++) {
  const t0 = performance.now();
  const c = await send(`${base}/api/v1/tus/`, 'POST', { 'tus-resumable': '1.0.0', 'upload-length': String(size), 'upload-metadata': 'filename ' + Buffer.from('x.bin').toString('base64') }, 0);
  if (c.status !== 201) throw new Error(c.status + c.body);
  const url = c.headers.location;
  let pt = 0, np = 0;
  for (let off = 0; off < size; off += piece) {
    const a = performance.now();
    const r = await send(url, 'PATCH', { 'tus-resumable': '1.0.0', 'upload-offset': String(off), 'content-type': 'application/offset+octet-stream' }, Math.min(piece, size - off));
    if (r.status !== 204) throw new Error(r.status + r.body);
    pt += performance.now() - a; np++;
  }
  console.log('client PATCH avg ms', (pt / np).toFixed(2));
  const ms = performance.now() - t0;
  console.log(`tus ${size / 1048576} MiB in ${piece / 1048576} MiB pieces: ${(size / ms / 1000).toFixed(0)} MB/s`);
}
process.exit(0);
