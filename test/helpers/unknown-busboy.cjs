// Preloaded into a server (NODE_OPTIONS=--require) to simulate an upgrade: busboy's package.json reads
// as a version the multipart fast paths were not written for. Nothing else about busboy changes.
const fs = require('node:fs');
const Module = require('node:module');

const file = require.resolve('busboy/package.json', { paths: [process.cwd()] });
const fake = new Module(file);
fake.filename = file;
fake.loaded = true;
fake.exports = { ...JSON.parse(fs.readFileSync(file, 'utf8')), version: '99.0.0-simulated' };
require.cache[file] = fake;
