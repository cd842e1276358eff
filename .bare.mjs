import fs from 'node:fs';
const flags = process.env.EXTRA ?? '';
const mods = (process.env.MODS ?? '').split(',').filter(Boolean);
for (const m of mods) await import(m);
await new Promise((r) => setTimeout(r, 1000));
const rollup = fs.readFileSync(`/proc/self/smaps_rollup`, 'utf8');
const pick = (k) => (Number(rollup.match(new RegExp(`^${k}:\\s+(\\d+)`, 'm'))[1]) / 1024).toFixed(1);
const mu = process.memoryUsage();
console.log(process.version, mods.join(','), 'Rss', pick('Rss'), 'Anon', pick('Anonymous'), 'heapTotal', (mu.heapTotal/1048576).toFixed(1), 'heapUsed', (mu.heapUsed/1048576).toFixed(1), 'ext', (mu.external/1048576).toFixed(1));
