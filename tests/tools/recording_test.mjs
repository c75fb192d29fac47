// `xformctl record` and `xformctl play` against a real xformd, checked with
// readers that are not ours: @mcap/core's indexed reader (the one Foxglove
// uses), fzstd for its chunks, protobufjs with the FileDescriptorSet the
// file carries.
//
//   node recording_test.mjs --xformd=PATH --xformctl=PATH --node_modules=DIR
//
// A raw subscriber (xformctl watch --verbose --json) sees a world's frames
// beside the recorder; every recorded message must carry a frame's stamp
// and, composed along the frames' parents, exactly the world poses that
// frame gave the raw subscriber; the scene draws each entity once, a box
// of its scale in its own frame. Played into a new world, the recording
// must give the same world matrices frame by frame, at the same stamps. A
// file that is not a recording is refused, and so is a world not empty.

import { execFileSync, spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync, readFileSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

import { Tree, check, finish, near, start, waitFor } from './harness.mjs';

const args = Object.fromEntries(process.argv.slice(2).map((a) => {
  const [key, ...value] = a.replace(/^--/, '').split('=');
  return [key, value.join('=')];
}));
const require = createRequire(join(args.node_modules, 'noop.js'));
const { McapIndexedReader } = require('@mcap/core');
const { decompress } = require('fzstd');
const protobuf = require('protobufjs');
const descriptor = require('protobufjs/ext/descriptor');

const dir = mkdtempSync(join(tmpdir(), 'xform-recording-'));

let server = '';
const ctl = (...command) =>
  execFileSync(args.xformctl, [server, ...command], { encoding: 'utf8' });

// A watch line: its JSON, with the stamp exact (JSON numbers are doubles).
function parseLine(line) {
  const json = JSON.parse(line);
  json.stamp = BigInt(line.match(/"stamp_nanos":(\d+)/)[1]);
  return json;
}

async function readRecording(path) {
  const bytes = readFileSync(path);
  const reader = await McapIndexedReader.Initialize({
    readable: {
      size: async () => BigInt(bytes.length),
      read: async (offset, length) => bytes.subarray(Number(offset), Number(offset + length)),
    },
    decompressHandlers: { zstd: (data, size) => decompress(data, new Uint8Array(Number(size))) },
  });
  const messages = [];
  const types = new Map();
  for (const [id, channel] of reader.channelsById) {
    const schema = reader.schemasById.get(channel.schemaId);
    if (schema.encoding === 'protobuf') {
      const root = protobuf.Root.fromDescriptor(descriptor.FileDescriptorSet.decode(schema.data));
      types.set(id, root.lookupType(schema.name));
    }
  }
  for await (const m of reader.readMessages()) {
    const channel = reader.channelsById.get(m.channelId);
    const type = types.get(m.channelId);
    messages.push({
      topic: channel.topic, sequence: m.sequence, logTime: m.logTime,
      value: type ? type.toObject(type.decode(m.data)) : JSON.parse(new TextDecoder().decode(m.data)),
    });
  }
  return { reader, messages };
}

try {
  const xformd = start(args.xformd, ['--listen=127.0.0.1:0'], 'xformd');
  const port = await waitFor('xformd serves', () =>
    Number(xformd.err.match(/xformd serving on \S+ \(port (\d+)/)?.[1] ?? 0));
  server = `--server=127.0.0.1:${port}`;

  // A small scene with rotations (a recording carries no scale): two
  // chains and a root.
  const T0 = BigInt(Date.now()) * 1000000n + 1000000000n;
  const stampAt = (k) => String(T0 + BigInt(k) * 50000000n);
  ctl('worlds', 'create', 'rec', '--mode=driven');
  ctl('entities', 'create', 'rec', '1', '--position=1,0,0', '--rotation=0,0,0.3826834,0.9238795');
  ctl('entities', 'create', 'rec', '2', '--parent=1', '--position=0,2,0', '--rotation=0.5,0.5,0.5,0.5');
  ctl('entities', 'create', 'rec', '3', '--parent=2', '--position=0,0,1');
  ctl('entities', 'create', 'rec', '6', '--position=0,-2,0', '--scale=2,1,0.5');
  ctl('entities', 'create', 'rec', '4', '--position=-3,0,0', `--stamp=${stampAt(0)}`, '--end_frame');

  const out = join(dir, 'rec.mcap');
  const watch = start(args.xformctl, [server, 'watch', 'rec', '--verbose', '--json'], 'watch');
  const record = start(args.xformctl, [server, 'record', 'rec', `--out=${out}`, '--frames=7', '--json'], 'record');
  await waitFor('the raw subscriber has the view', () => watch.lines.length > 0);
  await waitFor('the recorder has begun', () => record.lines.some((l) => l.includes('"recording"')));

  // Seven frames, each at its stamp: moves down the chains, a re-parent,
  // a create, a destroy.
  const frames = [
    ['entities', 'set', 'rec', '1', '--position=2,0,0', '--rotation=0,0,0.7071068,0.7071068'],
    ['entities', 'set', 'rec', '2', '--rotation=0,0.3826834,0,0.9238795'],
    ['entities', 'set', 'rec', '3', '--position=0,1,1'],
    ['entities', 'link', 'rec', '3', '4'],
    ['entities', 'create', 'rec', '5', '--parent=3', '--position=0.5,0,0'],
    ['entities', 'destroy', 'rec', '2', '--keep_children'],
    ['entities', 'set', 'rec', '4', '--position=-3,1,0', '--rotation=1,0,0,0'],
  ];
  frames.forEach((command, k) => ctl(...command, `--stamp=${stampAt(k + 1)}`, '--end_frame'));
  check(await record.exited === 0, 'the recorder stops after 7 frames', record.err);
  await waitFor('the raw subscriber saw all 7 frames', () =>
    watch.lines.map(parseLine).filter((l) => !l.snapshot).length >= 7);
  watch.kill('SIGTERM');
  const raw = watch.lines.map(parseLine);

  // ---- the file, read by @mcap/core -------------------------------------
  const { reader, messages } = await readRecording(out);
  const stats = reader.statistics;
  check(reader.chunkIndexes.length >= 1 && stats.chunkCount >= 1, 'the file is chunked and indexed',
    `${stats.chunkCount} chunk(s), ${stats.messageCount} messages`);
  const schema = [...reader.schemasById.values()].find((s) => s.name === 'foxglove.FrameTransforms');
  check(schema?.encoding === 'protobuf', 'its schema is foxglove.FrameTransforms in protobuf');
  const tf = messages.filter((m) => m.topic === '/tf');
  check(tf.length >= 7, 'a /tf message a frame', `${tf.length}`);

  // Each message against the raw subscriber's frame of the same number.
  const tree = new Tree();
  const rawByFrame = new Map(raw.filter((l) => !l.snapshot).map((l) => [l.frame % 2 ** 32, l]));
  let compared = 0;
  for (const m of messages) {
    if (m.topic === '/xform/scene') continue;
    if (m.topic === '/xform/destroyed') {
      tree.remove(m.value.frame_ids);
      continue;
    }
    tree.apply(m.value.transforms);
    const frame = rawByFrame.get(m.sequence);
    if (!frame) continue; // The first: the view, whose frame came before the raw stream's.
    check(m.logTime === frame.stamp, `frame ${frame.frame}: logged at its stamp`, `${m.logTime}`);
    const ts = m.value.transforms[0].timestamp;
    check(BigInt(ts.seconds) * 1000000000n + BigInt(ts.nanos) === frame.stamp,
      `frame ${frame.frame}: its transforms carry the stamp`);
    for (const moved of frame.moved_entities) {
      const world = tree.world(`e${moved.entity}`);
      check(world && near(world, moved.world),
        `frame ${frame.frame}: e${moved.entity}'s world pose as the raw subscriber saw it`,
        `${world?.map((v) => v.toFixed(4))} vs ${moved.world.map((v) => v.toFixed(4))}`);
      ++compared;
    }
    const sent = new Set(m.value.transforms.map((t) => t.child_frame_id));
    const expected = new Set([...frame.moved_entities.map((e) => `e${e.entity}`),
      ...frame.created_entities.map((e) => `e${e}`)]);
    check([...expected].every((id) => sent.has(id)), `frame ${frame.frame}: every changed entity is in it`);
  }
  check(compared >= 10, 'world poses compared', `${compared}`);
  const destroyed = messages.find((m) => m.topic === '/xform/destroyed');
  check(destroyed?.value.frame_ids.join() === 'e2', 'the destroy is recorded', JSON.stringify(destroyed?.value));

  // The scene: each entity a box in its own frame, sent when new (or
  // rescaled); the destroyed deleted.
  const scene = messages.filter((m) => m.topic === '/xform/scene');
  const drawn = scene[0]?.value.entities ?? [];
  check(drawn.map((e) => e.id).sort().join() === 'e1,e2,e3,e4,e6' &&
    drawn.every((e) => e.frame_id === e.id && e.frame_locked && e.cubes.length === 1),
  'the first scene draws every entity, locked to its own frame', drawn.map((e) => e.id).join());
  const box = drawn.find((e) => e.id === 'e6')?.cubes[0].size;
  check(near([box.x, box.y, box.z], [2, 1, 0.5]), 'a box is as large as its entity\'s scale',
    JSON.stringify(box));
  const later = scene.slice(1).map((m) => ({
    ids: (m.value.entities ?? []).map((e) => e.id),
    deleted: (m.value.deletions ?? []).map((d) => d.id),
  }));
  check(JSON.stringify(later) === JSON.stringify([{ ids: ['e5'], deleted: [] }, { ids: [], deleted: ['e2'] }]),
    'then only a created entity and a deletion', JSON.stringify(later));

  // ---- played back --------------------------------------------------------
  ctl('worlds', 'create', 'rec2', '--mode=driven');
  const watch2 = start(args.xformctl, [server, 'watch', 'rec2', '--verbose', '--json'], 'watch rec2');
  await waitFor('rec2 is watched', () => watch2.lines.length > 0);
  const played = JSON.parse(ctl('play', out, '--world=rec2', '--rate=0', '--json'));
  check(played.frames === 8, 'play writes a frame a recorded frame', JSON.stringify(played));
  await waitFor('rec2 watched through every played frame', () =>
    watch2.lines.map(parseLine).filter((l) => !l.snapshot && l.frame >= 1).length >= 8, 20000);
  watch2.kill('SIGTERM');
  const replay = watch2.lines.map(parseLine).filter((l) => !l.snapshot);
  const original = raw.filter((l) => !l.snapshot);
  // The first played frame creates the recorded view; then frame by frame.
  for (let k = 1; k < 8; ++k) {
    const a = original[k - 1];
    const b = replay[k];
    check(a.stamp === b.stamp, `played frame ${k}: the recorded stamp`);
    const worlds = (l) => new Map(l.moved_entities.map((e) => [e.entity, e.world]));
    const wa = worlds(a);
    const wb = worlds(b);
    check([...wa.keys()].sort().join() === [...wb.keys()].sort().join() &&
      [...wa].every(([e, w]) => near(w, wb.get(e))),
    `played frame ${k}: the same world matrices`, `${[...wa.keys()]} vs ${[...wb.keys()]}`);
    check(a.destroyed_entities.join() === b.destroyed_entities.join(), `played frame ${k}: the same destroys`);
  }
  const final = (world) => ctl('entities', 'get', world, '1', '3', '4', '5', '--json')
    .trim().split('\n').map((line) => JSON.parse(line));
  check(JSON.stringify(final('rec').map((e) => e.world.map((v) => v.toFixed(4)))) ===
    JSON.stringify(final('rec2').map((e) => e.world.map((v) => v.toFixed(4)))),
  'the played world ends as the recorded one');

  // ---- refused --------------------------------------------------------------
  const refused = (file, world) => spawnSync(args.xformctl,
    [server, 'play', file, `--world=${world}`, '--rate=0'], { encoding: 'utf8' });
  writeFileSync(join(dir, 'not.mcap'), 'not an mcap file at all');
  let r = refused(join(dir, 'not.mcap'), 'rec3');
  check(r.status === 1 && /DATA_LOSS/.test(r.stderr), 'a file that is not MCAP is refused DATA_LOSS', r.stderr.trim());
  writeFileSync(join(dir, 'cut.mcap'), readFileSync(out).subarray(0, 200));
  r = refused(join(dir, 'cut.mcap'), 'rec4');
  check(r.status === 1 && /DATA_LOSS/.test(r.stderr), 'a truncated file is refused DATA_LOSS', r.stderr.trim());
  r = refused(out, 'rec');
  check(r.status === 1 && /FAILED_PRECONDITION/.test(r.stderr), 'a world not empty is refused', r.stderr.trim());
  finish(null, () => rmSync(dir, { recursive: true, force: true }));
} catch (error) {
  finish(error, () => rmSync(dir, { recursive: true, force: true }));
}
