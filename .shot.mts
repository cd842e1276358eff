import { chromium } from 'playwright-core';
const [url, out, w = '1280', dark] = process.argv.slice(2);
const b = await chromium.launch({ executablePath: '/usr/bin/chromium', args: ['--headless', '--no-sandbox', '--disable-gpu'] });
const p = await b.newPage({ viewport: { width: Number(w), height: 900 } });
if (dark) await p.emulateMedia({ colorScheme: 'dark' });
await p.goto(url);
await p.screenshot({ path: out, fullPage: true });
await b.close();
