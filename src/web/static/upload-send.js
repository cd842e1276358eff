// The upload page's transport: plans the picked files into multipart batches and tus uploads and
// sends one task at a time (upload.js keeps the page and the bundle it makes).
'use strict';
(function () {
  var human = window.SluiceUi.human;

  /**
   * `hooks`: appendToken() (the bundle to append to, or null for a new one), bundleFields(),
   * authHeaders(), mark(item, fraction), processing() (the last byte left, the server works) and
   * e2e() (the end-to-end encryption state of upload.js, or null: see sendTus).
   */
  window.SluiceSend = function (form, hooks) {
    // Files above the threshold go through tus in chunks (resumable, retried after a dropped
    // connection); smaller ones share multipart requests. Whatever the mix, the first request
    // creates the bundle and the rest append to it with its upload token: one bundle.
    var MiB = 1024 * 1024;
    var tusThreshold = Number(form.getAttribute('data-tus-threshold'));
    if (!(tusThreshold >= 0)) tusThreshold = 64 * MiB;
    var tusChunk = Number(form.getAttribute('data-tus-chunk')) || 64 * MiB;
    var canTus = !!(window.tus && window.tus.isSupported);
    // Multipart batches stay far below the 1e9-byte Content-Length the 20.30 binding drops.
    var BATCH_BYTES = 256 * MiB;
    var RETRY_DELAYS = [0, 1000, 3000, 5000, 10000, 20000, 30000, 60000];
    // Ciphertext goes up in chunks of at most 16 MiB: the page holds about one chunk in memory.
    var E2E_CHUNK = Math.min(tusChunk, 16 * MiB);

    function errorText(status, body, retryAfter) {
      var msg = body && body.error ? body.error : 'Upload failed (HTTP ' + status + ')';
      if (status === 429) {
        var wait = Number(retryAfter);
        msg = 'Too many uploads from your address. ' + (wait > 0 ? 'Try again in ' + (wait < 120 ? wait + ' seconds.' : Math.ceil(wait / 60) + ' minutes.') : 'Try again later.');
      } else if ((status === 400 || status === 413) && /size|limit/i.test(msg) && !/at most/.test(msg)) {
        msg = msg + ': the bundle can hold at most ' + human(Number(form.getAttribute('data-max'))) + '.';
      } else if (status === 413) {
        msg = 'These files are too large to send in one request.';
      } else if (status === 403) {
        msg = msg + '. The upload link may have expired.';
      }
      return msg;
    }
    function parse(text) { try { return JSON.parse(text); } catch (_) { return null; } }
    function describe(xhr) { return errorText(xhr.status, parse(xhr.responseText), xhr.getResponseHeader('Retry-After')); }
    function describeTus(err) {
      var res = err && err.originalResponse;
      if (!res || !res.getStatus()) return 'The connection was lost. Check your network and try again.';
      return errorText(res.getStatus(), parse(res.getBody()), res.getHeader('Retry-After'));
    }

    /** Small files in multipart batches first (the bundle exists after one request), then one tus upload per large file. */
    function plan(items) {
      var tasks = [];
      var batch = null;
      // Encrypted files are streamed through the cipher into tus, whatever their size.
      if (hooks.e2e()) return items.map(function (it) { return { tus: true, items: [it], bytes: it.file.size }; });
      items.forEach(function (it) {
        if (canTus && it.file.size > tusThreshold) return;
        if (!batch || (batch.items.length > 0 && batch.bytes + it.file.size > BATCH_BYTES)) {
          batch = { tus: false, items: [], bytes: 0 };
          tasks.push(batch);
        }
        batch.items.push(it);
        batch.bytes += it.file.size;
      });
      items.forEach(function (it) {
        if (canTus && it.file.size > tusThreshold) tasks.push({ tus: true, items: [it], bytes: it.file.size });
      });
      return tasks;
    }

    /** One multipart request; calls ok({token, shareUrl, files}) or bad(message). */
    function sendMultipart(task, progress, ok, bad) {
      var tok = hooks.appendToken();
      var data = new FormData();
      if (!tok) {
        var fields = hooks.bundleFields();
        Object.keys(fields).forEach(function (k) { data.append(k, fields[k]); });
      }
      task.items.forEach(function (it) { data.append('files[]', it.file, it.file.name); });
      var xhr = new XMLHttpRequest();
      xhr.open('POST', tok ? '/api/v1/upload/' + tok : '/api/v1/upload');
      if (!tok) { var auth = hooks.authHeaders(); Object.keys(auth).forEach(function (h) { xhr.setRequestHeader(h, auth[h]); }); }
      xhr.responseType = 'text';
      xhr.upload.addEventListener('progress', function (ev) {
        // The bytes sent map onto the batch's files in order (headers are a rounding error).
        var sent = ev.lengthComputable ? ev.loaded * (task.bytes / Math.max(ev.total, 1)) : 0;
        var before = 0;
        task.items.forEach(function (it) {
          var size = it.file.size;
          hooks.mark(it, size === 0 ? (sent >= before ? 1 : 0) : Math.min(1, Math.max(0, (sent - before) / size)));
          before += size;
        });
        progress(Math.min(sent, task.bytes));
      });
      xhr.upload.addEventListener('load', hooks.processing);
      xhr.addEventListener('load', function () {
        if (xhr.status !== 200 && xhr.status !== 201) return bad(describe(xhr));
        var body = JSON.parse(xhr.responseText);
        ok({ token: body.upload_token || null, shareUrl: body.vanity_url || body.share_url, files: body.files || [] });
      });
      xhr.addEventListener('error', function () { bad('The connection was lost. Check your network and try again.'); });
      xhr.addEventListener('abort', function () { bad('Upload cancelled.'); });
      xhr.send(data);
    }

    /** One file through tus: chunks of tusChunk, retried and resumed from the server's offset after a break. */
    function sendTus(task, progress, ok, bad) {
      var it = task.items[0];
      var e2e = hooks.e2e();
      if (!e2e || it.sealed) return startTus(it, null, it.file.size, progress, ok, bad);
      // A fresh file key per attempt: a failed encrypted upload starts over rather than resumes.
      it.stored = it.stored || ++e2e.count + '.age';
      window.SluiceAge.encryptFile(it.file, e2e.recipient).then(function (c) {
        startTus(it, window.SluiceAge.tusFileReader(c.stream, c.size, E2E_CHUNK), c.size, progress, ok, bad);
      }, function (err) { bad('Could not encrypt ' + it.file.name + ': ' + err.message); });
    }

    /**
     * `reader` is null for the file itself, or reads its ciphertext (then `size` is the ciphertext's).
     * An encrypted file goes up under its stored name (`it.stored`); its real name joins e2e.entries
     * for the manifest, except for the manifest itself (`it.sealed`).
     */
    function startTus(it, reader, size, progress, ok, bad) {
      var e2e = hooks.e2e();
      var f = it.file;
      var type = f.type || 'application/octet-stream';
      var meta = e2e ? { filename: it.stored || f.name, filetype: 'application/octet-stream' } : { filename: f.name, filetype: type };
      var tok = hooks.appendToken();
      if (tok) meta.upload_token = tok;
      else {
        var fields = hooks.bundleFields();
        Object.keys(fields).forEach(function (k) { meta[k] = fields[k]; });
      }
      var opts = {
        endpoint: window.location.origin + '/api/v1/tus/',
        // After a failed attempt the next click resumes this file's upload instead of starting over.
        uploadUrl: e2e ? null : it.tusUrl || null,
        uploadSize: size,
        chunkSize: reader ? E2E_CHUNK : tusChunk,
        retryDelays: RETRY_DELAYS,
        metadata: meta,
        headers: tok ? {} : hooks.authHeaders(),
        // The page keeps the URL in memory only: a reload starts afresh (its bundle context is gone).
        storeFingerprintForResuming: false,
        onProgress: function (sent, size) {
          hooks.mark(it, size > 0 ? sent / size : 1);
          progress(sent);
        },
        onSuccess: function (payload) {
          var r = payload.lastResponse;
          it.tusUrl = null;
          if (e2e && !it.sealed) e2e.entries.push({ stored: it.stored, name: f.name, type: type, size: f.size });
          ok({
            token: r.getHeader('Sluice-Upload-Token') || null,
            shareUrl: r.getHeader('Sluice-Vanity-Url') || r.getHeader('Sluice-Share-Url'),
            files: [{ id: Number(r.getHeader('Sluice-File-Id')), name: f.name, size: f.size, mime_type: type }],
          });
        },
        onError: function (err) {
          it.tusUrl = upload.url;
          bad(describeTus(err));
        },
      };
      // Only when set: the option's absence selects tus-js-client's own reader of the file.
      if (reader) opts.fileReader = reader;
      var upload = new window.tus.Upload(f, opts);
      upload.start();
    }

    return { plan: plan, multipart: sendMultipart, tus: sendTus, canTus: canTus };
  };
})();
