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
  window.SluiceUi = { human: human, el: el };
})();
