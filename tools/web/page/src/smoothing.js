// Draws a tab's view a little in the past, interpolated between the frames
// it was sent, so that an entity moving at constant speed moves on screen
// at constant speed however unevenly the frames arrive (a rate-limited tab,
// a busy network): snapshot interpolation, as the C++ client's Interpolator
// (include/xform/interpolator.h) does for a Mirror, and with its rules.
//
// The render clock: each message's stamp (when its poses were true, on the
// world's writers' clock) and its arrival give the clock offset, averaged
// over the last 64 messages. The page draws at `now - offset - delay`,
// where the delay is fixed (?delay=MS) or adaptive: the mean interval
// between messages plus 2.5 times the spread of their arrivals around the
// offset, at most MAX_DELAY_MS. The clock runs at the page's own rate and
// is steered toward its target by at most 0.5% of the time passed (what is
// drawn keeps its speed), or jumps there when more than 250 ms off.
//
// Each entity keeps the poses it was sent, with their stamps (at most
// MAX_SAMPLES). A pose held from its last sample until the previous
// message's stamp (it did not change in between); between two samples the
// pose is interpolated (position and scale lerped, rotation slerped). A
// re-parent, a resync, or a gap of more than MAX_GAP_MS between messages
// is a jump: the pose before holds until the stamp that jumps. A created
// entity is drawn at once, a destroyed one removed at once.
//
// Costs: a message O(entities in it); a drawn frame O(entities still
// between samples), not O(view).

import * as THREE from 'three';

const MAX_DELAY_MS = 300;
const MAX_GAP_MS = 500;
const MAX_SAMPLES = 16;
const FRAMES_MEASURED = 64;
const FRAMES_BEFORE_STEERING = 8;
const JITTER_FACTOR = 2.5;
const MAX_STEER = 0.005;
const MAX_STEER_GAP_MS = 250;
// A jump's hold ends this long before the stamp that jumps.
const JUMP_MS = 1e-3;

// Maps the page's clock to the stamps' and keeps the delay.
export class RenderClock {
  constructor({ fixedDelayMs = 0 } = {}) {
    this.fixedDelayMs = fixedDelayMs;
    this.reset();
  }

  reset() {
    this.arrivals = []; // { at, stamp }, oldest first
    this.started = false;
    this.clockStamp = 0;
    this.clockAt = 0;
  }

  get ready() { return this.arrivals.length >= 2; }

  note(at, stamp) {
    const last = this.arrivals[this.arrivals.length - 1];
    if (last && stamp <= last.stamp) return;
    this.arrivals.push({ at, stamp });
    if (this.arrivals.length > FRAMES_MEASURED) this.arrivals.shift();
  }

  offset() {
    let sum = 0;
    for (const a of this.arrivals) sum += a.at - a.stamp;
    return sum / this.arrivals.length;
  }

  delay() {
    if (this.fixedDelayMs > 0) return this.fixedDelayMs;
    const n = this.arrivals.length;
    if (n < 2) return 0;
    const interval = (this.arrivals[n - 1].stamp - this.arrivals[0].stamp) / (n - 1);
    const offset = this.offset();
    let spread = 0;
    for (const a of this.arrivals) spread += (a.at - a.stamp - offset) ** 2;
    spread = Math.sqrt(spread / n);
    return Math.min(MAX_DELAY_MS, interval + JITTER_FACTOR * spread);
  }

  // The stamp to draw at `now` (null until two messages have come).
  renderStamp(now) {
    if (!this.ready) return null;
    const target = now - this.offset() - this.delay();
    if (!this.started) {
      this.started = this.arrivals.length >= FRAMES_BEFORE_STEERING;
      this.clockStamp = target;
      this.clockAt = now;
      return target;
    }
    const elapsed = now - this.clockAt;
    const predicted = this.clockStamp + elapsed;
    const error = target - predicted;
    const step = MAX_STEER * Math.max(0, elapsed);
    this.clockStamp = Math.abs(error) > MAX_STEER_GAP_MS
      ? target : predicted + Math.min(step, Math.max(-step, error));
    this.clockAt = now;
    return this.clockStamp;
  }
}

