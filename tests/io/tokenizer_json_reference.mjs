// SPDX-License-Identifier: Apache-2.0
// Records the ids of Hugging Face's own JavaScript implementation of tokenizer.json
// (npm @huggingface/tokenizers, written by others) for tessel's tokenizer.json tests:
//  - llama3_regex: a byte-level tokenizer.json with Llama 3's pre-tokenizer (Split on its regex,
//    then ByteLevel without a regex) over GPT-2's vocabulary and merges (from the GPT-2 fixture),
//    on the hard-string corpus and seeded random strings;
//  - gguf_<name>: the same over the regex and merge rule of each GGUF pre-tokenizer name that
//    tessel reads (llama-bpe, qwen2, qwen35, gpt-4o, tekken), on more strings;
//  - llama2_bpe, unigram_json: the SentencePiece-style files of the SentencePiece fixture, on its
//    recorded strings (ids and decoded text).
// Usage: node tokenizer_json_reference.mjs PACKAGE_DIR GPT2_DIR CORPUS.json SP_DIR OUT_DIR
import fs from 'fs';
import path from 'path';
import { pathToFileURL } from 'url';

const [packageDir, gpt2Dir, corpusPath, spDir, outDir] = process.argv.slice(2);
if (!outDir) {
  console.error('usage: node tokenizer_json_reference.mjs PACKAGE_DIR GPT2_DIR CORPUS.json SP_DIR OUT_DIR');
  process.exit(2);
}
const pkg = JSON.parse(fs.readFileSync(path.join(packageDir, 'package.json')));
const { Tokenizer } = await import(pathToFileURL(path.join(packageDir, 'dist', 'tokenizers.mjs')));

// Meta's Llama 3 tokenizer.json pre-tokenizer pattern, as written there.
const LLAMA3 = "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
// The patterns of the other models whose GGUF pre-tokenizer names tessel reads, as their
// tokenizer.json files write them, with the ignore_merges flag llama.cpp applies for each name.
const CONTRACTIONS = "(?i:'s|'t|'re|'ve|'m|'ll|'d)";
const UPPER = '[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]';
const LOWER = '[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]';
const TAIL = '| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+';
const GGUF_PRE = {
  'llama-bpe': [LLAMA3, true],
  qwen2: [`${CONTRACTIONS}|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+`, false],
  qwen35: [`${CONTRACTIONS}|[^\\r\\n\\p{L}\\p{N}]?[\\p{L}\\p{M}]+|\\p{N}| ?[^\\s\\p{L}\\p{M}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+`, false],
  'gpt-4o': [`[^\\r\\n\\p{L}\\p{N}]?${UPPER}*${LOWER}+${CONTRACTIONS}?|[^\\r\\n\\p{L}\\p{N}]?${UPPER}+${LOWER}*${CONTRACTIONS}?|\\p{N}{1,3}${TAIL}`, false],
  tekken: [`[^\\r\\n\\p{L}\\p{N}]?${UPPER}*${LOWER}+|[^\\r\\n\\p{L}\\p{N}]?${UPPER}+${LOWER}*|\\p{N}${TAIL}`, true],
};

const merges = fs.readFileSync(path.join(gpt2Dir, 'vocab.bpe'), 'utf-8').split('\n')
  .filter((l) => l && !l.startsWith('#version')).map((l) => l.split(' '));
const llama3 = {
  version: '1.0', truncation: null, padding: null,
  added_tokens: [{ id: 50256, content: '<|endoftext|>', single_word: false, lstrip: false,
    rstrip: false, normalized: false, special: true }],
  normalizer: null,
  pre_tokenizer: { type: 'Sequence', pretokenizers: [
    { type: 'Split', pattern: { Regex: LLAMA3 }, behavior: 'Isolated', invert: false },
    { type: 'ByteLevel', add_prefix_space: false, trim_offsets: true, use_regex: false }] },
  post_processor: { type: 'ByteLevel', add_prefix_space: true, trim_offsets: false, use_regex: true },
  decoder: { type: 'ByteLevel', add_prefix_space: true, trim_offsets: true, use_regex: true },
  model: { type: 'BPE', dropout: null, unk_token: null, continuing_subword_prefix: null,
    end_of_word_suffix: null, fuse_unk: false, byte_fallback: false, ignore_merges: false,
    vocab: JSON.parse(fs.readFileSync(path.join(gpt2Dir, 'encoder.json'), 'utf-8')), merges },
};
fs.mkdirSync(path.join(outDir, 'llama3_regex'), { recursive: true });
fs.writeFileSync(path.join(outDir, 'llama3_regex', 'tokenizer.json'), JSON.stringify(llama3));

