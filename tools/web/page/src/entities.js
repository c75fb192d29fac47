// The entities of one view, drawn as one InstancedMesh of unit boxes at
// their world matrices (so a box takes its entity's position, rotation and
// scale: a building's footprint and height, a drone's flat body), with
// optional lines to their parents. Moves go through the page's Smoothing
// (smoothing.js), which draws them a little later. Storage is packed: an
// entity is an instance index; removing swaps the last one into its place,
// so every update is O(entities in the message).
//
// A software renderer (headless Chromium's SwiftShader) pays about 3 us a
// triangle however small: 10,000 entities drew at 4 frames/s. There (mode
// `auto`) a view of more than SOFTWARE_BOX_LIMIT entities is drawn as
// round points instead, one vertex an entity, as wide as its scale; the
// InstancedMesh still holds the matrices, undrawn.

import * as THREE from 'three';

// Colour by depth below the nearest root in view: roots orange, their
// children cyan, grandchildren magenta, ...
const PALETTE = [0xff8800, 0x00c8ff, 0xff3fb0, 0x9cff3f, 0xffe14a, 0x8f7bff]
  .map((hex) => new THREE.Color(hex));
const MAX_DEPTH_WALK = 64;
// Boxes a software renderer still draws at a usable rate (12 triangles
// each).
const SOFTWARE_BOX_LIMIT = 2000;

// Every entity as one round point at its position, as wide as its shape
// at its scale: one vertex an entity, for software renderers.
class EntityPoints {
  constructor() {
    this.material = new THREE.ShaderMaterial({
      uniforms: { pixelsPerUnit: { value: 500 } },
      vertexShader: `
        attribute float size;
        attribute vec3 entityColor;
        uniform float pixelsPerUnit;
        varying vec3 vColor;
        void main() {
          vec4 view = modelViewMatrix * vec4(position, 1.0);
          gl_Position = projectionMatrix * view;
          gl_PointSize = max(2.0, size * pixelsPerUnit / -view.z);
          vColor = entityColor;
        }`,
      fragmentShader: `
        varying vec3 vColor;
        void main() {
          vec2 d = gl_PointCoord - 0.5;
          float r2 = dot(d, d);
          if (r2 > 0.25) discard;
          gl_FragColor = vec4(vColor * (0.7 + 1.2 * (0.25 - r2)), 1.0);
        }`,
    });
    this.object = null;
  }

  grow(capacity, scene) {
    const geometry = new THREE.BufferGeometry();
    const attributes = { position: 3, size: 1, entityColor: 3 };
    for (const [name, width] of Object.entries(attributes)) {
      const array = new Float32Array(capacity * width);
      if (this.object) array.set(this.object.geometry.attributes[name].array);
      geometry.setAttribute(name,
        new THREE.BufferAttribute(array, width).setUsage(THREE.DynamicDrawUsage));
    }
    if (this.object) {
      scene.remove(this.object);
      this.object.geometry.dispose();
    }
    this.object = new THREE.Points(geometry, this.material);
    this.object.frustumCulled = false;
    scene.add(this.object);
  }

  // Entity i at its 4x4 (column-major) matrix in m[o..o+15].
  place(i, m, o) {
    const a = this.object.geometry.attributes;
    a.position.array.set([m[o + 12], m[o + 13], m[o + 14]], 3 * i);
    const axis = (k) => Math.hypot(m[o + k], m[o + k + 1], m[o + k + 2]);
    a.size.array[i] = Math.max(axis(0), axis(4), axis(8));
  }

  color(i, c) {
    this.object.geometry.attributes.entityColor.array.set([c.r, c.g, c.b], 3 * i);
  }

  move(from, to) {
    for (const a of Object.values(this.object.geometry.attributes)) {
      a.array.copyWithin(to * a.itemSize, from * a.itemSize, (from + 1) * a.itemSize);
    }
  }

  update(count) {
    this.object.geometry.setDrawRange(0, count);
    for (const a of Object.values(this.object.geometry.attributes)) a.needsUpdate = true;
  }

  setViewport(heightPixels, fovDegrees) {
    this.material.uniforms.pixelsPerUnit.value =
      heightPixels / (2 * Math.tan(THREE.MathUtils.degToRad(fovDegrees) / 2));
  }
}

