// xform-web's page: picks a world, opens a WebSocket to the gateway for it,
// and draws every entity of the view at its world matrix as the frames
// come. The gateway's mirror does resync and filtering; the page only
// applies what it is sent. With "follow camera" the view is a sphere around
// the camera's target, moved as the camera moves: the page is sent only
// the neighbourhood, and what enters and leaves it.

import * as THREE from 'three';
import { OrbitControls } from 'three/examples/jsm/controls/OrbitControls.js';
import { decodeFrame, RESYNCED } from './frame.js';
import { Entities } from './entities.js';
import { Smoothing } from './smoothing.js';

const $ = (id) => document.getElementById(id);

// ---- the 3D view ------------------------------------------------------------

// Antialiasing multiplies a software renderer's work (headless Chromium's
// SwiftShader, llvmpipe): on those, go without.
function softwareGl() {
  const gl = document.createElement('canvas').getContext('webgl2');
  const info = gl && gl.getExtension('WEBGL_debug_renderer_info');
  const name = info ? gl.getParameter(info.UNMASKED_RENDERER_WEBGL) : '';
  gl?.getExtension('WEBGL_lose_context')?.loseContext();
  return /swiftshader|llvmpipe|software/i.test(name);
}
// ?draw=boxes or ?draw=points overrides the choice (entities.js): boxes on
// a GPU, on a software renderer boxes for a small view and points for a
// large one.
const software = softwareGl();
const drawParam = new URLSearchParams(location.search).get('draw');
const draw = drawParam === 'instanced' ? 'boxes' : drawParam || (software ? 'auto' : 'boxes');
const renderer = new THREE.WebGLRenderer({ antialias: !software });
renderer.setPixelRatio(window.devicePixelRatio);
$('view').appendChild(renderer.domElement);
const scene = new THREE.Scene();
scene.background = new THREE.Color(0x14161c);
scene.add(new THREE.AmbientLight(0xffffff, 1.6));
const sun = new THREE.DirectionalLight(0xffffff, 1.8);
sun.position.set(1, 2, 1.5);
scene.add(sun);
const camera = new THREE.PerspectiveCamera(50, 1, 0.01, 1e6);
camera.position.set(0, 10, 20);
const controls = new OrbitControls(camera, renderer.domElement);
controls.enableDamping = true;
const entities = new Entities(scene, { mode: draw });

// The ground (y = 0) and the world's axes (x red, y green, z blue, muted so
// that they are not taken for entities), sized to the view by frameAll().
const ground = new THREE.GridHelper(100, 20, 0x59606c, 0x2f343d);
ground.material.transparent = true;
ground.material.opacity = 0.8;
scene.add(ground);
const axes = new THREE.AxesHelper(10);
axes.setColors(new THREE.Color(0x8a3a3a), new THREE.Color(0x3a7a3a), new THREE.Color(0x3a4a8a));
scene.add(axes);

// A grid of `size` (a round number: 1, 2 or 5 times a power of ten) around
// `center` on the ground, with lines 1/20 of it apart.
function fitGround(center, radius) {
  const span = Math.max(2, 2.4 * radius);
  const power = 10 ** Math.floor(Math.log10(span));
  const size = [1, 2, 5, 10].map((m) => m * power).find((v) => v >= span);
  const step = size / 20;
  ground.scale.setScalar(size / 100);
  ground.position.set(Math.round(center.x / step) * step, 0, Math.round(center.z / step) * step);
  axes.scale.setScalar(size / 100);
}
// ?smooth=0 draws each message as it comes; ?delay=MS fixes the delay.
const pageParams = new URLSearchParams(location.search);
const smoothing = new Smoothing((id, elements) => entities.place(id, elements), {
  enabled: pageParams.get('smooth') !== '0',
  fixedDelayMs: Number(pageParams.get('delay')) || 0,
});