// Strings: the hard corpus, then seeded random mixtures of fragments where the pattern's
// branches meet (contractions in any case, letters after punctuation, digit runs, newlines).
let state = 0x11a3a3;
const random = () => {
  state = (state + 0x6d2b79f5) | 0;
  let t = Math.imul(state ^ (state >>> 15), 1 | state);
  t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
  return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
};
const pick = (list) => list[Math.floor(random() * list.length)];
const fragments = [
  'a', 'the', 'The', 'HELLO', 'é', 'ß', 'ж', '中', '文', 'ก', '\u0301', '😀', '👍🏽', '0', '12',
  '345', '6789', '½', '١', ' ', ' ', '  ', '\t', '\n', '\n\n', '\r\n', '\r', '\u00a0', '\u3000',
  "'", "'s", "'S", "'t", "'RE", "'ve", "'m", "'LL", "'d", '\u2019s', '.', ',', '!', '?', '-',
  '(', ')', '"', '/', '#', '$', '...', '-->', '<|endoftext|>', '\u0000', '\u007f', '\u0085',
];
const texts = JSON.parse(fs.readFileSync(corpusPath, 'utf-8'));
for (let i = 0; i < 2500; i++) {
  let s = '';
  const n = 1 + Math.floor(random() * 20);
  for (let k = 0; k < n; k++) s += pick(fragments);
  texts.push(s);
}
const encodeAll = (tok, list, withText) => list.map((text) => {
  const ids = tok.encode(text, { add_special_tokens: false }).ids;
  const c = { text, ids };
  if (withText) {
    c.decoded = ids.length === 0 ? ''
      : tok.decode(ids, { skip_special_tokens: false, clean_up_tokenization_spaces: false });
  }
  return c;
});

const out = { reference: `@huggingface/tokenizers ${pkg.version}`, models: {} };
out.models.llama3_regex = encodeAll(new Tokenizer(llama3, {}), texts, false);

// For the GGUF pre-tokenizers: the same texts, then strings where those patterns differ (digit
// runs, case changes inside words, combining marks, slashes before newlines) and more random ones.
const ggufTexts = texts.concat([
  '1234567', '12345678901', 'HelloWorld', "HelloWorld's", 'getHTTPResponse', 'XMLHttpRequest',
  "ÉCOLE'S école", 'ǅemal ǄEMAL ǆemal', 'e\u0301te\u0301', 'a/b/c\n\n', 'path/to/file.txt\n',
  'x  \n  y', "don'T WE'LL", 'CamelCase99Bottles', 'ABCdef GHi jKL', 'ʰello ªb', 'ß ẞ',
]);
const ggufFragments = fragments.concat(['A', 'Ab', 'aB', 'ABC', 'É', 'ǅ', 'ʰ', '\u0308', '/',
  '/\n', '1234567', 'x1', 'Zz']);
for (let i = 0; i < 1500; i++) {
  let s = '';
  const n = 1 + Math.floor(random() * 16);
  for (let k = 0; k < n; k++) s += pick(ggufFragments);
  ggufTexts.push(s);
}
for (const [name, [pattern, ignoreMerges]] of Object.entries(GGUF_PRE)) {
  const file = structuredClone(llama3);
  file.pre_tokenizer.pretokenizers[0].pattern.Regex = pattern;
  file.model.ignore_merges = ignoreMerges;
  out.models[`gguf_${name}`] = encodeAll(new Tokenizer(file, {}), ggufTexts, false);
}
const spExpected = JSON.parse(fs.readFileSync(path.join(spDir, 'expected.json'), 'utf-8'));
for (const [name, model] of [['llama2_bpe', 'bpe'], ['unigram_json', 'unigram_bf']]) {
  const json = JSON.parse(fs.readFileSync(path.join(spDir, name, 'tokenizer.json'), 'utf-8'));
  const list = spExpected.models[model].cases.map((c) => c.text);
  out.models[name] = encodeAll(new Tokenizer(json, {}), list, true);
}
fs.writeFileSync(path.join(outDir, 'expected.json.tmp'), JSON.stringify(out));
fs.renameSync(path.join(outDir, 'expected.json.tmp'), path.join(outDir, 'expected.json'));
console.log(`recorded ${texts.length} + SentencePiece strings with ${out.reference} in ${outDir}`);
