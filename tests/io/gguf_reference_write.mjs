// SPDX-License-Identifier: Apache-2.0
// A GGUF file written by another implementation: Hugging Face's JavaScript serializer (npm
// @huggingface/gguf, written by others) writes metadata of every value type (its serializer has
// no nested arrays) into OUT.gguf, and prints what it wrote as JSON in the form
// gguf_reference.mjs uses, for tessel's reader to be compared with.
// Usage: node gguf_reference_write.mjs PACKAGE_DIR OUT.gguf
import { writeFileSync } from "node:fs";
import { pathToFileURL } from "node:url";

const [packageDir, out] = process.argv.slice(2);
const { serializeGgufMetadata, GGUFValueType: T } = await import(
  pathToFileURL(`${packageDir}/dist/index.mjs`).href
);

const entries = {
  "general.architecture": { value: "llama", type: T.STRING },
  "general.alignment": { value: 64, type: T.UINT32 },
  "ref.u8": { value: 250, type: T.UINT8 },
  "ref.i8": { value: -7, type: T.INT8 },
  "ref.u16": { value: 65535, type: T.UINT16 },
  "ref.i16": { value: -32768, type: T.INT16 },
  "ref.u32": { value: 4294967295, type: T.UINT32 },
  "ref.i32": { value: -2147483648, type: T.INT32 },
  "ref.f32": { value: 0.25, type: T.FLOAT32 },
  "ref.bool": { value: false, type: T.BOOL },
  "ref.string": { value: "gr\u00fc\u00df \u2581 <0x0A>", type: T.STRING },
  "ref.u64": { value: 18446744073709551615n, type: T.UINT64 },
  "ref.i64": { value: -9223372036854775808n, type: T.INT64 },
  "ref.f64": { value: -1.5e-300, type: T.FLOAT64 },
  "ref.tokens": { value: ["<s>", "", "\u2581the"], type: T.ARRAY, subType: T.STRING },
  "ref.scores": { value: [0, -1.5, 3.25], type: T.ARRAY, subType: T.FLOAT32 },
  "ref.types": { value: [1, 3, 6], type: T.ARRAY, subType: T.INT32 },
  "ref.empty": { value: [], type: T.ARRAY, subType: T.UINT64 },
};
const typed = {
  version: { value: 3, type: T.UINT32 },
  tensor_count: { value: 0n, type: T.UINT64 },
  kv_count: { value: BigInt(Object.keys(entries).length), type: T.UINT64 },
  ...entries,
};
writeFileSync(out, serializeGgufMetadata(typed, { alignment: 64 }));

const canonical = (v) => {
  if (typeof v === "bigint") return v.toString();
  if (Array.isArray(v)) return v.map(canonical);
  if (typeof v === "number" && Number.isInteger(v) && !Object.is(v, -0)) return { number: v };
  return v;
};
const metadata = {};
for (const [key, e] of Object.entries(entries)) {
  metadata[key] = { type: e.type, value: canonical(e.value) };
  if (e.subType !== undefined) metadata[key].subType = e.subType;
}
process.stdout.write(JSON.stringify({ metadata }) + "\n");