function resize() {
  const { clientWidth: w, clientHeight: h } = $('view');
  renderer.setSize(w, h);
  camera.aspect = w / Math.max(1, h);
  camera.updateProjectionMatrix();
  entities.points?.setViewport(h * renderer.getPixelRatio(), camera.fov);
}
window.addEventListener('resize', resize);
resize();

// ---- follow camera -----------------------------------------------------------

// The view's region while following: a sphere of the chosen radius around
// the orbit target, with a tenth of it as margin (an entity on the border
// does not flicker in and out). Moved when the target has gone a quarter of
// the margin, at most 10 times a second (the server allows 240).
const follow = {
  on: false, radius: 100, sentCenter: null, sentRadius: 0, lastSentMs: 0,
  moves: 0,
};
const ring = new THREE.LineLoop(
  new THREE.BufferGeometry().setFromPoints(Array.from({ length: 96 }, (_, i) =>
    new THREE.Vector3(Math.cos(i / 96 * 2 * Math.PI), 0, Math.sin(i / 96 * 2 * Math.PI)))),
  new THREE.LineBasicMaterial({ color: 0x7fd4ff, transparent: true, opacity: 0.6 }));
ring.visible = false;
scene.add(ring);

function regionText(center, radius) {
  const f = (v) => Number(v.toFixed(3));
  return `sphere:${f(center.x)},${f(center.y)},${f(center.z)},${f(radius)},margin=${f(radius / 10)}`;
}

function readFollowControls() {
  follow.on = $('follow').checked;
  const radius = Number($('radius').value);
  follow.radius = Number.isFinite(radius) && radius > 0 ? radius : 100;
}

// Sends the region when the target or radius moved enough since the last.
function moveRegion(now) {
  ring.visible = follow.on;
  if (!follow.on) return;
  ring.position.copy(controls.target);
  ring.scale.setScalar(follow.radius);
  if (!socket || socket.readyState !== WebSocket.OPEN || !follow.sentCenter) return;
  const drift = controls.target.distanceTo(follow.sentCenter);
  if (drift < follow.radius / 40 && follow.radius === follow.sentRadius) return;
  if (now - follow.lastSentMs < 100) return;
  socket.send(JSON.stringify({ region: regionText(controls.target, follow.radius) }));
  follow.sentCenter = controls.target.clone();
  follow.sentRadius = follow.radius;
  follow.lastSentMs = now;
  follow.moves += 1;
}

// Points the camera at `target` from where it looks now (for tests and
// links): the region follows.
function lookAt(x, y, z) {
  const offset = camera.position.clone().sub(controls.target);
  controls.target.set(x, y, z);
  camera.position.copy(controls.target).add(offset);
  controls.update();
}

function frameAll() {
  if (follow.on) {
    // The view follows the camera: frame the region, where it is.
    const distance = 1.6 * follow.radius / Math.sin(THREE.MathUtils.degToRad(camera.fov / 2));
    const direction = new THREE.Vector3(0, 0.6, 1).normalize();
    camera.position.copy(controls.target).addScaledVector(direction, distance);
    camera.near = distance / 1000;
    camera.far = distance * 100;
    camera.updateProjectionMatrix();
    controls.update();
    fitGround(controls.target, follow.radius);
    return;
  }
  const box = entities.bounds();
  if (box.isEmpty()) return;
  const center = box.getCenter(new THREE.Vector3());
  const radius = Math.max(2, box.getSize(new THREE.Vector3()).length() / 2 + 1);
  const distance = radius / Math.sin(THREE.MathUtils.degToRad(camera.fov / 2));
  const direction = new THREE.Vector3(0, 0.5, 1).normalize();
  controls.target.copy(center);
  camera.position.copy(center).addScaledVector(direction, distance);
  camera.near = distance / 1000;
  camera.far = distance * 100;
  camera.updateProjectionMatrix();
  controls.update();
  fitGround(center, radius);
}

// ---- stats ------------------------------------------------------------------

