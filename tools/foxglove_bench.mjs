// What xform-web's Foxglove endpoint costs: xformd, xform-load's writer
// moving --move of an --entities world at --hz, xform-web, and --clients
// Foxglove clients (npm @foxglove/ws-protocol's FoxgloveClient on ws,
// from tools/foxglove's node_modules) subscribed to the world's
// FrameTransforms. Over --seconds it reports, per client and overall:
// messages and transforms a second, publish-to-client latency (the
// message's stamp, xformd's clock at the frame, to its receipt here;
// p50/p99/max), xform-web's CPU per client (/proc), and bytes per
// transform beside what foxglove_bridge sends for the same links: a
// tf2_msgs/TFMessage of one TransformStamped per link (ROS 1 encoding,
// its header's frame ids as ours) in a Message Data frame each. Not run
// in CI.
//
//   node tools/foxglove_bench.mjs --build=build [--entities=10000]
//       [--move=10000] [--hz=60] [--clients=8] [--seconds=10]

import { createRequire } from 'node:module';
import { readFileSync } from 'node:fs';
import { join, resolve } from 'node:path';

import { finish, start, waitFor } from '../tests/tools/harness.mjs';

const args = {
  build: 'build', entities: '10000', move: '10000', hz: '60', clients: '8', seconds: '10',
  ...Object.fromEntries(process.argv.slice(2).map((a) => {
    const [key, ...value] = a.replace(/^--/, '').split('=');
    return [key, value.join('=')];
  })),
};
const build = resolve(args.build);
const require = createRequire(join(build, 'tools/foxglove/node_modules/noop.js'));
const { FoxgloveClient } = require('@foxglove/ws-protocol');
const WebSocket = require('ws');
const protobuf = require('protobufjs');
const descriptor = require('protobufjs/ext/descriptor');

// utime + stime of a process, in seconds.
function cpuSeconds(pid) {
  const fields = readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1].split(' ');
  return (Number(fields[11]) + Number(fields[12])) / 100;
}
const percentile = (sorted, p) => sorted[Math.min(sorted.length - 1, Math.floor(p * sorted.length))];

// One client: latencies of every message, and a decoded sample for sizes.
function client(port, stats) {
  const ws = new WebSocket(`ws://127.0.0.1:${port}/`, [FoxgloveClient.SUPPORTED_SUBPROTOCOL]);
  const fox = new FoxgloveClient({ ws });
  let type = null;
  let subscription = -1;
  fox.on('advertise', (channels) => {
    const tf = channels.find((c) => c.topic === '/xform/bench/tf');
    if (!tf) return;
    type = protobuf.Root.fromDescriptor(descriptor.FileDescriptorSet.decode(
      Buffer.from(tf.schema, 'base64'))).lookupType(tf.schemaName);
    subscription = fox.subscribe(tf.id);
  });
  fox.on('message', ({ subscriptionId, timestamp, data }) => {
    if (subscriptionId !== subscription || !stats.measuring) return;
    const now = BigInt(Date.now()) * 1000000n;
    stats.latencies.push(Number(now - timestamp) / 1e6);
    stats.messages += 1;
    stats.bytes += data.byteLength + 13;
    // Decoding every message would make this process the bottleneck: one
    // in ten is decoded for the transforms' count and sizes.
    if (stats.messages % 10 === 1) {
      const m = type.decode(new Uint8Array(data.buffer, data.byteOffset, data.byteLength));
      stats.sampled.messages += 1;
      stats.sampled.bytes += data.byteLength + 13;
      stats.sampled.transforms += m.transforms.length;
      // foxglove_bridge, ROS 1: per link a message of 13 bytes' header and
      // a TFMessage: array length 4; header seq 4, stamp 8, frame_id 4+n;
      // child_frame_id 4+n; translation 3 and rotation 4 float64.
      for (const t of m.transforms) {
        stats.sampled.bridge += 13 + 4 + 4 + 8 + 4 + t.parent_frame_id.length +
          4 + t.child_frame_id.length + 7 * 8;
      }
    }
  });
  return fox;
}

