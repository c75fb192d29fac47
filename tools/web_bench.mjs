// What xform-web costs and how fast a tab follows: xformd, xform-load's
// writer moving --move_percent of an --entities scene at 60 Hz, xform-web,
// and --tabs headless chromium tabs (software GL) on that world. Over
// --seconds it reads xform-web's CPU (/proc), the world's frames, and each
// tab's own stats: messages, updates/s, bytes/s, publish-to-page latency
// (xformd's server_time_unix_nanos to the page's receipt), frames drawn.
// With --tabs_kind=socket the tabs are Node's own WebSocket clients that
// acknowledge each message at once without drawing: the gateway's cost and
// a tab's bytes when the page is not the bottleneck. Not run in CI.
//
//   node --experimental-websocket tools/web_bench.mjs --build=build
//       [--entities=10000] [--move_percent=5] [--tabs=1] [--seconds=10]
//       [--tabs_kind=browser|socket] [--draw=points|instanced]

import { execFileSync, spawn } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { createServer } from 'node:net';
import { join, resolve } from 'node:path';
import { pathToFileURL } from 'node:url';

const args = {
  build: 'build', entities: '10000', move_percent: '5', tabs: '1', seconds: '10', draw: '',
  tabs_kind: 'browser',
  ...Object.fromEntries(process.argv.slice(2).map((a) => {
    const [key, ...value] = a.replace(/^--/, '').split('=');
    return [key, value.join('=')];
  })),
};
const build = resolve(args.build);
if (args.tabs_kind === 'socket' && !globalThis.WebSocket) {
  console.error('socket tabs need a WebSocket: node --experimental-websocket (Node 20)');
  process.exit(2);
}
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
  // The writer runs longer than the measurement (with the one subscriber
  // xform-load insists on).
  const load = start(join(build, 'tools/xform-load'), [`--server=127.0.0.1:${grpcPort}`, '--world=bench',
    '--shape=scene', `--entities=${args.entities}`, `--move_percent=${args.move_percent}`,
    '--subscribers=1', `--seconds=${seconds + 30}`]);
  const web = start(join(build, 'tools/web/xform-web'), [`--server=127.0.0.1:${grpcPort}`,
    `--listen=127.0.0.1:${webPort}`, '--foxglove_listen=']);
  const url = `http://127.0.0.1:${webPort}/`;
  const worldFrame = async () => JSON.parse(execFileSync(join(build, 'tools/xformctl'),
    [`--server=127.0.0.1:${grpcPort}`, 'worlds', 'info', 'bench', '--json'],
    { encoding: 'utf8' })).frame;
  for (;;) {
    try {
      const list = await (await fetch(`${url}api/worlds`)).json();
      if (list.worlds.some((w) => w.name === 'bench' && w.entities >= Number(args.entities))) break;
    } catch { /* not up yet */ }
    if (load.exitCode !== null) throw new Error(`xform-load exited: ${load.log.slice(-500)}`);
    await sleep(200);
  }
  // A tab is something with stats() like the page's window.xformWeb.stats.
  const tabs = [];
  if (args.tabs_kind === 'socket') {
    for (let t = 0; t < Number(args.tabs); ++t) {
      const stats = { messages: 0, updates: 0, bytes: 0, latency: [], fps: 0 };
      const ws = new WebSocket(`ws://127.0.0.1:${webPort}/ws?world=bench`);
      ws.binaryType = 'arraybuffer';
      ws.onmessage = (event) => {
        if (typeof event.data === 'string') return;
        const header = new DataView(event.data, 0, 40);
        stats.messages += 1;
        stats.updates += header.getUint32(8, true);
        stats.bytes += event.data.byteLength;
        stats.latency.push(Date.now() - header.getFloat64(24, true));
        ws.send(JSON.stringify({ ack: header.getFloat64(16, true) }));
      };
      let last = { updates: 0, bytes: 0 };
      tabs.push(async () => {
        const sorted = stats.latency.splice(0).sort((a, b) => a - b);
        const now = { updates: stats.updates, bytes: stats.bytes };
        const second = {
          messages: stats.messages,
          updatesPerSecond: now.updates - last.updates,
          bytesPerSecond: now.bytes - last.bytes,
          latencyMs: sorted.length ? sorted[Math.floor(sorted.length / 2)] : 0,
          latencyMaxMs: sorted.length ? sorted[sorted.length - 1] : 0,
          fps: 0,
        };
        last = now;
        return second;
      });
    }
  } else {
    browser = await chromium.launch({
      executablePath: '/usr/bin/chromium',
      args: ['--no-sandbox', '--disable-background-networking', '--disable-component-update',
        '--disable-sync', '--no-first-run'],
    });
    for (let t = 0; t < Number(args.tabs); ++t) {
      const page = await browser.newPage({ viewport: { width: 1280, height: 720 } });
      await page.goto(`${url}?world=bench${args.draw ? `&draw=${args.draw}` : ''}`);
      tabs.push(() => page.evaluate(() => ({ ...window.xformWeb.stats })));
    }
  }
  await sleep(4000); // Snapshot in, frame-all done, a few stat seconds.
  const collect = () => Promise.all(tabs.map((stats) => stats()));
  const start0 = Date.now();
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
  const elapsed = (Date.now() - start0) / 1000;
  const at1 = await collect();
  const median = (values) => values.sort((a, b) => a - b)[Math.floor(values.length / 2)];
  console.log(`world: ${args.entities} entities (scene), ${args.move_percent}% moved a frame; ` +
    `${frames} frames in ${elapsed.toFixed(1)} s (${(frames / elapsed).toFixed(1)}/s)`);
  console.log(`xform-web: ${(cpu / elapsed * 100).toFixed(1)}% of a core, ` +
    `${(cpu * 1000 / frames).toFixed(3)} ms CPU per frame for ${tabs.length} tab(s)`);
  tabs.forEach((_, t) => {
    const per = samples.map((s) => s[t]);
    const messages = at1[t].messages - at0[t].messages;
    const kind = args.tabs_kind === 'socket' ? 'socket' : `browser, draw ${args.draw || 'auto'}`;
    console.log(`tab ${t} (${kind}): ${messages} messages (${(messages / elapsed).toFixed(1)}/s), ` +
      `updates/s ${median(per.map((s) => s.updatesPerSecond))}, ` +
      `bytes/s ${median(per.map((s) => s.bytesPerSecond))}, ` +
      `latency median of per-second p50s ${median(per.map((s) => s.latencyMs)).toFixed(1)} ms ` +
      `(worst second's max ${Math.max(...per.map((s) => s.latencyMaxMs)).toFixed(1)} ms), ` +
      (args.tabs_kind === 'socket' ? '' : `page fps ${median(per.map((s) => s.fps))}`));
  });
} finally {
  await browser?.close();
  for (const child of children) child.kill('SIGKILL');
}
