// Upload page (/) and manage page (/u/<token>): pick or drop files, upload with progress, show links.
'use strict';
(function () {
  var human = window.SluiceUi.human;
  var el = window.SluiceUi.el;
  function $(id) { return document.getElementById(id); }


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
  // The cap of the pasted key's plan, once /my/usage told it; null: the page's own cap (data-max).
  var keyCap = null;
  var expiry = $('expiry');
  function lasting(d) { var y = d % 365 === 0, n = y ? d / 365 : d; return n + (y ? ' year' : ' day') + (n === 1 ? '' : 's'); }
  // "Expires after" offers what the plan allows: `days` of its expiry, null when its bundles never expire.
  function fitExpiry(days) {
    if (!expiry) return;
    var most = days === null ? Number(expiry.dataset.longest) : days;
    for (var i = 1; i < expiry.options.length; i++) {
      var o = expiry.options[i];
      o.hidden = o.disabled = Number(o.value) > most;
    }
    if (expiry.selectedOptions[0] && expiry.selectedOptions[0].disabled) expiry.value = '';
    expiry.options[0].textContent = 'Default (' + (days === null ? 'never expires' : lasting(days)) + ')';
  }
  function apiKey() { return keyInput && /^sk_[A-Za-z0-9]{43}$/.test(keyInput.value.trim()) ? keyInput.value.trim() : null; }
  function authHeaders() { var k = token ? null : apiKey(); return k ? { Authorization: 'Bearer ' + k } : {}; }
  function checkKey() {
    var k = apiKey();
    try { if (k) localStorage.setItem(KEY_STORE, k); else if (keyInput.value === '') localStorage.removeItem(KEY_STORE); } catch (_) { /* storage off */ }
    vanityRow.hidden = true;
    keyCap = null;
    if (expiry) fitExpiry(Number(expiry.dataset.anon));
    if (!k) return renderQueue();
    fetch('/api/v1/my/usage', { headers: { Authorization: 'Bearer ' + k } })
      .then(function (r) { return r.ok ? r.json() : null; })
      .then(function (body) {
        vanityRow.hidden = !(body && body.key && body.key.plan === 'premium');
        keyCap = body && body.key ? { bytes: body.key.max_bundle_size_bytes, plan: body.key.plan } : null;
        if (keyCap) fitExpiry(body.key.default_expiry_days);
        renderQueue();
      })
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
    var over = !busy && overCap(size);
    if (!busy) showError(over || '');
    sendBtn.disabled = busy || !!over || (picked.length === 0 && !manifestDue());
    if (!busy) sendBtn.textContent = picked.length ? (token ? 'Add ' : 'Upload ') + picked.length + (picked.length === 1 ? ' file' : ' files') + ' \u00b7 ' + human(size) : (token ? 'Add files' : 'Upload');
  }
  // Files that cannot fit are named when picked, not after they were sent.
  function overCap(size) {
    var max = Number(form.getAttribute('data-max'));
    if (token) {
      return size > max ? 'These files total ' + human(size) + ', but this bundle has ' + human(max) + ' of room left. Remove some to add the rest.' : '';
    }
    if (keyCap) {
      return size > keyCap.bytes ? 'These files total ' + human(size) + '; a bundle of your API key\u2019s ' + keyCap.plan + ' plan holds at most ' + human(keyCap.bytes) + '. A larger plan holds more (see /api-keys).' : '';
    }
    return size > max ? 'These files total ' + human(size) + '; a bundle without an API key holds at most ' + human(max) + '. An API key\u2019s plan holds more (see /api-keys).' : '';
  }
  function add(files) {
    for (var i = 0; i < files.length; i++) picked.push({ file: files[i] });
    renderQueue();
  }
  window.SluiceUi.dropTarget(add, function () { return busy; });
  // A file dropped beside the target must not navigate away from the page.
  window.addEventListener('dragover', function (e) { e.preventDefault(); });
  window.addEventListener('drop', function (e) { e.preventDefault(); });

  // The bundle this page made, kept after a failure so "Upload" sends the rest into it.
  var made = null;
  // End-to-end encryption (age.js): the bundle's key, the stored names given so far and the
  // manifest's entries (the real names), kept with `made` across a failed attempt.
  var e2e = null;
  var encryptBox = $('encrypt');
  // Encryption runs on Web Crypto, which browsers give only to secure pages: HTTPS, or localhost.
  if (encryptBox && !(window.isSecureContext && window.crypto && window.crypto.subtle)) {
    encryptBox.checked = false;
    encryptBox.disabled = true;
    encryptBox.parentNode.appendChild(el('span', 'muted', ' · Not available on this address: browsers encrypt only on pages served over HTTPS or from localhost.'));
  }
  function appendToken() { return token || (made && made.token); }
  function bundleFields() {
    var out = {};
    ['description', 'access_password', 'notify_email', 'max_downloads', 'vanity', 'expires_in_days'].forEach(function (name) {
      var f = form.elements[name];
      // An encrypted bundle's description travels inside its manifest, never in clear.
      if (f && f.value !== '' && !(e2e && name === 'description')) out[name] = f.value;
    });
    if (e2e) out.encrypted = '1';
    return out;
  }
  function mark(it, part) {
    it.bar.value = part;
    it.li.classList.toggle('done', part >= 1);
  }
  var send = window.SluiceSend(form, {
    appendToken: appendToken,
    bundleFields: bundleFields,
    authHeaders: authHeaders,
    mark: mark,
    processing: function () { totalText.textContent = 'Processing\u2026'; },
    e2e: function () { return e2e; },
  });

  form.addEventListener('submit', function (e) {
    e.preventDefault();
    begin();
  });
  // An encrypted bundle whose files are all up but whose manifest failed: "Upload" sends the manifest.
  function manifestDue() { return !!(e2e && made && !e2e.manifest); }
  function begin() {
    if (busy || (picked.length === 0 && !manifestDue())) return;
    if (!token && encryptBox && encryptBox.checked && !e2e) {
      if (!window.SluiceAge || !send.canTus) return showError('This browser cannot encrypt uploads.');
      busy = true;
      window.SluiceAge.newKey().then(function (k) {
        e2e = { identity: k.identity, recipient: k.recipient, count: 0, entries: [], manifest: false };
        busy = false;
        begin();
      }, function (err) { busy = false; showError('Could not make a key: ' + err.message); });
      return;
    }
    if (encryptBox) encryptBox.disabled = true;
    var tasks = send.plan(picked);
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
      if (next === tasks.length && e2e && !e2e.manifest) return sendManifest();
      if (next === tasks.length) return finished();
      var task = tasks[next++];
      (task.tus ? send.tus : send.multipart)(task, progress, function (r) {
        if (!token && !made) made = { token: r.token, shareUrl: r.shareUrl };
        task.items.forEach(function (it) { it.sent = true; mark(it, 1); });
        doneBytes += task.bytes;
        progress(0);
        if (token) appended({ files: r.files });
        step();
      }, function (msg) {
        busy = false;
        if (e2e) e2e.manifest = false;
        var sent = picked.filter(function (it) { return it.sent; }).length;
        picked = picked.filter(function (it) { return !it.sent; });
        fail(sent > 0 && made ? msg + ' ' + sent + (sent === 1 ? ' file is' : ' files are') + ' already in the bundle: upload again to add the rest to it.' : msg);
      });
    }
    // Last, the manifest: the real names and the description, encrypted like the files.
    function sendManifest() {
      e2e.manifest = true;
      var desc = form.elements.description ? form.elements.description.value : '';
      var body = JSON.stringify({ sluice_manifest: 1, description: desc || null, files: e2e.entries });
      window.SluiceAge.encryptBytes(body, e2e.recipient).then(function (bytes) {
        var file = new File([bytes], window.SluiceAge.MANIFEST_NAME, { type: 'application/octet-stream' });
        var it = { file: file, sealed: true, stored: file.name, bar: el('progress'), li: el('li') };
        tasks.push({ tus: true, items: [it], bytes: 0 });
        step();
      }, function (err) {
        e2e.manifest = false;
        busy = false;
        fail('Could not encrypt the file list: ' + err.message);
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
  }

  function fail(msg) {
    total.hidden = true;
    renderQueue();
    showError(msg);
  }

  function created(body) {
    var base = form.getAttribute('data-base');
    // The key rides in the fragment: browsers never send it to the server.
    var key = e2e ? '#key=' + e2e.identity : '';
    var share = base + body.share_url + key;
    $('e2e-warning').hidden = !e2e;
    $('open-share').href = body.share_url + key;
    $('share-link').value = share;
    $('upload-link').value = base + body.upload_url;
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