export class Entities {
  // mode: 'boxes', 'points', or 'auto' (boxes up to SOFTWARE_BOX_LIMIT,
  // then points).
  constructor(scene, { mode = 'boxes' } = {}) {
    this.scene = scene;
    this.mode = mode;
    this.geometry = new THREE.BoxGeometry(1, 1, 1);
    this.material = new THREE.MeshLambertMaterial();
    this.points = mode === 'boxes' ? null : new EntityPoints();
    this.capacity = 0;
    this.count = 0;
    this.index = new Map(); // id -> instance index
    this.ids = new Float64Array(0);
    this.parentOf = new Map(); // id -> parent id (0: a root)
    this.mesh = null;
    this.lines = null;
    this.showLines = true;
    this.dirty = false; // place() wrote matrices not yet uploaded.
    this.grow(1024);
  }

  grow(capacity) {
    const mesh = new THREE.InstancedMesh(this.geometry, this.material, capacity);
    mesh.frustumCulled = false; // Its bounds change every frame.
    mesh.instanceMatrix.setUsage(THREE.DynamicDrawUsage);
    mesh.setColorAt(0, PALETTE[0]); // Makes instanceColor.
    mesh.instanceColor.setUsage(THREE.DynamicDrawUsage);
    const positions = new Float32Array(capacity * 6);
    const ids = new Float64Array(capacity);
    if (this.mesh) {
      mesh.instanceMatrix.array.set(this.mesh.instanceMatrix.array);
      mesh.instanceColor.array.set(this.mesh.instanceColor.array);
      positions.set(this.lines.geometry.attributes.position.array);
      ids.set(this.ids);
      this.scene.remove(this.mesh, this.lines);
      this.mesh.dispose();
      this.lines.geometry.dispose();
    }
    const lineGeometry = new THREE.BufferGeometry();
    lineGeometry.setAttribute('position',
      new THREE.BufferAttribute(positions, 3).setUsage(THREE.DynamicDrawUsage));
    const lines = new THREE.LineSegments(lineGeometry,
      new THREE.LineBasicMaterial({ color: 0x7f8a9a, transparent: true, opacity: 0.35 }));
    lines.frustumCulled = false;
    lines.visible = this.showLines;
    this.mesh = mesh;
    this.lines = lines;
    this.ids = ids;
    this.capacity = capacity;
    this.mesh.count = this.count;
    lineGeometry.setDrawRange(0, this.count * 2);
    this.scene.add(mesh, lines);
    if (this.points) {
      this.points.grow(capacity, this.scene);
      this.points.update(this.count);
    }
    this.choose();
  }

  // What draws the view now: the boxes or the points.
  drawing() {
    if (this.mode === 'auto') return this.count > SOFTWARE_BOX_LIMIT ? 'points' : 'boxes';
    return this.mode;
  }

  choose() {
    const points = this.drawing() === 'points';
    this.mesh.visible = !points;
    if (this.points) this.points.object.visible = points;
  }

  clear() {
    this.index.clear();
    this.parentOf.clear();
    this.count = 0;
    this.mesh.count = 0;
    this.lines.geometry.setDrawRange(0, 0);
    this.points?.update(0);
  }

  setLines(visible) {
    this.showLines = visible;
    this.lines.visible = visible;
  }

  depth(id) {
    let depth = 0;
    for (let p = this.parentOf.get(id); p && depth < MAX_DEPTH_WALK;
      p = this.parentOf.get(p)) {
      ++depth;
    }
    return depth;
  }