const stats = {
  world: '', state: 'connecting', message: '', frame: 0, messages: 0,
  entities: 0, worldEntities: 0, bytes: 0, updatesPerSecond: 0,
  bytesPerSecond: 0, latencyMs: 0, latencyMaxMs: 0, fps: 0, resyncs: 0,
  regionMoves: 0,
};
let second = { start: performance.now(), updates: 0, bytes: 0, frames: 0, latency: [] };

function rollStats(now) {
  const seconds = (now - second.start) / 1000;
  if (seconds < 1) return;
  stats.updatesPerSecond = Math.round(second.updates / seconds);
  stats.bytesPerSecond = Math.round(second.bytes / seconds);
  stats.fps = Math.round(second.frames / seconds);
  const sorted = second.latency.sort((a, b) => a - b);
  stats.latencyMs = sorted.length ? sorted[Math.floor(sorted.length / 2)] : 0;
  stats.latencyMaxMs = sorted.length ? sorted[sorted.length - 1] : 0;
  second = { start: now, updates: 0, bytes: 0, frames: 0, latency: [] };
  const share = stats.worldEntities > 0
    ? ` of ${stats.worldEntities} (${(100 * stats.entities / stats.worldEntities).toFixed(stats.entities < stats.worldEntities / 100 ? 2 : 0)}%)`
    : '';
  $('stats').textContent = [
    `frame     ${stats.frame}`,
    `entities  ${stats.entities}${share}`,
    ...(follow.on ? [`region    r ${follow.radius}, moved ${follow.moves} times`] : []),
    `received  ${(stats.bytes / 1e6).toFixed(1)} MB`,
    `updates/s ${stats.updatesPerSecond}`,
    `bytes/s   ${stats.bytesPerSecond}`,
    `latency   ${stats.latencyMs.toFixed(1)} ms (max ${stats.latencyMaxMs.toFixed(1)})`,
    `smoothing ${!smoothing.enabled ? 'off' : stats.delayMs === null ? 'waiting for frames'
      : `${stats.delayMs.toFixed(0)} ms behind (${smoothing.clock.fixedDelayMs > 0 ? 'fixed' : 'adaptive'})`}`,
    `fps       ${stats.fps} (${entities.drawing()})`,
  ].join('\n');
}

function showStatus(state, message) {
  stats.state = state;
  stats.message = message || '';
  const badge = $('status');
  badge.className = state;
  badge.textContent = message ? `${state}: ${message}` : state;
}

// ---- the gateway ------------------------------------------------------------

let socket = null;
let paused = false;
let retryTimer = null;
let framedOnce = false;

function connect() {
  clearTimeout(retryTimer);
  if (socket) {
    socket.onclose = null;
    socket.close();
  }
  entities.clear();
  stats.entities = 0;
  smoothing.clear();
  framedOnce = false;
  const world = $('world').value;
  stats.world = world;
  if (!world) return;
  const query = new URLSearchParams({ world });
  const subtrees = $('subtrees').value.replace(/\s+/g, '');
  if (subtrees) query.set('subtrees', subtrees);
  const rate = Number($('rate').value);
  if (Number.isFinite(rate) && rate > 0) query.set('rate', String(rate));
  readFollowControls();
  follow.sentCenter = null;
  if (follow.on) {
    query.set('region', regionText(controls.target, follow.radius));
    follow.sentCenter = controls.target.clone();
    follow.sentRadius = follow.radius;
  }
  stats.bytes = 0;
  const url = `${location.protocol === 'https:' ? 'wss' : 'ws'}://${location.host}/ws?${query}`;
  showStatus('connecting');
  socket = new WebSocket(url);
  socket.binaryType = 'arraybuffer';
  socket.onopen = () => {
    if (paused) socket.send(JSON.stringify({ pause: true }));
  };
  socket.onmessage = (event) => {
    if (typeof event.data === 'string') {
      const status = JSON.parse(event.data);
      if (status.type === 'status') {
        showStatus(status.synced ? 'live' : 'reconnecting', status.message);
      }
      return;
    }
    const frame = decodeFrame(event.data);
    smoothing.begin(frame.stampMs || frame.publishedMs, performance.now(),
      (frame.flags & RESYNCED) !== 0);
    entities.apply(frame, smoothing);
    // The gateway sends the next message only when told this one is in:
    // a page busy rendering skips frames instead of queueing them.
    socket.send(JSON.stringify({ ack: frame.frame }));
    stats.frame = frame.frame;
    stats.messages += 1;
    stats.entities = entities.count;
    if (frame.flags & RESYNCED) stats.resyncs += 1;
    second.updates += frame.ids.length;
    second.bytes += event.data.byteLength;
    stats.bytes += event.data.byteLength;
    if (frame.publishedMs > 0) second.latency.push(Date.now() - frame.publishedMs);
    if (!framedOnce && entities.count > 0) {
      framedOnce = true;
      frameAll();
    }
  };
  socket.onclose = (event) => {
    showStatus('reconnecting', `gateway closed (${event.code}${event.reason ? ': ' + event.reason : ''})`);
    retryTimer = setTimeout(connect, 1000);
  };
}

