// Writes foxglove's message schemas as .proto files, with foxglove's own
// generator (@foxglove/schemas/internal's generateProto, the one that makes
// the .proto files foxglove publishes), for protoc to compile:
//
//   node gen_protos.js OUT_DIR Name...
//
// writes OUT_DIR/foxglove/<Name>.proto for each name and every foxglove
// schema it imports, and fails if that is more than the names given (the
// build lists its outputs).

const fs = require('node:fs');
const path = require('node:path');
const {
  generateProto, foxgloveMessageSchemas, foxgloveEnumSchemas,
} = require('@foxglove/schemas/internal');

const [out, ...names] = process.argv.slice(2);
const wanted = new Set(names);
fs.mkdirSync(path.join(out, 'foxglove'), { recursive: true });
for (const name of names) {
  const schema = foxgloveMessageSchemas[name];
  if (!schema) throw new Error(`no foxglove schema ${name}`);
  const enums = Object.values(foxgloveEnumSchemas)
    .filter((e) => e.parentSchemaName === name);
  const text = generateProto(schema, enums);
  for (const [, imported] of text.matchAll(/import "foxglove\/(\w+)\.proto"/g)) {
    if (!wanted.has(imported)) {
      throw new Error(`${name} imports foxglove/${imported}.proto: list it too`);
    }
  }
  const file = path.join(out, 'foxglove', `${name}.proto`);
  // Only when changed: protoc's outputs depend on these files' times.
  if (!fs.existsSync(file) || fs.readFileSync(file, 'utf8') !== text) {
    fs.writeFileSync(file, text);
  }
}
