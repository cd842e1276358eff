// Drop page of an upload request (/r/<token>): pick or drop files, send them with progress, say thanks.
'use strict';
(function () {
  var human = window.SluiceUi.human;
  var el = window.SluiceUi.el;
  function $(id) { return document.getElementById(id); }
  document.querySelectorAll('time.local-time[data-utc]').forEach(function (t) {
    var d = new Date(t.getAttribute('data-utc'));
    if (!isNaN(d.getTime())) t.textContent = d.toLocaleString(undefined, { dateStyle: 'medium', timeStyle: 'short' });
  });
  var form = $('drop-form');
  if (!form) return;
  var pick = $('pick');
  var drop = $('drop');
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
  pick.addEventListener('change', function () { add(pick.files); pick.value = ''; });
  ['dragenter', 'dragover'].forEach(function (t) {
    drop.addEventListener(t, function (e) { e.preventDefault(); drop.classList.add('over'); });
  });
  ['dragleave', 'drop'].forEach(function (t) {
    drop.addEventListener(t, function () { drop.classList.remove('over'); });
  });
  drop.addEventListener('drop', function (e) { e.preventDefault(); if (!busy) add(e.dataTransfer.files); });

  form.addEventListener('submit', function (e) {
    e.preventDefault();
    if (busy || picked.length === 0) return;
    busy = true;
    render();
    var data = new FormData();
    picked.forEach(function (f) { data.append('files[]', f, f.name); });
    var xhr = new XMLHttpRequest();
    xhr.open('POST', form.getAttribute('data-endpoint'));
    $('total').hidden = false;
    xhr.upload.addEventListener('progress', function (ev) {
      if (!ev.lengthComputable) return;
      $('total-bar').value = ev.loaded / Math.max(ev.total, 1);
      $('total-text').textContent = human(ev.loaded) + ' of ' + human(ev.total);
    });
    xhr.addEventListener('load', function () {
      busy = false;
      $('total').hidden = true;
      var body = null;
      try { body = JSON.parse(xhr.responseText); } catch (_) { /* not JSON */ }
      if (xhr.status !== 200 || !body) { render(); return showError((body && body.error) || 'The upload failed (' + xhr.status + ').'); }
      $('compose').hidden = true;
      $('thanks').hidden = false;
      $('thanks-text').textContent = 'These files were sent:';
      body.files.forEach(function (f) {
        var li = el('li');
        li.appendChild(el('span', 'q-name', f.name));
        li.appendChild(el('span', 'q-size', human(f.size)));
        $('sent-list').appendChild(li);
      });
    });
    xhr.addEventListener('error', function () { busy = false; render(); showError('The connection was lost. Check your network and try again.'); });
    xhr.send(data);
  });
})();