async function refreshWorlds() {
  try {
    const response = await fetch('api/worlds');
    const list = await response.json();
    const select = $('world');
    const wanted = select.value || new URLSearchParams(location.search).get('world') || '';
    const names = list.worlds.map((w) => w.name);
    if (wanted && !names.includes(wanted)) names.unshift(wanted);
    if (names.join('\n') !== [...select.options].map((o) => o.value).join('\n')) {
      select.replaceChildren(...names.map((name) => new Option(name, name)));
    }
    const before = stats.world;
    select.value = wanted || names[0] || '';
    stats.worldEntities = list.worlds.find((w) => w.name === select.value)?.entities ?? 0;
    if (select.value !== before) connect();
  } catch (error) {
    showStatus('reconnecting', `gateway unreachable (${error.message})`);
  }
}

$('world').addEventListener('change', connect);
$('apply').addEventListener('click', connect);
$('subtrees').addEventListener('keydown', (e) => { if (e.key === 'Enter') connect(); });
$('frame-all').addEventListener('click', frameAll);
$('lines').addEventListener('change', (e) => entities.setLines(e.target.checked));
$('follow').addEventListener('change', connect);
$('rate').addEventListener('change', connect);
$('radius').addEventListener('change', () => {
  const wasOn = follow.on;
  readFollowControls();
  if (!wasOn && follow.on) connect();
});
{
  const params = new URLSearchParams(location.search);
  if (params.get('follow') === '1') $('follow').checked = true;
  if (params.get('radius')) $('radius').value = params.get('radius');
  if (params.get('rate')) $('rate').value = params.get('rate');
  readFollowControls();
}
$('pause').addEventListener('click', () => {
  paused = !paused;
  $('pause').textContent = paused ? 'resume' : 'pause';
  if (socket && socket.readyState === WebSocket.OPEN) {
    socket.send(JSON.stringify({ pause: paused }));
  }
});

// ---- picking ----------------------------------------------------------------

let pickedId = null;
const raycaster = new THREE.Raycaster();
renderer.domElement.addEventListener('click', (event) => {
  const rect = renderer.domElement.getBoundingClientRect();
  const pointer = new THREE.Vector2(
    ((event.clientX - rect.left) / rect.width) * 2 - 1,
    -((event.clientY - rect.top) / rect.height) * 2 + 1);
  raycaster.setFromCamera(pointer, camera);
  pickedId = entities.pick(raycaster);
  showPicked();
});

function showPicked() {
  const world = pickedId === null ? null : entities.world(pickedId);
  if (!world) {
    $('picked').textContent = '';
    return;
  }
  const row = (r) => world.slice(4 * r, 4 * r + 4).map((v) => v.toFixed(3).padStart(9)).join(' ');
  $('picked').textContent = [
    `entity ${pickedId}`,
    `parent ${entities.parentOf.get(pickedId) || 'none (a root)'}`,
    'world',
    row(0), row(1), row(2),
  ].join('\n');
}

