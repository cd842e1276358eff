// Preloaded (node --require) into a Sluice started by the benchmarks with BENCH_UWS_ALT set: the
// server's `require('uwebsockets')` and `require('uwebsockets/package.json')` resolve into the
// package directory named by SLUICE_BENCH_UWS_DIR instead, so one run can time Sluice on two
// uWebSockets.js bindings. Benchmarks only; the server itself loads exactly one binding.
'use strict';
const Module = require('node:module');
const path = require('node:path');

const dir = process.env.SLUICE_BENCH_UWS_DIR;
if (dir) {
  const resolve = Module._resolveFilename;
  Module._resolveFilename = function (request, ...rest) {
    if (request === 'uwebsockets') request = dir;
    else if (request.startsWith('uwebsockets/')) request = path.join(dir, request.slice('uwebsockets/'.length));
    return resolve.call(this, request, ...rest);
  };
}
