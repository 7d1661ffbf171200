// SPDX-License-Identifier: Apache-2.0
// An independent reading of a GGUF file: Hugging Face's JavaScript parser (npm @huggingface/gguf,
// written by others) prints the file's metadata and tensor infos as JSON, in a form tessel's test
// can compare with its own reading: every integer as a decimal string (u64 / i64 arrive as BigInt),
// floats as numbers, arrays as lists, each key with its value type id and array element type.
// Usage: node gguf_reference.mjs PACKAGE_DIR FILE.gguf
import { pathToFileURL } from "node:url";

const [packageDir, file] = process.argv.slice(2);
const { gguf } = await import(pathToFileURL(`${packageDir}/dist/index.mjs`).href);
const { typedMetadata, tensorInfos } = await gguf(file, { allowLocalFile: true, typedMetadata: true });

const canonical = (v) => {
  if (typeof v === "bigint") return v.toString();
  if (Array.isArray(v)) return v.map(canonical);
  if (typeof v === "number" && Number.isInteger(v) && !Object.is(v, -0)) return { number: v };
  return v;
};

const metadata = {};
for (const [key, entry] of Object.entries(typedMetadata)) {
  metadata[key] = { type: entry.type, value: canonical(entry.value) };
  if (entry.subType !== undefined) metadata[key].subType = entry.subType;
}
const tensors = tensorInfos.map((t) => ({
  name: t.name,
  dims: t.shape.map((d) => d.toString()),
  type: t.dtype,
  offset: t.offset.toString(),
}));
process.stdout.write(JSON.stringify({ metadata, tensors }) + "\n");