// ---- the loop ---------------------------------------------------------------

let onDrawn = null;

function animate(now) {
  requestAnimationFrame(animate);
  controls.update();
  moveRegion(now);
  stats.regionMoves = follow.moves;
  smoothing.render(now);
  if (entities.dirty) entities.changed();
  stats.delayMs = smoothing.delay();
  renderer.render(scene, camera);
  onDrawn?.(now);
  second.frames += 1;
  if (pickedId !== null) showPicked();
  rollStats(now);
}
requestAnimationFrame(animate);

refreshWorlds();
setInterval(refreshWorlds, 2000);

// Renders now and reads the canvas back: for each colour class (by which
// channel dominates), how many pixels and their centroid in [0, 1], x to
// the right and y up. Tests
// check what is on screen with it.
function readPixels() {
  renderer.render(scene, camera);
  const gl = renderer.getContext();
  const w = gl.drawingBufferWidth;
  const h = gl.drawingBufferHeight;
  const pixels = new Uint8Array(w * h * 4);
  gl.readPixels(0, 0, w, h, gl.RGBA, gl.UNSIGNED_BYTE, pixels);
  const classes = { lit: [0, 0, 0], orange: [0, 0, 0], cyan: [0, 0, 0] };
  for (let y = 0; y < h; ++y) {
    for (let x = 0; x < w; ++x) {
      const o = 4 * (y * w + x);
      const r = pixels[o];
      const g = pixels[o + 1];
      const b = pixels[o + 2];
      const add = (c) => { c[0] += 1; c[1] += x; c[2] += y; }; // y up: GL rows go up
      if (r + g + b > 200) add(classes.lit);
      if (r > 150 && b < 100 && r > g) add(classes.orange);
      if (b > 150 && r < 100) add(classes.cyan);
    }
  }
  const summary = {};
  for (const [name, [n, sx, sy]] of Object.entries(classes)) {
    summary[name] = { pixels: n, x: n ? sx / n / w : null, y: n ? sy / n / h : null };
  }
  return summary;
}

// For tests and the curious: the page's state.
window.xformWeb = {
  stats,
  world: (id) => entities.world(id),
  parent: (id) => entities.parentOf.get(id),
  frameAll,
  readPixels,
  lookAt,
  target: () => controls.target.toArray(),
  follow: () => ({ on: follow.on, radius: follow.radius, moves: follow.moves,
    sent: follow.sentCenter?.toArray() ?? null }),
  // Every entity of the view: [id, x, y, z] of its world position.
  positions: () => [...entities.index.keys()].map((id) => {
    const w = entities.world(id);
    return [id, w[3], w[7], w[11]];
  }),
  draw,
  drawing: () => entities.drawing(),
  // Turns the camera about its target: `azimuth` from +z toward +x and
  // `elevation` above the ground, in radians, at the distance it has.
  orbit: (azimuth, elevation) => {
    const distance = camera.position.distanceTo(controls.target);
    camera.position.copy(controls.target).add(new THREE.Vector3(
      Math.sin(azimuth) * Math.cos(elevation), Math.sin(elevation),
      Math.cos(azimuth) * Math.cos(elevation)).multiplyScalar(distance));
    controls.update();
  },
  // Calls back after each drawn frame with its time (tests sample motion).
  onDrawn: (callback) => { onDrawn = callback; },
  renderStamp: () => smoothing.lastRenderStamp,
  // How much the render clock has learnt: messages measured, and whether
  // it has started steering (smoothing.js).
  smoothing: () => ({ arrivals: smoothing.clock.arrivals.length, steering: smoothing.clock.started }),
  // Resolves after `n` more frames are drawn.
  drawn: (n) => new Promise((resolve) => {
    let left = n;
    const previous = onDrawn;
    onDrawn = (now) => {
      previous?.(now);
      if (--left === 0) {
        onDrawn = previous;
        resolve();
      }
    };
  }),
};
