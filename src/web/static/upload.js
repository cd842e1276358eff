// Upload page (/) and manage page (/u/<token>): pick or drop files, upload with progress, show links.
'use strict';
(function () {
  var human = window.SluiceUi.human;
  var el = window.SluiceUi.el;
  function $(id) { return document.getElementById(id); }

  // Expiry in the viewer's local time (the HTML carries UTC as a fallback).
  document.querySelectorAll('time.local-time[data-utc]').forEach(function (t) {
    var d = new Date(t.getAttribute('data-utc'));
    if (!isNaN(d.getTime())) t.textContent = d.toLocaleString(undefined, { dateStyle: 'medium', timeStyle: 'short' });
  });

  function drawQr(img, text) {
    if (!img || typeof qrcode !== 'function') return;
    var qr = qrcode(0, 'M');
    qr.addData(text);
    qr.make();
    img.src = qr.createDataURL(6, 2);
  }
  var qrImg = $('qr');
  if (qrImg && qrImg.getAttribute('data-qr')) drawQr(qrImg, qrImg.getAttribute('data-qr'));

  // Copy buttons: data-copy names the input to copy.
  document.addEventListener('click', function (e) {
    var btn = e.target.closest('[data-copy]');
    if (!btn) return;
    var input = $(btn.getAttribute('data-copy'));
    var done = function () { btn.textContent = 'Copied'; setTimeout(function () { btn.textContent = 'Copy'; }, 1500); };
    if (navigator.clipboard && window.isSecureContext) navigator.clipboard.writeText(input.value).then(done, fallback);
    else fallback();
    function fallback() { input.select(); try { document.execCommand('copy'); done(); } catch (_) { /* selected: copy by hand */ } }
  });

  var form = $('upload');
  if (!form) return;
  var pick = $('pick');
  var drop = $('drop');
  var queue = $('queue');
  var sendBtn = $('send');
  var errorBox = $('error');
  var total = $('total');
  var totalBar = $('total-bar');
  var totalText = $('total-text');
  var manage = $('manage');
  var token = manage ? manage.getAttribute('data-token') : null;
  var picked = [];
  var busy = false;

  function showError(msg) { errorBox.textContent = msg; errorBox.hidden = !msg; }

  // An API key, pasted once: kept in this browser's storage (never in a URL) and sent as Bearer on new
  // bundles. A Premium key unlocks the vanity name field.
  var KEY_STORE = 'sluice-api-key';
  var keyInput = $('api-key');
  var vanityRow = $('vanity-row');
  function apiKey() { return keyInput && /^sk_[A-Za-z0-9]{43}$/.test(keyInput.value.trim()) ? keyInput.value.trim() : null; }
  function authHeaders() { var k = token ? null : apiKey(); return k ? { Authorization: 'Bearer ' + k } : {}; }
  function checkKey() {
    var k = apiKey();
    try { if (k) localStorage.setItem(KEY_STORE, k); else if (keyInput.value === '') localStorage.removeItem(KEY_STORE); } catch (_) { /* storage off */ }
    vanityRow.hidden = true;
    if (!k) return;
    fetch('/api/v1/my/usage', { headers: { Authorization: 'Bearer ' + k } })
      .then(function (r) { return r.ok ? r.json() : null; })
      .then(function (body) { vanityRow.hidden = !(body && body.key && body.key.plan === 'premium'); })
      .catch(function () { /* offline: no vanity field */ });
  }
  if (keyInput && vanityRow) {
    try { keyInput.value = localStorage.getItem(KEY_STORE) || ''; } catch (_) { /* storage off */ }
    keyInput.addEventListener('change', checkKey);
    checkKey();
  }

  function renderQueue() {
    queue.textContent = '';
    picked.forEach(function (item, i) {
      var li = el('li');
      li.appendChild(el('span', 'q-name', item.file.name));
      var right = el('span', 'q-size', human(item.file.size));
      if (!busy) {
        var x = el('button', 'x', '\u00d7');
        x.type = 'button';
        x.setAttribute('aria-label', 'Remove ' + item.file.name);
        x.addEventListener('click', function () { picked.splice(i, 1); renderQueue(); });
        right.appendChild(x);
      }
      li.appendChild(right);
      item.bar = el('progress');
      item.bar.max = 1;
      item.bar.value = 0;
      item.li = li;
      li.appendChild(item.bar);
      queue.appendChild(li);
    });
    var size = picked.reduce(function (n, it) { return n + it.file.size; }, 0);
    sendBtn.disabled = busy || picked.length === 0;
    if (!busy) sendBtn.textContent = picked.length ? (token ? 'Add ' : 'Upload ') + picked.length + (picked.length === 1 ? ' file' : ' files') + ' \u00b7 ' + human(size) : (token ? 'Add files' : 'Upload');
  }
  function add(files) {
    for (var i = 0; i < files.length; i++) picked.push({ file: files[i] });
    showError('');
    renderQueue();
  }
  pick.addEventListener('change', function () { add(pick.files); pick.value = ''; });
  ['dragenter', 'dragover'].forEach(function (t) {
    drop.addEventListener(t, function (e) { e.preventDefault(); drop.classList.add('over'); });
  });
  ['dragleave', 'drop'].forEach(function (t) {
    drop.addEventListener(t, function () { drop.classList.remove('over'); });
  });
  drop.addEventListener('drop', function (e) { e.preventDefault(); if (!busy && e.dataTransfer) add(e.dataTransfer.files); });
  // A file dropped beside the target must not navigate away from the page.
  window.addEventListener('dragover', function (e) { e.preventDefault(); });
  window.addEventListener('drop', function (e) { e.preventDefault(); });

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
  // The bundle this page made, kept after a failure so "Upload" sends the rest into it.
  var made = null;

  function errorText(status, body, retryAfter) {
    var msg = body && body.error ? body.error : 'Upload failed (HTTP ' + status + ')';
    if (status === 429) {
      var wait = Number(retryAfter);
      msg = 'Too many uploads from your address. ' + (wait > 0 ? 'Try again in ' + (wait < 120 ? wait + ' seconds.' : Math.ceil(wait / 60) + ' minutes.') : 'Try again later.');
    } else if ((status === 400 || status === 413) && /size|limit/i.test(msg)) {
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

  function appendToken() { return token || (made && made.token); }
  function bundleFields() {
    var out = {};
    ['description', 'access_password', 'notify_email', 'max_downloads', 'vanity'].forEach(function (name) {
      var f = form.elements[name];
      if (f && f.value !== '') out[name] = f.value;
    });
    return out;
  }
  function mark(it, part) {
    it.bar.value = part;
    it.li.classList.toggle('done', part >= 1);
  }

  /** Small files in multipart batches first (the bundle exists after one request), then one tus upload per large file. */
  function plan(items) {
    var tasks = [];
    var batch = null;
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
    var tok = appendToken();
    var data = new FormData();
    if (!tok) {
      var fields = bundleFields();
      Object.keys(fields).forEach(function (k) { data.append(k, fields[k]); });
    }
    task.items.forEach(function (it) { data.append('files[]', it.file, it.file.name); });
    var xhr = new XMLHttpRequest();
    xhr.open('POST', tok ? '/api/v1/upload/' + tok : '/api/v1/upload');
    if (!tok) { var auth = authHeaders(); Object.keys(auth).forEach(function (h) { xhr.setRequestHeader(h, auth[h]); }); }
    xhr.responseType = 'text';
    xhr.upload.addEventListener('progress', function (ev) {
      // The bytes sent map onto the batch's files in order (headers are a rounding error).
      var sent = ev.lengthComputable ? ev.loaded * (task.bytes / Math.max(ev.total, 1)) : 0;
      var before = 0;
      task.items.forEach(function (it) {
        var size = it.file.size;
        mark(it, size === 0 ? (sent >= before ? 1 : 0) : Math.min(1, Math.max(0, (sent - before) / size)));
        before += size;
      });
      progress(Math.min(sent, task.bytes));
    });
    xhr.upload.addEventListener('load', function () { totalText.textContent = 'Processing\u2026'; });
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
    var f = it.file;
    var type = f.type || 'application/octet-stream';
    var meta = { filename: f.name, filetype: type };
    var tok = appendToken();
    if (tok) meta.upload_token = tok;
    else {
      var fields = bundleFields();
      Object.keys(fields).forEach(function (k) { meta[k] = fields[k]; });
    }
    var upload = new window.tus.Upload(f, {
      endpoint: window.location.origin + '/api/v1/tus/',
      // After a failed attempt the next click resumes this file's upload instead of starting over.
      uploadUrl: it.tusUrl || null,
      chunkSize: tusChunk,
      retryDelays: RETRY_DELAYS,
      metadata: meta,
      headers: tok ? {} : authHeaders(),
      // The page keeps the URL in memory only: a reload starts afresh (its bundle context is gone).
      storeFingerprintForResuming: false,
      onProgress: function (sent, size) {
        mark(it, size > 0 ? sent / size : 1);
        progress(sent);
      },
      onSuccess: function (payload) {
        var r = payload.lastResponse;
        it.tusUrl = null;
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
    });
    upload.start();
  }

  form.addEventListener('submit', function (e) {
    e.preventDefault();
    if (busy || picked.length === 0) return;
    var tasks = plan(picked);
    var all = picked.reduce(function (n, it) { return n + it.file.size; }, 0);
    var doneBytes = 0;
    busy = true;
    renderQueue();
    showError('');
    sendBtn.textContent = 'Uploading\u2026';
    total.hidden = false;
    var next = 0;
    function progress(sent) {
      var now = doneBytes + sent;
      totalBar.value = all > 0 ? now / all : 0;
      totalText.textContent = human(Math.min(now, all)) + ' of ' + human(all);
    }
    function step() {
      if (next === tasks.length) return finished();
      var task = tasks[next++];
      (task.tus ? sendTus : sendMultipart)(task, progress, function (r) {
        if (!token && !made) made = { token: r.token, shareUrl: r.shareUrl };
        task.items.forEach(function (it) { it.sent = true; mark(it, 1); });
        doneBytes += task.bytes;
        progress(0);
        if (token) appended({ files: r.files });
        step();
      }, function (msg) {
        busy = false;
        var sent = picked.filter(function (it) { return it.sent; }).length;
        picked = picked.filter(function (it) { return !it.sent; });
        fail(sent > 0 && made ? msg + ' ' + sent + (sent === 1 ? ' file is' : ' files are') + ' already in the bundle: upload again to add the rest to it.' : msg);
      });
    }
    function finished() {
      busy = false;
      picked = [];
      renderQueue();
      total.hidden = true;
      if (token) return;
      var m = made;
      made = null;
      created({ share_url: m.shareUrl, upload_url: '/u/' + m.token });
    }
    step();
  });

  function fail(msg) {
    total.hidden = true;
    renderQueue();
    showError(msg);
  }

  function created(body) {
    var base = form.getAttribute('data-base');
    var share = base + body.share_url;
    $('share-link').value = share;
    $('upload-link').value = base + body.upload_url;
    $('open-share').href = body.share_url;
    drawQr($('qr'), share);
    $('compose').hidden = true;
    $('result').hidden = false;
    $('result').scrollIntoView({ behavior: 'smooth', block: 'start' });
  }

  // Manage page: the new files join the list (built with textContent: names are never markup).
  function appended(body) {
    var list = $('files');
    (body.files || []).forEach(function (f) {
      var li = el('li', 'file');
      li.setAttribute('data-id', f.id);
      var thumb = el('span', 'thumb');
      thumb.appendChild(el('span', 'badge', (/\.([a-z0-9]{1,4})$/i.exec(f.name) || [null, 'file'])[1].toUpperCase()));
      var info = el('span', 'info');
      info.appendChild(el('span', 'name', f.name));
      info.appendChild(el('span', 'sub', human(f.size) + ' \u00b7 ' + f.mime_type));
      var del = el('button', 'btn danger', 'Delete');
      del.type = 'button';
      del.setAttribute('data-delete', f.id);
      li.appendChild(thumb);
      li.appendChild(info);
      li.appendChild(del);
      list.appendChild(li);
    });
    var empty = $('empty');
    if (empty) empty.hidden = true;
  }

  if (token) {
    $('files').addEventListener('click', function (e) {
      var btn = e.target.closest('[data-delete]');
      if (!btn) return;
      var row = btn.closest('li');
      var name = row.querySelector('.name').textContent;
      if (!window.confirm('Delete \u201c' + name + '\u201d for everyone? This cannot be undone.')) return;
      btn.disabled = true;
      fetch('/api/v1/file/' + btn.getAttribute('data-delete'), { method: 'DELETE', headers: { Authorization: 'Bearer ' + token } })
        .then(function (r) { return r.json().catch(function () { return {}; }).then(function (j) { return { ok: r.ok, j: j }; }); })
        .then(function (r) {
          if (!r.ok) throw new Error(r.j.error || 'Delete failed');
          row.remove();
        })
        .catch(function (err) { btn.disabled = false; showError(err.message); });
    });
    // A locked bundle lists its files only with the password: the page comes back with ?t=<access token>.
    var unlockForm = $('unlock');
    if (unlockForm) {
      window.SluiceUi.unlock(unlockForm, manage.getAttribute('data-code'), function (accessToken) {
        var params = new URLSearchParams(window.location.search);
        params.set('t', accessToken);
        window.location.replace(window.location.pathname + '?' + params.toString());
      });
    }
  }
})();
