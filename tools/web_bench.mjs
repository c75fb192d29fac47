// What xform-web costs and how fast a tab follows: xformd, xform-load's
// writer moving --move_percent of an --entities scene at 60 Hz, xform-web,
// and --tabs headless chromium tabs (software GL) on that world. Over
// --seconds it reads xform-web's CPU (/proc), the world's frames, and each
// tab's own stats: messages, updates/s, bytes/s, publish-to-page latency
// (xformd's server_time_unix_nanos to the page's receipt), frames drawn.
// Not run in CI.
//
//   node tools/web_bench.mjs --build=build [--entities=10000]
//       [--move_percent=5] [--tabs=1] [--seconds=10] [--draw=points]

import { spawn } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { createServer } from 'node:net';
import { join, resolve } from 'node:path';
import { pathToFileURL } from 'node:url';

const args = {
  build: 'build', entities: '10000', move_percent: '5', tabs: '1', seconds: '10', draw: '',
  ...Object.fromEntries(process.argv.slice(2).map((a) => {
    const [key, ...value] = a.replace(/^--/, '').split('=');
    return [key, value.join('=')];
  })),
};
const build = resolve(args.build);
const { chromium } = await import(pathToFileURL(
  join(build, 'tools/web/page/node_modules/playwright-core/index.mjs')).href);

async function freePort() {
  return new Promise((done) => {
    const server = createServer();
    server.listen(0, '127.0.0.1', () => {
      const { port } = server.address();
      server.close(() => done(port));
    });
  });
}
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const children = [];
function start(binary, flags) {
  const child = spawn(binary, flags, { stdio: ['ignore', 'ignore', 'pipe'] });
  child.log = '';
  child.stderr.on('data', (chunk) => { child.log += chunk; });
  children.push(child);
  return child;
}
// utime + stime of a process, in seconds.
function cpuSeconds(pid) {
  const fields = readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1].split(' ');
  return (Number(fields[11]) + Number(fields[12])) / 100;
}

const grpcPort = await freePort();
const webPort = await freePort();
const seconds = Number(args.seconds);
let browser;
try {
  const xformd = start(join(build, 'server/xformd'), [`--listen=127.0.0.1:${grpcPort}`]);
  while (!xformd.log.includes('xformd serving')) await sleep(50);
  // The writer runs longer than the measurement; its own subscriber count
  // is zero.
  start(join(build, 'tools/xform-load'), [`--server=127.0.0.1:${grpcPort}`, '--world=bench',
    '--shape=scene', `--entities=${args.entities}`, `--move_percent=${args.move_percent}`,
    '--subscribers=0', `--seconds=${seconds + 30}`]);
  const web = start(join(build, 'tools/web/xform-web'), [`--server=127.0.0.1:${grpcPort}`,
    `--listen=127.0.0.1:${webPort}`]);
  const url = `http://127.0.0.1:${webPort}/`;
  const worldFrame = async () => {
    const list = await (await fetch(`${url}api/worlds`)).json();
    return list.worlds.find((w) => w.name === 'bench')?.frame ?? 0;
  };
  for (;;) {
    try {
      const list = await (await fetch(`${url}api/worlds`)).json();
      if (list.worlds.some((w) => w.name === 'bench' && w.entities >= Number(args.entities))) break;
    } catch { /* not up yet */ }
    await sleep(200);
  }
  browser = await chromium.launch({
    executablePath: '/usr/bin/chromium',
    args: ['--no-sandbox', '--disable-background-networking', '--disable-component-update',
      '--disable-sync', '--no-first-run'],
  });
  const pages = [];
  for (let t = 0; t < Number(args.tabs); ++t) {
    const page = await browser.newPage({ viewport: { width: 1280, height: 720 } });
    await page.goto(`${url}?world=bench${args.draw ? `&draw=${args.draw}` : ''}`);
    pages.push(page);
  }
  await sleep(4000); // Snapshot in, frame-all done, a few stat seconds.
  const collect = () => Promise.all(pages.map((p) => p.evaluate(() => ({ ...window.xformWeb.stats }))));
  const cpu0 = cpuSeconds(web.pid);
  const frame0 = await worldFrame();
  const at0 = await collect();
  const samples = [];
  for (let s = 0; s < seconds; ++s) {
    await sleep(1000);
    samples.push(await collect());
  }
  const cpu = cpuSeconds(web.pid) - cpu0;
  const frames = (await worldFrame()) - frame0;
  const at1 = await collect();
  const median = (values) => values.sort((a, b) => a - b)[Math.floor(values.length / 2)];
  console.log(`world: ${args.entities} entities (scene), ${args.move_percent}% moved a frame; ` +
    `${frames} frames in ${seconds} s (${(frames / seconds).toFixed(1)}/s)`);
  console.log(`xform-web: ${(cpu / seconds * 100).toFixed(1)}% of a core, ` +
    `${(cpu * 1000 / frames).toFixed(3)} ms CPU per frame for ${pages.length} tab(s)`);
  pages.forEach((_, t) => {
    const per = samples.map((s) => s[t]);
    const messages = at1[t].messages - at0[t].messages;
    console.log(`tab ${t} (${args.draw || 'auto'}): ${messages} messages (${(messages / seconds).toFixed(1)}/s), ` +
      `updates/s ${median(per.map((s) => s.updatesPerSecond))}, ` +
      `bytes/s ${median(per.map((s) => s.bytesPerSecond))}, ` +
      `latency median of per-second p50s ${median(per.map((s) => s.latencyMs)).toFixed(1)} ms ` +
      `(worst second's max ${Math.max(...per.map((s) => s.latencyMaxMs)).toFixed(1)} ms), ` +
      `page fps ${median(per.map((s) => s.fps))}`);
  });
} finally {
  await browser?.close();
  for (const child of children) child.kill('SIGKILL');
}
