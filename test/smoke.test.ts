import { test } from 'node:test';
import assert from 'node:assert/strict';
import { request } from 'undici';
import { backends, startServer } from './helpers/server.ts';
import { multipart } from './helpers/multipart.ts';

for (const backend of backends()) {
  test(`smoke: upload then download (${backend})`, async () => {
    const srv = await startServer(backend);
    try {
      const { body, contentType } = multipart([{ name: 'files[]', filename: 'a.txt', data: Buffer.from('hello') }]);
      const up = await request(`${srv.url}/api/v1/upload`, { method: 'POST', body, headers: { 'content-type': contentType } });
      assert.equal(up.statusCode, 201);
      const json = (await up.body.json()) as { files: Array<{ download_url: string }> };
      const dl = await request(`${srv.url}${json.files[0]!.download_url}`);
      assert.equal(await dl.body.text(), 'hello');
      // The embedded PGlite runs with small shared buffers (they are resident in the server process).
      if (backend === 'embedded') assert.equal((await srv.sql`show shared_buffers`)[0]!.shared_buffers, '16MB');
    } finally {
      await srv.close();
    }
  });
}
