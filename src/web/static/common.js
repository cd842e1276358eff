// Helpers shared by the page scripts; loaded first (deferred scripts run in document order).
'use strict';
(function () {
  var UNITS = ['B', 'KB', 'MB', 'GB', 'TB'];
  function human(n) {
    var u = 0;
    while (n >= 1024 && u < UNITS.length - 1) { n /= 1024; u++; }
    return u === 0 ? n + ' B' : (n < 10 ? n.toFixed(1).replace(/\.0$/, '') : Math.round(n)) + ' ' + UNITS[u];
  }
  function el(tag, cls, text) {
    var e = document.createElement(tag);
    if (cls) e.className = cls;
    if (text !== undefined) e.textContent = text;
    return e;
  }
  /**
   * The password form of a locked bundle (#unlock, with .error and a button): posts the password
   * to /api/verify-access and calls onToken(accessToken, jsonOf, reply), which may return a promise;
   * its failure is shown like a wrong password.
   */
  function unlock(form, code, onToken) {
    var errorBox = form.querySelector('.error');
    var button = form.querySelector('button');
    function showError(msg) { errorBox.textContent = msg; errorBox.hidden = !msg; }
    function jsonOf(r) {
      return r.json().catch(function () { return {}; }).then(function (j) { return { status: r.status, ok: r.ok, j: j, r: r }; });
    }
    form.addEventListener('submit', function (e) {
      e.preventDefault();
      var password = form.elements.password.value;
      if (!password) return;
      button.disabled = true;
      showError('');
      fetch('/api/verify-access', {
        method: 'POST',
        headers: { 'Content-Type': 'application/json' },
        body: JSON.stringify({ short_code: code, password: password }),
      })
        .then(jsonOf)
        .then(function (res) {
          if (res.status === 403) throw new Error('Wrong password. Please try again.');
          if (res.status === 429) {
            var wait = Number(res.r.headers.get('Retry-After'));
            throw new Error('Too many attempts. Try again in ' + (wait > 0 ? Math.ceil(wait / 60) + ' minutes.' : 'a while.'));
          }
          if (res.status === 404) throw new Error('These files are no longer available.');
          if (!res.ok || !res.j.access_token) throw new Error(res.j.error || 'Could not unlock (HTTP ' + res.status + ').');
          return onToken(res.j.access_token, jsonOf, res.j);
        })
        .catch(function (err) {
          button.disabled = false;
          showError(err.message || 'Network error. Please try again.');
          form.elements.password.select();
        });
    });
  }
  /**
   * Wires the page's drop zone (#drop with its file input #pick, views.ts dropZone): `add(files)` gets
   * what is picked or dropped while `busy()` is false.
   */
  function dropTarget(add, busy) {
    var drop = document.getElementById('drop');
    var pick = document.getElementById('pick');
    pick.addEventListener('change', function () { add(pick.files); pick.value = ''; });
    ['dragenter', 'dragover'].forEach(function (t) {
      drop.addEventListener(t, function (e) { e.preventDefault(); drop.classList.add('over'); });
    });
    ['dragleave', 'drop'].forEach(function (t) {
      drop.addEventListener(t, function () { drop.classList.remove('over'); });
    });
    drop.addEventListener('drop', function (e) { e.preventDefault(); if (!busy() && e.dataTransfer) add(e.dataTransfer.files); });
  }

  // Times in the viewer's local time on every page (the HTML carries UTC as a fallback).
  document.querySelectorAll('time.local-time[data-utc]').forEach(function (t) {
    var d = new Date(t.getAttribute('data-utc'));
    if (!isNaN(d.getTime())) t.textContent = d.toLocaleString(undefined, { dateStyle: 'medium', timeStyle: 'short' });
  });
  window.SluiceUi = { human: human, el: el, unlock: unlock, dropTarget: dropTarget };
})();
