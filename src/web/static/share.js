// Share page (/<code>): local expiry time, and unlocking a password-protected bundle.
'use strict';
(function () {
  var human = window.SluiceUi.human;
  var el = window.SluiceUi.el;

  var share = document.getElementById('share');
  var form = document.getElementById('unlock');
  if (!share || !form) return;
  var code = share.getAttribute('data-code');

  // Every file row is built with textContent: names are data, never markup.
  function row(f, q) {
    var li = el('li', 'file');
    li.setAttribute('data-id', f.id);
    var thumb = el('span', 'thumb');
    if (/^image\//.test(f.mime_type)) {
      var img = el('img');
      img.alt = '';
      img.loading = 'lazy';
      img.src = '/d/' + f.id + '?preview=1&' + q.slice(1);
      thumb.appendChild(img);
    } else {
      var ext = /\.([a-z0-9]{1,4})$/i.exec(f.name);
      thumb.appendChild(el('span', 'badge', (ext ? ext[1] : 'file').toUpperCase()));
    }
    var info = el('span', 'info');
    info.appendChild(el('span', 'name', f.name));
    // A limited bundle: the downloads this file has left, as the locked page's server-rendered rows say.
    var left = typeof f.downloads_remaining === 'number' ? ' \u00b7 ' + f.downloads_remaining + (f.downloads_remaining === 1 ? ' download' : ' downloads') + ' left' : '';
    info.appendChild(el('span', 'sub', human(f.size) + ' \u00b7 ' + f.mime_type + left));
    var a = el('a', 'btn', 'Download');
    a.href = '/d/' + f.id + q;
    a.setAttribute('download', '');
    li.appendChild(thumb);
    li.appendChild(info);
    li.appendChild(a);
    return li;
  }

  window.SluiceUi.unlock(form, code, function (token, jsonOf, reply) {
    return fetch('/api/v1/bundle/' + encodeURIComponent(code), { headers: { 'X-Access-Token': token } })
      .then(jsonOf)
      .then(function (info) {
        if (!info.ok) throw new Error(info.j.error || 'Could not load the files.');
        show(info.j.files || [], token, reply.description);
      });
  });

  function show(files, token, description) {
    // A locked page holds no description: it comes with the access token, as text.
    if (description) {
      var meta = share.querySelector('.meta');
      share.insertBefore(el('p', 'desc', description), meta);
    }
    var q = '?t=' + encodeURIComponent(token);
    var list = document.getElementById('files');
    list.textContent = '';
    files.forEach(function (f) { list.appendChild(row(f, q)); });
    document.getElementById('zip').href = '/zip/' + encodeURIComponent(code) + q;
    form.hidden = true;
    document.getElementById('unlocked').hidden = false;
    // age.js decrypts the names of an encrypted bundle once its rows are here.
    document.dispatchEvent(new CustomEvent('sluice:unlocked', { detail: token }));
  }
})();
