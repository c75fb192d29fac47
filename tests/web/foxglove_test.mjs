// xform-web's Foxglove endpoint against a real xformd, read by foxglove's
// own client library (npm @foxglove/ws-protocol's FoxgloveClient, on npm's
// ws), decoded with protobufjs from the schemas the channels advertise.
//
//   node foxglove_test.mjs --xformd=PATH --xformctl=PATH --xform_web=PATH
//     --web_root=DIR --jittery_writer=PATH --node_modules=DIR
//
// Each client keeps what Foxglove keeps: the transform tree its
// FrameTransforms build (frames composed along their parents) and the
// scene's entities. Checked against `xformctl entities get` (Read): the
// advertised channels and schemas; a subscriber's whole tree then its
// changes; a late subscriber's whole tree first; a world deleted and
// re-created re-seeding the tree; a rate-limited client getting no more
// than its rate, a region client only its region, moved by setParameters;
// bad messages, unknown channels and too many worlds refused with an error
// status while other clients go on; handshakes without the subprotocol or
// from a foreign Origin refused.

import { execFileSync } from 'node:child_process';
import { createRequire } from 'node:module';
import { join } from 'node:path';

import { Tree, check, finish, near, start, waitFor } from '../tools/harness.mjs';

const args = Object.fromEntries(process.argv.slice(2).map((a) => {
  const [key, ...value] = a.replace(/^--/, '').split('=');
  return [key, value.join('=')];
}));
const require = createRequire(join(args.node_modules, 'noop.js'));
const { FoxgloveClient } = require('@foxglove/ws-protocol');
const WebSocket = require('ws');
const protobuf = require('protobufjs');
const descriptor = require('protobufjs/ext/descriptor');

let server = '';
const ctl = (...command) =>
  execFileSync(args.xformctl, [server, ...command], { encoding: 'utf8' });

// What Read says of `ids`: entity -> {parent, world}.
function read(world, ids) {
  const out = new Map();
  for (const line of ctl('entities', 'get', world, ...ids.map(String), '--json').split('\n')) {
    if (!line) continue;
    const e = JSON.parse(line);
    out.set(e.entity, { parent: e.parent, world: e.world });
  }
  return out;
}

// A world matrix (3x4, row-major) without its scale: Foxglove's frames are
// rigid, and the scene's cubes carry the scale.
function rigid(m) {
  const out = [...m];
  for (let col = 0; col < 3; ++col) {
    const length = Math.hypot(m[col], m[4 + col], m[8 + col]);
    for (let row = 0; row < 3; ++row) out[4 * row + col] = m[4 * row + col] / length;
  }
  return out;
}

// A Foxglove client as Foxglove is one: it subscribes to the channels of
// `world` whenever they are advertised, and keeps their tree and scene.
class Fox {
  constructor(port, { query = '', world = null, origin = undefined } = {}) {
    this.world = world;
    this.tree = new Tree();
    this.scene = new Map();  // Entity id -> cube size.
    this.types = new Map();  // Channel id -> protobuf type.
    this.topics = new Map();  // Channel id -> topic.
    this.bySubscription = new Map();
    this.channels = [];
    this.statuses = [];
    this.parameters = [];
    this.messages = { tf: 0, scene: 0 };
    this.firstTransforms = null;
    this.sceneCleared = 0;
    this.unadvertised = 0;
    const ws = new WebSocket(`ws://127.0.0.1:${port}/${query}`,
      [FoxgloveClient.SUPPORTED_SUBPROTOCOL], origin ? { origin } : {});
    this.client = new FoxgloveClient({ ws });
    this.client.on('serverInfo', (info) => { this.serverInfo = info; });
    this.client.on('status', (s) => this.statuses.push(s));
    this.client.on('parameterValues', (p) => this.parameters.push(p));
    this.client.on('close', (e) => { this.closed = e; });
    this.client.on('advertise', (channels) => this.advertised(channels));
    this.client.on('unadvertise', (ids) => {
      this.unadvertised += ids.length;
      for (const id of ids) this.types.delete(id);
    });
    this.client.on('message', (m) => this.received(m));
  }