// One pose an entity was sent: its stamp, the exact matrix (three.js's
// column-major 4x4 elements) and its parts to interpolate.
function sampleOf(stamp, elements) {
  const matrix = new THREE.Matrix4().fromArray(elements);
  const sample = {
    stamp, elements: Float32Array.from(elements),
    position: new THREE.Vector3(), rotation: new THREE.Quaternion(),
    scale: new THREE.Vector3(),
  };
  matrix.decompose(sample.position, sample.rotation, sample.scale);
  return sample;
}

export class Smoothing {
  // place(id, elements): draws `id` at a column-major 4x4.
  constructor(place, { enabled = true, fixedDelayMs = 0 } = {}) {
    this.place = place;
    this.enabled = enabled;
    this.clock = new RenderClock({ fixedDelayMs });
    this.samples = new Map(); // id -> samples, oldest first
    this.active = new Set(); // ids with a pose still to reach
    this.stamp = 0; // The message being applied.
    this.previousStamp = 0; // The one before it.
    this.resynced = false;
    this.lastRenderStamp = null;
    this.scratch = {
      position: new THREE.Vector3(), rotation: new THREE.Quaternion(),
      scale: new THREE.Vector3(), matrix: new THREE.Matrix4(),
    };
  }

  clear() {
    this.samples.clear();
    this.active.clear();
    this.clock.reset();
    this.stamp = 0;
    this.previousStamp = 0;
    this.lastRenderStamp = null;
  }

  // Before a message's entities: its stamp and when it came.
  begin(stamp, arrivedAt, resynced) {
    this.previousStamp = this.stamp;
    this.stamp = stamp;
    this.resynced = resynced;
    if (this.enabled) this.clock.note(arrivedAt, stamp);
  }

  // An entity of the message at `elements`; `jump` when it was re-parented.
  // True when it is drawn later, by render(); false when the caller draws
  // it now (new, smoothing off, or the clock not yet known).
  take(id, elements, jump) {
    if (!this.enabled) return false;
    const sample = sampleOf(this.stamp, elements);
    const samples = this.samples.get(id);
    if (!samples || !this.clock.ready) {
      this.samples.set(id, [sample]);
      this.active.delete(id);
      return false;
    }
    const last = samples[samples.length - 1];
    if (sample.stamp <= last.stamp) {
      // The same stamp again (a resync's snapshot): the newer pose.
      samples[samples.length - 1] = sample;
    } else {
      const jumps = jump || this.resynced ||
        sample.stamp - this.previousStamp > MAX_GAP_MS;
      const holdUntil = jumps ? sample.stamp - JUMP_MS : this.previousStamp;
      if (holdUntil > last.stamp) samples.push({ ...last, stamp: holdUntil });
      samples.push(sample);
      if (samples.length > MAX_SAMPLES) samples.splice(0, samples.length - MAX_SAMPLES);
    }
    this.active.add(id);
    return true;
  }

  forget(id) {
    this.samples.delete(id);
    this.active.delete(id);
  }

  // Draws every entity still between samples at the render clock's stamp.
  render(now) {
    const t = this.enabled ? this.clock.renderStamp(now) : null;
    this.lastRenderStamp = t;
    if (t === null) return;
    const s = this.scratch;
    for (const id of this.active) {
      const samples = this.samples.get(id);
      while (samples.length >= 2 && samples[1].stamp <= t) samples.shift();
      const [a, b] = samples;
      if (!b) {
        this.place(id, a.elements);
        this.active.delete(id);
      } else if (t <= a.stamp) {
        this.place(id, a.elements);
      } else {
        const f = (t - a.stamp) / (b.stamp - a.stamp);
        s.position.lerpVectors(a.position, b.position, f);
        s.scale.lerpVectors(a.scale, b.scale, f);
        s.rotation.slerpQuaternions(a.rotation, b.rotation, f);
        s.matrix.compose(s.position, s.rotation, s.scale);
        this.place(id, s.matrix.elements);
      }
    }
  }

  // For the overlay: the delay drawn behind the newest message, or null.
  delay() {
    return this.enabled && this.clock.ready ? this.clock.delay() : null;
  }
}
