// The console overview's charts: uPlot (global `uPlot`, served from /static like every script) fed
// from /admin/overview.json, refreshed every 10 s, the hour/day links switching the range in place.
// Each <figure data-chart> says which series it shows (data-series, data-labels) and how to write
// them (data-format); the figures' text (td[data-figure]) is refreshed from the same answer.
'use strict';
(function () {
  var root = document.getElementById('overview-charts');
  if (!root || typeof uPlot !== 'function') return;
  var POLL_MS = 10000;
  var HEIGHT = 200;
  var SPAN = { hour: 3600, day: 86400 };
  var range = root.dataset.range === 'day' ? 'day' : 'hour';
  var charts = [];
  var timer = null;
  // Each poll's number: an answer or a timer of an earlier one (before a range switch) is dropped.
  var generation = 0;

  var css = getComputedStyle(document.documentElement);
  function color(name, fallback) { return css.getPropertyValue(name).trim() || fallback; }
  var PALETTE = [color('--accent', '#5b4cf0'), color('--accent-2', '#19b5c9'), color('--danger', '#d33a4b')];
  var AXIS = color('--muted', '#6a6f85');
  var GRID = color('--line', '#e3e5ef');

  var UNITS = ['B', 'KB', 'MB', 'GB', 'TB', 'PB'];
  // Axes of bytes step by 1, 2 or 5 of a unit (5 MB, 1 GB), axes of counts by whole numbers.
  var STEPS = { bytes: [], count: [] };
  UNITS.forEach(function (u, p) {
    [1, 2, 5, 10, 20, 50, 100, 200, 500].forEach(function (x) {
      STEPS.bytes.push(x * Math.pow(1024, p));
      STEPS.count.push(x * Math.pow(1000, p));
    });
  });
  function bytes(n) {
    if (n == null) return '–';
    var sign = n < 0 ? '−' : '';
    var u = 0;
    n = Math.abs(n);
    while (n >= 1024 && u < UNITS.length - 1) { n /= 1024; u++; }
    return sign + (n < 10 && u > 0 ? n.toFixed(1).replace(/\.0$/, '') : Math.round(n)) + ' ' + UNITS[u];
  }
  function number(n) {
    if (n == null) return '–';
    var a = Math.abs(n);
    if (a >= 1e6) return (n / 1e6).toFixed(1).replace(/\.0$/, '') + 'M';
    if (a >= 1e4) return (n / 1e3).toFixed(1).replace(/\.0$/, '') + 'k';
    return a >= 100 || a === 0 ? String(Math.round(n)) : String(Number(n.toPrecision(3)));
  }

  function dataOf(chart, answer) {
    var src = answer[chart.source];
    if (!src) return null;
    return [src.t].concat(chart.keys.map(function (k) { return src[k] || []; }));
  }

  function showLatest(u) {
    var n = u.data[0].length;
    if (n > 0 && u.cursor.idx == null) u.setLegend({ idx: n - 1 }, false);
  }

  function options(chart, width) {
    var write = chart.format === 'bytes' ? bytes : number;
    var axis = { stroke: AXIS, grid: { stroke: GRID, width: 1 }, ticks: { stroke: GRID, width: 1 } };
    return {
      width: width,
      height: HEIGHT,
      scales: {
        // The whole range, so a young node's few points sit at the right end.
        x: { time: true, range: function () { var now = Date.now() / 1000; return [now - SPAN[range], now]; } },
        y: {
          range: function (u, min, max) {
            var empty = chart.format === 'bytes' ? 1024 : chart.format === 'count' ? 5 : 1;
            if (min == null || max == null) return [0, empty];
            return [Math.min(0, min * 1.1), max > 0 ? max * 1.1 : empty];
          },
        },
      },
      axes: [
        axis,
        Object.assign({}, axis, STEPS[chart.format] ? { incrs: STEPS[chart.format] } : {}, {
          size: 70,
          values: function (u, ticks) { return ticks.map(write); },
        }),
      ],
      // With the pointer off the chart, the legend shows the latest point instead of dashes.
      hooks: { ready: [showLatest], setData: [showLatest], setCursor: [showLatest] },
      series: [{}].concat(chart.keys.map(function (k, i) {
        return { label: chart.labels[i], stroke: PALETTE[i % PALETTE.length], width: 1.5, value: function (u, v) { return write(v); } };
      })),
    };
  }

  function draw(answer) {
    if (answer.range !== range) return;
    charts.forEach(function (chart) {
      var data = dataOf(chart, answer);
      if (!data) return;
      if (chart.plot) chart.plot.setData(data);
      else chart.plot = new uPlot(options(chart, chart.box.clientWidth || 320), data, chart.box);
    });
    var figures = answer.figures || {};
    document.querySelectorAll('td[data-figure]').forEach(function (td) {
      var text = figures[td.dataset.figure];
      if (typeof text === 'string') td.textContent = text;
    });
    root.classList.remove('stale');
  }

  function load() {
    return fetch('/admin/overview.json?range=' + range, { credentials: 'same-origin', cache: 'no-store' })
      .then(function (r) {
        if (!r.ok) throw new Error('HTTP ' + r.status);
        return r.json();
      })
      .then(draw, function () { root.classList.add('stale'); });
  }

  function poll() {
    var mine = ++generation;
    clearTimeout(timer);
    (document.hidden ? Promise.resolve() : load()).then(function () {
      if (mine === generation) timer = setTimeout(poll, POLL_MS);
    });
  }

  root.querySelectorAll('figure[data-chart]').forEach(function (fig) {
    charts.push({
      source: fig.dataset.source,
      keys: fig.dataset.series.split(' '),
      labels: fig.dataset.labels.split('|'),
      format: fig.dataset.format,
      box: fig.querySelector('.plot'),
      plot: null,
    });
  });

  document.querySelectorAll('a[data-range]').forEach(function (a) {
    a.addEventListener('click', function (e) {
      e.preventDefault();
      range = a.dataset.range === 'day' ? 'day' : 'hour';
      document.querySelectorAll('a[data-range]').forEach(function (b) {
        if (b === a) b.setAttribute('aria-current', 'true');
        else b.removeAttribute('aria-current');
      });
      history.replaceState(null, '', '?range=' + range);
      poll();
    });
  });

  var resizing = false;
  window.addEventListener('resize', function () {
    if (resizing) return;
    resizing = true;
    requestAnimationFrame(function () {
      resizing = false;
      charts.forEach(function (c) { if (c.plot) c.plot.setSize({ width: c.box.clientWidth || 320, height: HEIGHT }); });
    });
  });
  document.addEventListener('visibilitychange', function () { if (!document.hidden) poll(); });
  poll();
})();