  advertised(channels) {
    for (const c of channels) {
      this.channels.push(c);
      const root = protobuf.Root.fromDescriptor(
        descriptor.FileDescriptorSet.decode(Buffer.from(c.schema, 'base64')));
      this.types.set(c.id, root.lookupType(c.schemaName));
      this.topics.set(c.id, c.topic);
      if (this.world !== null && c.topic.startsWith(`/xform/${this.world}/`)) {
        this.bySubscription.set(this.client.subscribe(c.id), c.id);
      }
    }
  }

  received({ subscriptionId, timestamp, data }) {
    const channel = this.bySubscription.get(subscriptionId);
    const type = this.types.get(channel);
    const bytes = new Uint8Array(data.buffer, data.byteOffset, data.byteLength);
    const value = type.toObject(type.decode(bytes), { longs: String });
    if (this.topics.get(channel).endsWith('/tf')) {
      ++this.messages.tf;
      this.lastStamp = timestamp;
      this.firstTransforms ??= value.transforms ?? [];
      this.tree.apply(value.transforms ?? []);
    } else {
      ++this.messages.scene;
      for (const d of value.deletions ?? []) {
        if (d.type === 1) {
          this.scene.clear();
          ++this.sceneCleared;
        } else {
          this.scene.delete(Number(d.id.slice(1)));
        }
      }
      for (const e of value.entities ?? []) {
        const size = e.cubes[0].size;
        this.scene.set(Number(e.id.slice(1)), [size.x ?? 0, size.y ?? 0, size.z ?? 0]);
      }
    }
  }

  // Whether the tree gives every entity of `expected` (Read's) its parent
  // and world pose, and the scene holds exactly those entities.
  matches(expected, withScene = true) {
    for (const [id, e] of expected) {
      const link = this.tree.local.get(`e${id}`);
      if (!link || link.parent !== (e.parent ? `e${e.parent}` : 'world')) return false;
      const world = this.tree.world(`e${id}`);
      if (!world || !near(world, rigid(e.world))) return false;
    }
    if (!withScene) return true;
    const drawn = [...this.scene.keys()].sort((a, b) => a - b).join(',');
    return drawn === [...expected.keys()].sort((a, b) => a - b).join(',');
  }

  close() { this.client.close(); }
}

// A raw connection for saying what FoxgloveClient never would.
function raw(port, { protocols = [FoxgloveClient.SUPPORTED_SUBPROTOCOL], origin, query = '' } = {}) {
  const ws = new WebSocket(`ws://127.0.0.1:${port}/${query}`, protocols, origin ? { origin } : {});
  ws.statuses = [];
  ws.on('message', (data, binary) => {
    if (!binary) {
      const m = JSON.parse(data.toString());
      if (m.op === 'status') ws.statuses.push(m);
    }
  });
  ws.outcome = new Promise((resolve) => {
    ws.on('open', () => resolve('open'));
    ws.on('unexpected-response', (_req, res) => resolve(res.statusCode));
    ws.on('error', (e) => resolve(`error ${e.message}`));
  });
  ws.closedWith = new Promise((resolve) => ws.on('close', (code) => resolve(code)));
  return ws;
}