async function main() {
  const xformd = start(join(build, 'server/xformd'), ['--listen=127.0.0.1:0'], 'xformd');
  const port = await waitFor('xformd serves', () =>
    Number(xformd.err.match(/xformd serving on \S+ \(port (\d+)/)?.[1] ?? 0));
  const seconds = Number(args.seconds);
  start(join(build, 'tools/xform-load'), [`--server=127.0.0.1:${port}`, '--world=bench',
    `--entities=${args.entities}`, `--move=${args.move}`, `--hz=${args.hz}`,
    '--frame_mode=driven', '--subscribers=1', `--seconds=${seconds + 60}`], 'xform-load');
  const web = start(join(build, 'tools/web/xform-web'), [`--server=127.0.0.1:${port}`,
    '--listen=127.0.0.1:0', '--foxglove_listen=127.0.0.1:0',
    `--web_root=${join(build, 'tools/web/page/dist')}`, ...(args.web_flags ? args.web_flags.split(' ') : [])], 'xform-web');
  const fox = await waitFor('xform-web serves Foxglove', () =>
    Number(web.err.match(/Foxglove at \S+ \(port (\d+)/)?.[1] ?? 0));
  const all = [];
  for (let i = 0; i < Number(args.clients); ++i) {
    const stats = { measuring: false, latencies: [], messages: 0, bytes: 0,
      sampled: { messages: 0, bytes: 0, transforms: 0, bridge: 0 } };
    all.push({ stats, fox: client(fox, stats) });
  }
  await waitFor('the world is built and streaming', () => {
    for (const c of all) c.stats.measuring = true;
    return all.every((c) => c.stats.messages > 5);
  }, 120000);
  for (const c of all) Object.assign(c.stats, { latencies: [], messages: 0, bytes: 0 });
  const cpu0 = cpuSeconds(web.pid);
  const self0 = process.cpuUsage();
  const t0 = Date.now();
  await new Promise((r) => setTimeout(r, seconds * 1000));
  const elapsed = (Date.now() - t0) / 1000;
  const cpu = cpuSeconds(web.pid) - cpu0;
  const self = process.cpuUsage(self0);
  for (const c of all) c.stats.measuring = false;

  const latencies = all.flatMap((c) => c.stats.latencies).sort((a, b) => a - b);
  const sampled = all.reduce((s, c) => ({
    bytes: s.bytes + c.stats.sampled.bytes, transforms: s.transforms + c.stats.sampled.transforms,
    bridge: s.bridge + c.stats.sampled.bridge, messages: s.messages + c.stats.sampled.messages,
  }), { bytes: 0, transforms: 0, bridge: 0, messages: 0 });
  const perMessage = sampled.transforms / sampled.messages;
  all.forEach((c, i) => {
    const l = c.stats.latencies.sort((a, b) => a - b);
    console.log(`client ${i}: ${(c.stats.messages / elapsed).toFixed(1)} messages/s, ` +
      `${(c.stats.bytes / elapsed / 1e6).toFixed(2)} MB/s, latency p50 ${percentile(l, 0.5).toFixed(2)} ms ` +
      `p99 ${percentile(l, 0.99).toFixed(2)} ms`);
  });
  console.log(`all ${all.length} clients: ${(latencies.length / elapsed).toFixed(1)} messages/s, ` +
    `about ${(latencies.length / elapsed * perMessage).toFixed(0)} transforms/s; publish-to-client ` +
    `p50 ${percentile(latencies, 0.5).toFixed(2)} ms, p99 ${percentile(latencies, 0.99).toFixed(2)} ms, ` +
    `max ${latencies.at(-1).toFixed(2)} ms`);
  console.log(`xform-web: ${(cpu / elapsed * 100).toFixed(1)}% of a core, ` +
    `${(cpu / elapsed * 100 / all.length).toFixed(1)}% per client; these clients (one Node.js ` +
    `process): ${((self.user + self.system) / 1e4 / elapsed).toFixed(1)}% of a core`);
  console.log(`bytes per transform: ${(sampled.bytes / sampled.transforms).toFixed(1)} ` +
    `(${perMessage.toFixed(0)} a message); foxglove_bridge, a message per link: ` +
    `${(sampled.bridge / sampled.transforms).toFixed(1)}`);
  for (const c of all) c.fox.close();
}

try {
  await main();
  finish(null);
} catch (error) {
  finish(error);
}
