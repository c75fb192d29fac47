// xform-web in a real browser: Debian's chromium, headless, driven by
// playwright-core, against a real xformd (kill -9 and restarted on its
// journal) and xform-web on loopback, changed with xformctl.
//
//   node browser_test.mjs --xformd=PATH --xformctl=PATH --xform_web=PATH
//       --web_root=DIR --playwright=DIR [--screenshot=FILE]
//
// Exits 0 when every check holds, 1 naming the first that does not, and
// 77 (ctest's skip) when there is no chromium.

import { spawn, execFileSync } from 'node:child_process';
import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { pathToFileURL } from 'node:url';

const args = Object.fromEntries(process.argv.slice(2).map((a) => {
  const [key, ...value] = a.replace(/^--/, '').split('=');
  return [key, value.join('=')];
}));
const CHROMIUM = '/usr/bin/chromium';
if (!existsSync(CHROMIUM)) {
  console.log('SKIP: no /usr/bin/chromium (Debian package chromium)');
  process.exit(77);
}
const { chromium } = await import(pathToFileURL(join(resolve(args.playwright), 'index.mjs')).href);

const children = [];
const dataDir = mkdtempSync(join(tmpdir(), 'xform-browser-'));
let browser = null;
let failed = false;

function cleanUp() {
  for (const child of children) child.kill('SIGKILL');
  rmSync(dataDir, { recursive: true, force: true });
}

function check(condition, what, detail = '') {
  if (!condition) {
    failed = true;
    throw new Error(`FAILED: ${what}${detail ? ` (${detail})` : ''}`);
  }
  console.log(`ok: ${what}${detail ? ` (${detail})` : ''}`);
}

function start(binary, flags, name) {
  const child = spawn(binary, flags, { stdio: ['ignore', 'inherit', 'pipe'] });
  let log = '';
  child.stderr.on('data', (chunk) => { log += chunk; });
  child.log = () => log;
  child.name = name;
  children.push(child);
  return child;
}

async function waitFor(what, predicate, timeoutMs = 15000) {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const value = await predicate();
    if (value) {
      console.log(`ok: ${what}`);
      return value;
    }
    if (Date.now() > deadline) check(false, what, 'timed out');
    await new Promise((r) => setTimeout(r, 100));
  }
}

// Each listens on a port of the kernel's choosing (port 0), which it logs:
// a port found free beforehand may be taken by then.
function loggedPort(child, pattern) {
  const match = child.log().match(pattern);
  return match ? Number(match[1]) : 0;
}
const xformdFlags = (port) => [`--listen=127.0.0.1:${port}`,
  `--data_dir=${dataDir}`, '--fsync=always', '--demo'];
let server = '';
function xformctl(...command) {
  return execFileSync(args.xformctl, [server, ...command], { encoding: 'utf8' });
}