async function main() {
  const xformd = start(args.xformd, ['--listen=127.0.0.1:0'], 'xformd');
  const port = await waitFor('xformd serves', () =>
    Number(xformd.err.match(/xformd serving on \S+ \(port (\d+)/)?.[1] ?? 0));
  server = `--server=127.0.0.1:${port}`;
  ctl('worlds', 'create', 'fox', '--mode=driven');
  ctl('entities', 'create', 'fox', '1', '--position=1,0,0', '--rotation=0,0,0.3826834,0.9238795');
  ctl('entities', 'create', 'fox', '2', '--parent=1', '--position=0,2,0', '--rotation=0.5,0.5,0.5,0.5');
  ctl('entities', 'create', 'fox', '3', '--parent=2', '--position=0,0,1');
  ctl('entities', 'create', 'fox', '4', '--position=-3,0,0', '--scale=2,1,0.5');
  ctl('entities', 'create', 'fox', '5', '--parent=4', '--position=0,1,0', '--end_frame');
  ctl('worlds', 'create', 'city', '--mode=driven');
  for (let i = 1; i <= 20; ++i) {
    ctl('entities', 'create', 'city', String(i), `--position=${i - 1},0,0`, ...(i === 20 ? ['--end_frame'] : []));
  }

  const web = start(args.xform_web, [`--server=127.0.0.1:${port}`, '--listen=127.0.0.1:0',
    '--foxglove_listen=127.0.0.1:0', `--web_root=${args.web_root}`, '--foxglove_max_worlds=2'], 'xform-web');
  const fox = await waitFor('xform-web serves Foxglove', () =>
    Number(web.err.match(/Foxglove at \S+ \(port (\d+)/)?.[1] ?? 0));
  const smooth = start(args.jittery_writer, [`--server=127.0.0.1:${port}`, '--world=smooth',
    '--hz=60', '--jitter_ms=0', '--seconds=120'], 'jittery_writer');

  // ---- channels, whole tree, changes ---------------------------------------
  const a = new Fox(fox, { world: 'fox' });
  await waitFor('serverInfo', () => a.serverInfo);
  check(a.serverInfo.capabilities.includes('parameters') && a.serverInfo.sessionId,
    'serverInfo: the parameters capability and a session id', JSON.stringify(a.serverInfo));
  await waitFor('every world advertised', () =>
    ['fox', 'city', 'smooth'].every((w) => a.channels.some((c) => c.topic === `/xform/${w}/tf`)));
  const tf = a.channels.find((c) => c.topic === '/xform/fox/tf');
  const scene = a.channels.find((c) => c.topic === '/xform/fox/scene');
  check(tf.encoding === 'protobuf' && tf.schemaName === 'foxglove.FrameTransforms' &&
    scene.encoding === 'protobuf' && scene.schemaName === 'foxglove.SceneUpdate',
    'each world: a FrameTransforms and a SceneUpdate channel, protobuf');
  let expected = read('fox', [1, 2, 3, 4, 5]);
  await waitFor('the first messages hold the whole tree', () => a.matches(expected));
  check(a.firstTransforms.length === 5, 'the first FrameTransforms has all 5 frames');
  check(near(a.scene.get(4), [2, 1, 0.5]), 'the scene draws entity 4 a cube of its scale',
    JSON.stringify(a.scene.get(4)));

  ctl('entities', 'set', 'fox', '1', '--position=2,0,0', '--rotation=0,0,0.7071068,0.7071068', '--end_frame');
  ctl('entities', 'link', 'fox', '3', '4', '--end_frame');
  ctl('entities', 'destroy', 'fox', '2', '--keep_children', '--end_frame');
  ctl('entities', 'create', 'fox', '6', '--parent=3', '--position=0.5,0,0', '--end_frame');
  expected = read('fox', [1, 3, 4, 5, 6]);
  await waitFor('moves, a re-parent, a destroy and a create arrive as Read has them',
    () => a.matches(expected));
  check(BigInt(a.lastStamp) > 0n, 'messages carry the frame stamp', String(a.lastStamp));

  const b = new Fox(fox, { world: 'fox' });
  await waitFor('a late subscriber gets the whole tree', () => b.matches(expected));
  check(b.firstTransforms.length === 5, 'its first FrameTransforms has all 5 frames');

  // ---- a rate limit, a region ---------------------------------------------
  const slow = new Fox(fox, { world: 'smooth', query: '?rate=2' });
  const fast = new Fox(fox, { world: 'smooth' });
  await waitFor('both see the moving world', () => slow.messages.tf > 0 && fast.messages.tf > 0);
  // Counted over the span the unlimited client takes for 180 messages (the
  // world's 60 Hz: about 3 s).
  const [slow0, fast0, t0] = [slow.messages.tf, fast.messages.tf, Date.now()];
  await waitFor('the unlimited client gets 180 more messages', () => fast.messages.tf - fast0 >= 180);
  const seconds = (Date.now() - t0) / 1000;
  const slowN = slow.messages.tf - slow0;
  check(slowN >= 1 && slowN <= 2 * seconds + 2, 'rate=2 gets at most 2 messages a second',
    `${slowN} in ${seconds.toFixed(2)} s, beside the unlimited client's 180`);

  const near5 = new Fox(fox, { world: 'city', query: '?region=sphere:0,0,0,5.5' });
  await waitFor('a region client has its region only', () =>
    near5.matches(read('city', [1, 2, 3, 4, 5, 6])));
  near5.client.setParameters([{ name: 'xform.region', value: 'sphere:15,0,0,2.5' }], 'move');
  await waitFor('setParameters moves the region', () =>
    near5.matches(read('city', [14, 15, 16, 17, 18])));
  check(near5.parameters.some((p) => p.id === 'move' &&
    p.parameters.some((q) => q.name === 'xform.region' && q.value.startsWith('sphere:15'))),
  'setParameters is answered with the region');

  // ---- bad input, refused alone -------------------------------------------
  const bad = raw(fox);
  check(await bad.outcome === 'open', 'a raw client opens');
  bad.send('not json');
  bad.send(JSON.stringify({ op: 'subscribe', subscriptions: [{ id: 1, channelId: 999 }] }));
  bad.send(Buffer.from([1, 0, 0, 0, 0, 7]));
  bad.send(JSON.stringify({ op: 'advertise', channels: [] }));
  bad.send(JSON.stringify({ op: 'subscribe', subscriptions: [{ id: -1, channelId: 1 }] }));
  const cityChannels = a.channels.filter((c) => c.topic.startsWith('/xform/')).map((c) => c.id);
  bad.send(JSON.stringify({ op: 'subscribe', subscriptions: cityChannels.map((id, k) => ({ id: 10 + k, channelId: id })) }));
  await waitFor('each bad message gets an error status', () =>
    bad.statuses.filter((s) => s.level === 2).length >= 6);
  check(bad.statuses.some((s) => /no channel 999/.test(s.message)), 'an unknown channel is named');
  check(bad.statuses.some((s) => /foxglove_max_worlds/.test(s.message)), 'a third world is past --foxglove_max_worlds=2');
  check(bad.readyState === WebSocket.OPEN, 'and the connection stays open');
  const before = a.messages.tf;
  ctl('entities', 'set', 'fox', '5', '--position=0,3,0', '--end_frame');
  await waitFor('other clients go on meanwhile', () => a.messages.tf > before);
  bad.send('x'.repeat(70000));
  check(await bad.closedWith === 1009, 'a message over the limit closes that client (1009)');

  check(await raw(fox, { protocols: [] }).outcome === 400, 'a handshake without foxglove.websocket.v1 gets 400');
  check(await raw(fox, { origin: 'https://evil.example' }).outcome === 403, 'a foreign Origin gets 403');
  check(await raw(fox, { origin: 'https://app.foxglove.dev' }).outcome === 'open', 'Foxglove\'s web app is let in');
  check(await raw(fox, { query: '?rate=-1' }).outcome === 400, 'a bad query gets 400');

  // ---- a re-created world re-seeds the tree --------------------------------
  const [clears, unadvertised] = [a.sceneCleared, a.unadvertised];
  ctl('worlds', 'delete', 'fox');
  ctl('worlds', 'create', 'fox', '--mode=driven');
  ctl('entities', 'create', 'fox', '10', '--position=0,0,4');
  ctl('entities', 'create', 'fox', '11', '--parent=10', '--position=1,0,0', '--end_frame');
  expected = read('fox', [10, 11]);
  await waitFor('a re-created world re-seeds the client\'s tree and scene', () => a.matches(expected), 20000);
  check(a.sceneCleared > clears || a.unadvertised > unadvertised,
    'the old scene was cleared whole, or its channels taken back',
    `${a.sceneCleared - clears} clears, ${a.unadvertised - unadvertised} unadvertised`);
  smooth.kill('SIGTERM');
  for (const c of [a, b, slow, fast, near5]) c.close();
}

try {
  await main();
  finish(null);
} catch (error) {
  finish(error);
}
