// Drop page of an upload request (/r/<token>): pick or drop files, send them with progress, say thanks.
'use strict';
(function () {
  var human = window.SluiceUi.human;
  var el = window.SluiceUi.el;
  function $(id) { return document.getElementById(id); }
  var form = $('drop-form');
  if (!form) return;
  var queue = $('queue');
  var sendBtn = $('send');
  var errorBox = $('error');
  var maxBytes = Number(form.getAttribute('data-max'));
  var maxFiles = Number(form.getAttribute('data-files'));
  var picked = [];
  var busy = false;

  function showError(msg) { errorBox.textContent = msg; errorBox.hidden = !msg; }
  function render() {
    queue.textContent = '';
    picked.forEach(function (f) {
      var li = el('li');
      li.appendChild(el('span', 'q-name', f.name));
      li.appendChild(el('span', 'q-size', human(f.size)));
      queue.appendChild(li);
    });
    var bytes = picked.reduce(function (n, f) { return n + f.size; }, 0);
    var problem = picked.length > maxFiles ? 'This request takes at most ' + maxFiles + ' more files.'
      : bytes > maxBytes ? 'This request takes at most ' + human(maxBytes) + ' more.' : '';
    showError(problem);
    sendBtn.disabled = busy || picked.length === 0 || problem !== '';
  }
  function add(list) {
    for (var i = 0; i < list.length; i++) picked.push(list[i]);
    render();
  }
  window.SluiceUi.dropTarget(add, function () { return busy; });

  var tusThreshold = Number(form.getAttribute('data-tus-threshold'));
  var tusChunk = Number(form.getAttribute('data-tus-chunk'));
  var sent = [];

  function progress(done, now, all) {
    $('total-bar').value = all > 0 ? (done + now) / all : 0;
    $('total-text').textContent = human(done + now) + ' of ' + human(all);
  }
  function failed(msg) { busy = false; $('total').hidden = true; render(); showError(msg); }

  /** Small files together in one multipart request. */
  function sendSmall(files, done, all, next) {
    var data = new FormData();
    files.forEach(function (f) { data.append('files[]', f, f.name); });
    var xhr = new XMLHttpRequest();
    xhr.open('POST', form.getAttribute('data-endpoint'));
    xhr.upload.addEventListener('progress', function (ev) {
      if (ev.lengthComputable) progress(done, ev.loaded * (files.reduce(function (n, f) { return n + f.size; }, 0) / Math.max(ev.total, 1)), all);
    });
    xhr.addEventListener('load', function () {
      var body = null;
      try { body = JSON.parse(xhr.responseText); } catch (_) { /* not JSON */ }
      if (xhr.status !== 200 || !body) return failed((body && body.error) || 'The upload failed (' + xhr.status + ').');
      sent = sent.concat(body.files);
      next();
    });
    xhr.addEventListener('error', function () { failed('The connection was lost. Check your network and try again.'); });
    xhr.send(data);
  }

  /** A large file through tus: in chunks, resumed after a break. */
  function sendLarge(f, done, all, next) {
    var upload = new window.tus.Upload(f, {
      endpoint: window.location.origin + '/api/v1/tus/',
      chunkSize: tusChunk,
      retryDelays: [0, 1000, 3000, 5000, 10000],
      metadata: { filename: f.name, filetype: f.type || 'application/octet-stream', request_token: form.getAttribute('data-token') },
      storeFingerprintForResuming: false,
      onProgress: function (n) { progress(done, n, all); },
      onSuccess: function () { sent.push({ name: f.name, size: f.size }); next(); },
      onError: function (err) {
        var res = err && err.originalResponse;
        var body = null;
        try { body = res ? JSON.parse(res.getBody()) : null; } catch (_) { /* not JSON */ }
        failed((body && body.error) || 'The upload failed. Check your network and try again.');
      },
    });
    upload.start();
  }

  function thanks() {
    busy = false;
    $('total').hidden = true;
    $('compose').hidden = true;
    $('thanks').hidden = false;
    $('thanks-text').textContent = 'These files were sent:';
    sent.forEach(function (f) {
      var li = el('li');
      li.appendChild(el('span', 'q-name', f.name));
      li.appendChild(el('span', 'q-size', human(f.size)));
      $('sent-list').appendChild(li);
    });
  }

  form.addEventListener('submit', function (e) {
    e.preventDefault();
    if (busy || picked.length === 0) return;
    busy = true;
    render();
    showError('');
    $('total').hidden = false;
    var all = picked.reduce(function (n, f) { return n + f.size; }, 0);
    var small = picked.filter(function (f) { return f.size < tusThreshold || !window.tus; });
    var large = picked.filter(function (f) { return small.indexOf(f) < 0; });
    var done = 0;
    function step() {
      if (small.length > 0) {
        var batch = small;
        small = [];
        return sendSmall(batch, done, all, function () { done += batch.reduce(function (n, f) { return n + f.size; }, 0); step(); });
      }
      if (large.length > 0) {
        var f = large.shift();
        return sendLarge(f, done, all, function () { done += f.size; step(); });
      }
      picked = [];
      thanks();
    }
    step();
  });
})();
