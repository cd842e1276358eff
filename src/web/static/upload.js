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

  function describe(xhr) {
    var body = null;
    try { body = JSON.parse(xhr.responseText); } catch (_) { /* not JSON */ }
    var msg = body && body.error ? body.error : 'Upload failed (HTTP ' + xhr.status + ')';
    if (xhr.status === 429) {
      var wait = Number(xhr.getResponseHeader('Retry-After'));
      msg = 'Too many uploads from your address. ' + (wait > 0 ? 'Try again in ' + (wait < 120 ? wait + ' seconds.' : Math.ceil(wait / 60) + ' minutes.') : 'Try again later.');
    } else if (xhr.status === 400 && /size/i.test(msg)) {
      msg = msg + ': the bundle can hold at most ' + human(Number(form.getAttribute('data-max'))) + '.';
    } else if (xhr.status === 413) {
      msg = 'These files are too large to send in one request.';
    } else if (xhr.status === 403) {
      msg = msg + '. The upload link may have expired.';
    }
    return msg;
  }

  form.addEventListener('submit', function (e) {
    e.preventDefault();
    if (busy || picked.length === 0) return;
    var data = new FormData();
    ['description', 'access_password', 'notify_email'].forEach(function (name) {
      var f = form.elements[name];
      if (f && f.value !== '') data.append(name, f.value);
    });
    var sizes = picked.map(function (it) { return it.file.size; });
    var all = sizes.reduce(function (a, b) { return a + b; }, 0);
    picked.forEach(function (it) { data.append('files[]', it.file, it.file.name); });
    busy = true;
    renderQueue();
    showError('');
    sendBtn.textContent = 'Uploading\u2026';
    total.hidden = false;

    var xhr = new XMLHttpRequest();
    xhr.open('POST', form.getAttribute('data-endpoint'));
    xhr.responseType = 'text';
    xhr.upload.addEventListener('progress', function (ev) {
      // One multipart request: the bytes sent map onto the files in order (headers are a rounding error).
      var sent = ev.lengthComputable ? ev.loaded * (all / Math.max(ev.total, 1)) : 0;
      var before = 0;
      picked.forEach(function (it, i) {
        var part = sizes[i] === 0 ? (sent >= before ? 1 : 0) : Math.min(1, Math.max(0, (sent - before) / sizes[i]));
        it.bar.value = part;
        it.li.classList.toggle('done', part >= 1);
        before += sizes[i];
      });
      totalBar.value = ev.lengthComputable ? ev.loaded / ev.total : 0;
      totalText.textContent = human(Math.min(sent, all)) + ' of ' + human(all);
    });
    xhr.upload.addEventListener('load', function () { totalText.textContent = 'Processing\u2026'; });
    xhr.addEventListener('load', function () {
      busy = false;
      if (xhr.status === 200 || xhr.status === 201) {
        var body = JSON.parse(xhr.responseText);
        picked = [];
        renderQueue();
        total.hidden = true;
        return token ? appended(body) : created(body);
      }
      fail(describe(xhr));
    });
    xhr.addEventListener('error', function () { busy = false; fail('The connection was lost. Check your network and try again.'); });
    xhr.addEventListener('abort', function () { busy = false; fail('Upload cancelled.'); });
    xhr.send(data);
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
  }
})();