  // Applies one decoded frame (frame.js). With `smoothing` (smoothing.js),
  // a move it takes is drawn later, by its render(); the rest now.
  apply(frame, smoothing = null) {
    const { ids, parents, worlds, destroyed } = frame;
    for (let k = 0; k < destroyed.length; ++k) {
      this.remove(destroyed[k]);
      smoothing?.forget(destroyed[k]);
    }
    if (this.count + ids.length > this.capacity) {
      let capacity = this.capacity;
      while (capacity < this.count + ids.length) capacity *= 2;
      this.grow(capacity);
    }
    const elements = new Float32Array(16);
    const recolor = [];
    const placed = [];
    for (let k = 0; k < ids.length; ++k) {
      const id = ids[k];
      let i = this.index.get(id);
      let reparented = false;
      if (i === undefined) {
        i = this.count++;
        this.index.set(id, i);
        this.ids[i] = id;
        this.parentOf.set(id, parents[k]);
        recolor.push(id);
        smoothing?.forget(id);
      } else if (this.parentOf.get(id) !== parents[k]) {
        this.parentOf.set(id, parents[k]);
        recolor.push(id);
        reparented = true;
      }
      // Row-major 3x4 to three.js's column-major 4x4.
      const w = 12 * k;
      elements[0] = worlds[w]; elements[1] = worlds[w + 4];
      elements[2] = worlds[w + 8]; elements[3] = 0;
      elements[4] = worlds[w + 1]; elements[5] = worlds[w + 5];
      elements[6] = worlds[w + 9]; elements[7] = 0;
      elements[8] = worlds[w + 2]; elements[9] = worlds[w + 6];
      elements[10] = worlds[w + 10]; elements[11] = 0;
      elements[12] = worlds[w + 3]; elements[13] = worlds[w + 7];
      elements[14] = worlds[w + 11]; elements[15] = 1;
      if (smoothing?.take(id, elements, reparented)) continue;
      this.mesh.instanceMatrix.array.set(elements, 16 * i);
      placed.push(i);
    }
    // Colours and lines after every matrix is in: a child's line ends at
    // its parent's new position whatever the order of the message.
    for (const id of recolor) {
      const color = PALETTE[Math.min(this.depth(id), PALETTE.length - 1)];
      this.mesh.setColorAt(this.index.get(id), color);
      this.points?.color(this.index.get(id), color);
    }
    for (const i of placed) {
      this.updateLine(i);
      this.points?.place(i, this.mesh.instanceMatrix.array, 16 * i);
    }
    this.mesh.count = this.count;
    if (recolor.length) this.mesh.instanceColor.needsUpdate = true;
    this.lines.geometry.setDrawRange(0, this.count * 2);
    this.changed();
  }

  // Draws `id` at a column-major 4x4 (Smoothing's place).
  place(id, elements) {
    const i = this.index.get(id);
    if (i === undefined) return;
    this.mesh.instanceMatrix.array.set(elements, 16 * i);
    this.updateLine(i);
    this.points?.place(i, this.mesh.instanceMatrix.array, 16 * i);
    this.dirty = true;
  }

  // Uploads what apply() and place() wrote.
  changed() {
    this.choose();
    this.points?.update(this.count);
    this.mesh.instanceMatrix.needsUpdate = true;
    this.lines.geometry.attributes.position.needsUpdate = true;
    this.dirty = false;
  }

  updateLine(i) {
    const matrices = this.mesh.instanceMatrix.array;
    const line = this.lines.geometry.attributes.position.array;
    const o = 16 * i;
    const parent = this.index.get(this.parentOf.get(this.ids[i]));
    const p = parent === undefined ? o : 16 * parent;
    line[6 * i] = matrices[o + 12];
    line[6 * i + 1] = matrices[o + 13];
    line[6 * i + 2] = matrices[o + 14];
    line[6 * i + 3] = matrices[p + 12];
    line[6 * i + 4] = matrices[p + 13];
    line[6 * i + 5] = matrices[p + 14];
  }

  remove(id) {
    const i = this.index.get(id);
    if (i === undefined) return;
    const last = --this.count;
    this.index.delete(id);
    this.parentOf.delete(id);
    if (i !== last) {
      const moved = this.ids[last];
      this.ids[i] = moved;
      this.index.set(moved, i);
      this.mesh.instanceMatrix.array.copyWithin(16 * i, 16 * last, 16 * last + 16);
      this.mesh.instanceColor.array.copyWithin(3 * i, 3 * last, 3 * last + 3);
      const line = this.lines.geometry.attributes.position.array;
      line.copyWithin(6 * i, 6 * last, 6 * last + 6);
      this.points?.move(last, i);
    }
    this.mesh.instanceColor.needsUpdate = true;
    this.points?.update(this.count);
  }

  // An entity's world matrix as 12 floats, row-major, or null.
  world(id) {
    const i = this.index.get(id);
    if (i === undefined) return null;
    const m = this.mesh.instanceMatrix.array;
    const o = 16 * i;
    return [m[o], m[o + 4], m[o + 8], m[o + 12],
      m[o + 1], m[o + 5], m[o + 9], m[o + 13],
      m[o + 2], m[o + 6], m[o + 10], m[o + 14]];
  }

  // The box around every entity's position.
  bounds() {
    const box = new THREE.Box3();
    const m = this.mesh.instanceMatrix.array;
    const v = new THREE.Vector3();
    for (let i = 0; i < this.count; ++i) {
      box.expandByPoint(v.set(m[16 * i + 12], m[16 * i + 13], m[16 * i + 14]));
    }
    return box;
  }

  // The entity under a ray, or null.
  pick(raycaster) {
    if (this.count === 0) return null;
    this.mesh.computeBoundingSphere();
    const hits = raycaster.intersectObject(this.mesh, false);
    return hits.length ? this.ids[hits[0].instanceId] : null;
  }
}
