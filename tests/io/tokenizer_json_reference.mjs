// SPDX-License-Identifier: Apache-2.0
// Records the ids of Hugging Face's own JavaScript implementation of tokenizer.json
// (npm @huggingface/tokenizers, written by others) for tessel's tokenizer.json tests:
//  - llama3_regex: a byte-level tokenizer.json with Llama 3's pre-tokenizer (Split on its regex,
//    then ByteLevel without a regex) over GPT-2's vocabulary and merges (from the GPT-2 fixture),
//    on the hard-string corpus and seeded random strings;
//  - gguf_<name>: the same over the regex and merge rule of each GGUF pre-tokenizer name that
//    tessel reads (llama-bpe, qwen2, qwen35, gpt-4o, tekken; the chains starcoder,
//    deepseek-coder, deepseek-llm, deepseek-v3), on more strings;
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
// Names for chains of Splits. The models' files write the single-digit step as Digits, which the
// Rust crate implements with char::is_numeric (\p{N}) but this package with \d (ASCII only), so
// it is written as the Split llama.cpp uses; likewise GPT-2's regex with \p{White_Space}, the set
// of the original encoder's \s (JavaScript's \s differs on U+0085 and U+FEFF).
const GPT2_WS = "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\p{White_Space}\\p{L}\\p{N}]+"
  + '|\\p{White_Space}+(?!\\P{White_Space})|\\p{White_Space}+';
const GGUF_CHAINS = {
  starcoder: ['\\p{N}', GPT2_WS],
  'deepseek-coder': [
    '[\r\n]',
    '\\s?\\p{L}+',
    '\\s?\\p{P}+',
    '[\u{4E00}-\u{9FA5}\u{800}-\u{4E00}\u{AC00}-\u{D7FF}]+',
    '\\p{N}'],
  'deepseek-llm': [
    '[\r\n]',
    '\\s?[A-Za-z\u{B5}\u{C0}-\u{D6}\u{D8}-\u{F6}\u{F8}-\u{1BA}\u{1BC}-\u{1BF}\u{1C4}-\u{293}\u{295}-\u{2AF}\u{370}-\u{373}\u{376}\u{377}\u{37B}-\u{37D}\u{37F}\u{386}\u{388}-\u{38A}\u{38C}\u{38E}-\u{3A1}\u{3A3}-\u{3F5}\u{3F7}-\u{481}\u{48A}-\u{52F}\u{531}-\u{556}\u{10A0}-\u{10C5}\u{13A0}-\u{13F5}\u{13F8}-\u{13FD}\u{1C90}-\u{1CBA}\u{1CBD}-\u{1CBF}\u{1D00}-\u{1D2B}\u{1D6B}-\u{1D77}\u{1D79}-\u{1D9A}\u{1E00}-\u{1F15}\u{1F18}-\u{1F1D}\u{1F20}-\u{1F45}\u{1F48}-\u{1F4D}\u{1F50}-\u{1F57}\u{1F59}\u{1F5B}\u{1F5D}\u{1F5F}-\u{1F7D}\u{1F80}-\u{1FB4}\u{1FB6}-\u{1FBC}\u{1FBE}\u{1FC2}-\u{1FC4}\u{1FC6}-\u{1FCC}\u{1FD0}-\u{1FD3}\u{1FD6}-\u{1FDB}\u{1FE0}-\u{1FEC}\u{1FF2}-\u{1FF4}\u{1FF6}-\u{1FFC}\u{2102}\u{2107}\u{210A}-\u{2113}\u{2115}\u{2119}-\u{211D}\u{2124}\u{2126}\u{2128}\u{212A}-\u{212D}\u{212F}-\u{2134}\u{2139}\u{213C}-\u{213F}\u{2145}-\u{2149}\u{214E}\u{2183}\u{2184}\u{2C00}-\u{2C7B}\u{2C7E}-\u{2CE4}\u{2CEB}-\u{2CEE}\u{2CF2}\u{2CF3}\u{A640}-\u{A66D}\u{A680}-\u{A69B}\u{A722}-\u{A76F}\u{A771}-\u{A787}\u{A78B}-\u{A78E}\u{AB70}-\u{ABBF}\u{FB00}-\u{FB06}\u{FB13}-\u{FB17}\u{FF21}-\u{FF3A}\u{FF41}-\u{FF5A}\u{10400}-\u{1044F}\u{104B0}-\u{104D3}\u{104D8}-\u{104FB}\u{10C80}-\u{10CB2}\u{10CC0}-\u{10CF2}\u{118A0}-\u{118DF}\u{1E900}-\u{1E943}]+',
    '\\s?[!-/:-~\u{FF01}-\u{FF0F}\u{FF1A}-\u{FF5E}\u{2018}-\u{201F}\u{3000}-\u{3002}]+',
    '\\s+$',
    '[\u{4E00}-\u{9FA5}\u{800}-\u{4E00}\u{AC00}-\u{D7FF}]+',
    '\\p{N}+'],
  'deepseek-v3': [
    '\\p{N}{1,3}',
    '[\u{4E00}-\u{9FA5}\u{3040}-\u{309F}\u{30A0}-\u{30FF}]+',
    '[!"#$%&\'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|[^\r\n\\p{L}\\p{P}\\p{S}]?[\\p{L}\\p{M}]+| ?[\\p{P}\\p{S}]+[\r\n]*|\\s*[\r\n]+|\\s+(?!\\S)|\\s+'],
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
for (const [name, stages] of Object.entries(GGUF_CHAINS)) {
  const file = structuredClone(llama3);
  file.pre_tokenizer = { type: 'Sequence', pretokenizers: stages.map((s) => (
    { type: 'Split', pattern: { Regex: s }, behavior: 'Isolated', invert: false })).concat(
    [{ type: 'ByteLevel', add_prefix_space: false, trim_offsets: true, use_regex: false }]) };
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
