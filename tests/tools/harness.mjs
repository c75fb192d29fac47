// What the Node.js tests of xform's tools share: checks that print as they
// pass, child processes whose output is kept, waits with deadlines, and
// rigid poses composed along a transform tree (as Foxglove composes
// foxglove.FrameTransforms).

import { spawn } from 'node:child_process';

export const children = [];
export const state = { failed: false };

export function check(condition, what, detail = '') {
  if (!condition) {
    state.failed = true;
    throw new Error(`FAILED: ${what}${detail ? ` (${detail})` : ''}`);
  }
  console.log(`ok: ${what}${detail ? ` (${detail})` : ''}`);
}

// A process whose stdout lines and stderr are kept.
export function start(binary, flags, name) {
  const child = spawn(binary, flags, { stdio: ['ignore', 'pipe', 'pipe'] });
  child.name = name;
  child.lines = [];
  child.err = '';
  let partial = '';
  child.stdout.on('data', (chunk) => {
    const parts = (partial + chunk).split('\n');
    partial = parts.pop();
    child.lines.push(...parts.filter((l) => l.length > 0));
  });
  child.stderr.on('data', (chunk) => { child.err += chunk; });
  child.exited = new Promise((resolve) => child.on('exit', (code) => resolve(code)));
  children.push(child);
  return child;
}

export async function waitFor(what, predicate, timeoutMs = 15000) {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const value = await predicate();
    if (value) return value;
    if (Date.now() > deadline) check(false, what, 'timed out');
    await new Promise((r) => setTimeout(r, 20));
  }
}

// Ends a test: what failed and the children's last words, then the exit.
export function finish(error, cleanup = () => {}) {
  if (error) {
    state.failed = true;
    console.log(error.stack ?? error.message);
    for (const child of children) {
      console.log(`--- ${child.name} (tail) ---\n${child.err.slice(-1500)}\n${child.lines.slice(-5).join('\n')}`);
    }
  }
  for (const child of children) child.kill('SIGKILL');
  cleanup();
  console.log(state.failed ? 'FAIL' : 'PASS');
  process.exit(state.failed ? 1 : 0);
}

// ---- rigid poses: [translation, quaternion (x, y, z, w)] ------------------
export const qmul = (a, b) => [
  a[3] * b[0] + a[0] * b[3] + a[1] * b[2] - a[2] * b[1],
  a[3] * b[1] - a[0] * b[2] + a[1] * b[3] + a[2] * b[0],
  a[3] * b[2] + a[0] * b[1] - a[1] * b[0] + a[2] * b[3],
  a[3] * b[3] - a[0] * b[0] - a[1] * b[1] - a[2] * b[2],
];
export const rotate = (q, v) => {
  const p = qmul(qmul(q, [...v, 0]), [-q[0], -q[1], -q[2], q[3]]);
  return p.slice(0, 3);
};
// The 3x4 row-major world matrix of a rigid pose.
export function matrixOf([t, q]) {
  const cols = [[1, 0, 0], [0, 1, 0], [0, 0, 1]].map((axis) => rotate(q, axis));
  return [0, 1, 2].flatMap((row) => [cols[0][row], cols[1][row], cols[2][row], t[row]]);
}

// foxglove.FrameTransforms applied in turn: each frame's parent and pose
// in its parent's frame, and any frame's world matrix.
export class Tree {
  constructor() { this.local = new Map(); }
  apply(transforms) {
    for (const t of transforms) {
      this.local.set(t.child_frame_id, {
        parent: t.parent_frame_id,
        pose: [[t.translation?.x ?? 0, t.translation?.y ?? 0, t.translation?.z ?? 0],
          [t.rotation?.x ?? 0, t.rotation?.y ?? 0, t.rotation?.z ?? 0, t.rotation?.w ?? 0]],
      });
    }
  }
  remove(frameIds) { for (const id of frameIds) this.local.delete(id); }
  clear() { this.local.clear(); }
  world(frameId) {
    let pose = [[0, 0, 0], [0, 0, 0, 1]];
    for (let id = frameId, guard = 0; id !== 'world' && guard < 1000; ++guard) {
      const link = this.local.get(id);
      if (!link) return null;
      pose = [rotate(link.pose[1], pose[0]).map((v, i) => v + link.pose[0][i]),
        qmul(link.pose[1], pose[1])];
      id = link.parent;
    }
    return matrixOf(pose);
  }
}

export const near = (a, b, tolerance = 1e-4) =>
  a.length === b.length && a.every((v, i) => Math.abs(v - b[i]) < tolerance);