try {
  let xformd = start(args.xformd, xformdFlags(0), 'xformd');
  await waitFor('xformd serves', () => xformd.log().includes('xformd serving'));
  const grpcPort = loggedPort(xformd, /xformd serving on \S+ \(port (\d+)/);
  check(grpcPort > 0, 'xformd logs its port', `${grpcPort}`);
  server = `--server=127.0.0.1:${grpcPort}`;
  const web = start(args.xform_web, [server, '--listen=127.0.0.1:0',
    '--foxglove_listen=', `--web_root=${args.web_root}`], 'xform-web');
  const webPort = await waitFor('xform-web logs its port',
    () => loggedPort(web, /xform-web: serving \S+ \(port (\d+)/));
  const url = `http://127.0.0.1:${webPort}/`;
  await waitFor('xform-web serves', async () => {
    try { return (await fetch(`${url}api/worlds`)).ok; } catch { return false; }
  });

  // "one": a single large root. "family": a parent and a child above it.
  xformctl('worlds', 'create', 'one', '--mode=driven');
  xformctl('entities', 'create', 'one', '1', '--position=-1.5,0,0', '--scale=1.5,1.5,1.5');
  xformctl('entities', 'set', 'one', '1', '--position=-1.5,0,0', '--scale=1.5,1.5,1.5', '--end_frame');
  xformctl('worlds', 'create', 'family', '--mode=driven');
  xformctl('entities', 'create', 'family', '1', '--scale=1.2,1.2,1.2');
  xformctl('entities', 'create', 'family', '2', '--parent=1', '--position=0,1.5,0');
  xformctl('entities', 'set', 'family', '1', '--scale=1.2,1.2,1.2', '--end_frame');

  browser = await chromium.launch({
    executablePath: CHROMIUM,
    args: ['--no-sandbox', '--disable-background-networking', '--disable-component-update',
      '--disable-sync', '--no-first-run', '--disable-quic'],
  });

  // Both ways of drawing: instanced (a GPU's) and points (a software renderer's).
  for (const draw of ['boxes', 'points']) {
    const page = await browser.newPage({ viewport: { width: 960, height: 600 } });
    const pageErrors = [];
    page.on('pageerror', (error) => pageErrors.push(error.message));
    await page.goto(`${url}?world=one&draw=${draw}`);
    const stats = () => page.evaluate(() => ({ ...window.xformWeb.stats }));
    await waitFor(`${draw}: world one is live`, async () => {
      const s = await stats();
      return s.state === 'live' && s.entities === 1;
    });
    await page.waitForTimeout(300); // The camera settles on it.
    const pixels = () => page.evaluate(() => window.xformWeb.readPixels());
    const before = await pixels();
    check(before.orange.pixels > 200, `${draw}: the canvas is not blank`,
      `${before.orange.pixels} orange pixels`);

    const frameBefore = (await stats()).frame;
    xformctl('entities', 'set', 'one', '1', '--position=1.5,0,0', '--scale=1.5,1.5,1.5', '--end_frame');
    await waitFor(`${draw}: the page gets the move`,
      () => page.evaluate(() => window.xformWeb.world(1)?.[3] === 1.5));
    const after = await pixels();
    check(after.orange.x - before.orange.x > 0.15,
      `${draw}: the entity's pixels moved right with it`,
      `centroid x ${before.orange.x.toFixed(3)} -> ${after.orange.x.toFixed(3)}`);
    check(Math.abs(after.orange.y - before.orange.y) < 0.05, `${draw}: and not up or down`);
    check((await stats()).frame > frameBefore, `${draw}: the frame number rose`);
    // Put it back for the next pass.
    xformctl('entities', 'set', 'one', '1', '--position=-1.5,0,0', '--scale=1.5,1.5,1.5', '--end_frame');

    // The world picker: to "family".
    await waitFor(`${draw}: the picker lists family`, () =>
      page.evaluate(() => [...document.querySelectorAll('#world option')].some((o) => o.value === 'family')));
    await page.selectOption('#world', 'family');
    await waitFor(`${draw}: world family is live`, async () => {
      const s = await stats();
      return s.world === 'family' && s.state === 'live' && s.entities === 2;
    });
    check(await page.evaluate(() => window.xformWeb.parent(2)) === 1, `${draw}: 2's parent is 1`);
    await page.waitForTimeout(300);
    const family = await pixels();
    check(family.cyan.pixels > 50, `${draw}: the child is drawn`, `${family.cyan.pixels} cyan pixels`);
    check(family.cyan.y > family.orange.y, `${draw}: above its parent`);
    xformctl('entities', 'set', 'family', '1', '--position=1.5,0,0', '--scale=1.2,1.2,1.2', '--end_frame');
    await waitFor(`${draw}: the child's world follows its parent`,
      () => page.evaluate(() => Math.abs(window.xformWeb.world(2)?.[3] - 1.5) < 1e-5));
    const moved = await pixels();
    check(moved.cyan.x - family.cyan.x > 0.1, `${draw}: the child's pixels moved with the parent`,
      `centroid x ${family.cyan.x.toFixed(3)} -> ${moved.cyan.x.toFixed(3)}`);
    xformctl('entities', 'set', 'family', '1', '--position=0,0,0', '--scale=1.2,1.2,1.2', '--end_frame');

    // The stats overlay counts frames.
    const overlayFrame = async () => Number((await page.textContent('#stats')).match(/frame\s+(\d+)/)?.[1] ?? -1);
    const shown = await overlayFrame();
    xformctl('entities', 'set', 'family', '2', '--position=0,2,0', '--end_frame');
    await waitFor(`${draw}: the overlay's frame count rises`, async () => (await overlayFrame()) > shown);
    xformctl('entities', 'set', 'family', '2', '--position=0,1.5,0', '--end_frame');
    check(pageErrors.length === 0, `${draw}: no script errors`, pageErrors.join('; '));
    await page.close();
  }

  // Smooth drawing: entity 1 of "smooth" moves along x at 2 units a second,
  // stamped on a 60 Hz grid and sent up to 60 ms late; a tab asks for 10
  // frames a second. Drawn interpolated at the adaptive delay, it moves on
  // screen at that speed frame after frame; drawn as messages come
  // (?smooth=0), it stands still and jumps, which this check must see.
  const writer = start(args.jittery_writer, [server, '--world=smooth', '--speed=2',
    '--hz=60', '--jitter_ms=60', '--seconds=120'], 'jittery_writer');
  const SPEED = 2;
  const onScreenSpeeds = async (query) => {
    const page = await browser.newPage({ viewport: { width: 640, height: 400 } });
    await page.goto(`${url}?world=smooth&rate=10${query}`);
    await waitFor(`smooth${query}: live, with the moving entity`, () => page.evaluate(() =>
      window.xformWeb.stats.state === 'live' && window.xformWeb.world(1) !== null));
    if (!query.includes('smooth=0')) {
      await waitFor(`smooth${query}: the delay is learnt (15 messages)`, () => page.evaluate(() =>
        window.xformWeb.smoothing().steering && window.xformWeb.smoothing().arrivals >= 15));
    }
    // 150 drawn frames (2.5 s at 60 frames/s), each with its time.
    const samples = await page.evaluate(() => new Promise((resolve) => {
      const seen = [];
      window.xformWeb.onDrawn((now) => {
        seen.push([now, window.xformWeb.world(1)[3]]);
        if (seen.length === 150) {
          window.xformWeb.onDrawn(null);
          resolve(seen);
        }
      });
    }));
    const overlay = await page.textContent('#stats');
    await page.close();
    // Speed between consecutive drawn frames, against the true speed.
    const errors = samples.slice(1).map(([t, x], k) =>
      Math.abs((x - samples[k][1]) / ((t - samples[k][0]) / 1000) - SPEED) / SPEED)
      .sort((a, b) => a - b);
    const within = errors.filter((e) => e < 0.1).length / errors.length;
    const elapsed = (samples[samples.length - 1][0] - samples[0][0]) / 1000;
    const mean = (samples[samples.length - 1][1] - samples[0][1]) / elapsed;
    return {
      within, medianError: errors[Math.floor(errors.length / 2)],
      p95Error: errors[Math.floor(errors.length * 0.95)], meanSpeed: mean,
      frames: samples.length, overlay: overlay.match(/smoothing\s+(.*)/)?.[1] ?? '',
    };
  };
  const smooth = await onScreenSpeeds('');
  console.log('figures smooth (rate 10, jitter 60 ms):', JSON.stringify(smooth));
  check(smooth.within > 0.95, 'smoothed: frame-to-frame speed within 10% of the true speed',
    `${(100 * smooth.within).toFixed(1)}% of ${smooth.frames} frames, median error ` +
    `${(100 * smooth.medianError).toFixed(2)}%, p95 ${(100 * smooth.p95Error).toFixed(2)}%`);
  check(Math.abs(smooth.meanSpeed - SPEED) / SPEED < 0.02, 'smoothed: the mean speed is the true one',
    `${smooth.meanSpeed.toFixed(3)} units/s`);
  const shownDelay = Number(smooth.overlay.match(/^(\d+) ms behind \(adaptive\)/)?.[1] ?? NaN);
  check(shownDelay >= 100 && shownDelay <= 300, 'the overlay shows the adaptive delay', smooth.overlay);
  const raw = await onScreenSpeeds('&smooth=0');
  console.log('figures unsmoothed (rate 10, jitter 60 ms):', JSON.stringify(raw));
  check(raw.within < 0.5 && raw.overlay === 'off',
    'unsmoothed: the same motion stands and jumps (the check can fail)',
    `${(100 * raw.within).toFixed(1)}% of frames within 10%`);
  writer.kill('SIGKILL');

  // kill -9: the page says it is reconnecting, and recovers when xformd is
  // back (on its journal) with the world as it was.
  const page = await browser.newPage({ viewport: { width: 960, height: 600 } });
  await page.goto(`${url}?world=family`);
  await waitFor('family is live', () => page.evaluate(() =>
    window.xformWeb.stats.state === 'live' && window.xformWeb.stats.entities === 2));
  xformd.kill('SIGKILL');
  await waitFor('the page shows reconnecting', async () =>
    (await page.textContent('#status')).startsWith('reconnecting'));
  // Back on the same port, which xform-web dials: free but for the
  // moment between the kill and this.
  xformd = start(args.xformd, xformdFlags(grpcPort), 'xformd');
  await waitFor('xformd serves again', () => xformd.log().includes('xformd serving'));
  xformctl('entities', 'set', 'family', '1', '--position=-2,0,0', '--scale=1.2,1.2,1.2', '--end_frame');
  await waitFor('the page is live again, with the change made after', async () =>
    (await page.textContent('#status')) === 'live' &&
    await page.evaluate(() => window.xformWeb.world(2)?.[3] === -2));
  await page.close();

  // "Follow camera" on the demo's city (100,000 entities over 1 km): the
  // page holds only the sphere around its camera's target, and when the
  // camera moves the view moves with it, sent what entered and left, not
  // the view again.
  const city = await browser.newPage({ viewport: { width: 960, height: 600 } });
  await city.goto(`${url}?world=city&follow=1&radius=60`);
  const cityStats = () => city.evaluate(() => ({ ...window.xformWeb.stats }));
  // Every entity the page holds is within the region grown by its margin.
  const outside = (center, reach) => city.evaluate(([c, r]) =>
    window.xformWeb.positions().filter(([, x, y, z]) =>
      Math.hypot(x - c[0], y - c[1], z - c[2]) > r + 1e-3).length, [center, reach]);
  await waitFor('city: following, live with a neighbourhood', async () => {
    const s = await cityStats();
    return s.state === 'live' && s.entities > 50 && s.worldEntities >= 100000;
  });
  const near = await cityStats();
  check(near.entities < near.worldEntities / 50, 'city: the page holds its neighbourhood only',
    `${near.entities} of ${near.worldEntities} entities`);
  check(await outside([0, 0, 0], 66) === 0, 'city: all of them within the sphere and its margin');
  await city.evaluate(() => window.xformWeb.lookAt(300, 20, -200));
  await waitFor('city: the view follows the camera to (300, 20, -200)', async () => {
    const follow = await city.evaluate(() => window.xformWeb.follow());
    const s = await cityStats();
    return follow.sent?.[0] === 300 && follow.sent?.[2] === -200 && s.entities > 50 &&
      await outside([300, 20, -200], 66) === 0;
  });
  const moved = await cityStats();
  check(moved.resyncs === 0, 'city: moving the view resent nothing whole', `${moved.resyncs} resyncs`);
  await city.waitForTimeout(2000);
  console.log('figures city (follow, radius 60):', JSON.stringify(await cityStats()));
  await city.close();

  // The city as a first-time user sees it, for the README: buildings as
  // boxes on their blocks, drones, the ground grid and axes.
  const view = await browser.newPage({ viewport: { width: 1280, height: 720 } });
  await view.goto(`${url}?world=city&follow=1&radius=80`);
  await waitFor('city (radius 80) is live, drawn as boxes', () => view.evaluate(() =>
    window.xformWeb.stats.state === 'live' && window.xformWeb.stats.entities > 500 &&
    window.xformWeb.drawing() === 'boxes'));
  await view.evaluate(() => window.xformWeb.orbit(0.9, 0.45));
  await view.evaluate(() => window.xformWeb.drawn(3)); // Drawn from there.
  if (args.screenshot) {
    await view.screenshot({ path: args.screenshot });
    console.log(`screenshot: ${args.screenshot}`);
  }
  await view.close();

  // The demo's solar system; and the frame rate of the demo's 10,000
  // entities in this software renderer.
  const solar = await browser.newPage({ viewport: { width: 1280, height: 720 } });
  await solar.goto(`${url}?world=solar`);
  await waitFor('solar is live', () => solar.evaluate(() =>
    window.xformWeb.stats.state === 'live' && window.xformWeb.stats.entities > 3000));
  await solar.waitForTimeout(2500);
  console.log('figures solar:', JSON.stringify(await solar.evaluate(() => window.xformWeb.stats)));
  await solar.goto(`${url}?world=demo`);
  await waitFor('demo is live', () => solar.evaluate(() =>
    window.xformWeb.stats.state === 'live' && window.xformWeb.stats.entities === 10000));
  await solar.waitForTimeout(3000);
  console.log('figures demo:', JSON.stringify(await solar.evaluate(() => window.xformWeb.stats)));

} catch (error) {
  failed = true;
  console.log(error.message);
  for (const child of children) {
    console.log(`--- ${child.name} log (tail) ---\n${child.log().slice(-2000)}`);
  }
} finally {
  await browser?.close();
  cleanUp();
}
console.log(failed ? 'FAIL' : 'PASS');
process.exit(failed ? 1 : 0);
