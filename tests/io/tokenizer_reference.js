// SPDX-License-Identifier: Apache-2.0
// Records a reference encoder's GPT-2 token ids for the tokenizer tests: the committed corpus of
// hard strings, seeded random strings built from awkward fragments, and (when given) every file in
// a directory of English text. The encoder is the npm package gpt-3-encoder (written by others).
// Usage: node tokenizer_reference.js ENCODER_DIR CORPUS.json OUT.json [TEXT_DIR]
'use strict';
const fs = require('fs');
const path = require('path');

const [encoderDir, corpusPath, outPath, textDir] = process.argv.slice(2);
if (!outPath) {
  console.error('usage: node tokenizer_reference.js ENCODER_DIR CORPUS.json OUT.json [TEXT_DIR]');
  process.exit(2);
}
const encoder = require(path.resolve(encoderDir));
const version = JSON.parse(fs.readFileSync(path.join(encoderDir, 'package.json'))).version;

const cases = [];
const add = (name, text) => cases.push({name, text, ids: encoder.encode(text)});

JSON.parse(fs.readFileSync(corpusPath, 'utf-8')).forEach((s, i) => add(`hard_strings[${i}]`, s));

// A small deterministic generator (mulberry32), so every machine records the same strings.
let state = 0x7e55e1;
const random = () => {
  state = (state + 0x6d2b79f5) | 0;
  let t = Math.imul(state ^ (state >>> 15), 1 | state);
  t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
  return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
};
const pick = (list) => list[Math.floor(random() * list.length)];

// Fragments whose neighbours decide how the pattern splits: every branch of it, and the
// characters where Unicode classes and UTF-8 lengths change.
const fragments = [
  'a', 'b', 'Z', 'the', 'The', 'of', 'and', 'ing', 'tion', 'hello', 'World', 'x', 'q', 'é', 'ß',
  'ü', 'ñ', 'Ø', 'ж', 'Я', 'ω', 'Σ', 'ا', 'ש', 'क', '्', 'ष', '中', '文', '日本', '한', 'ก',
  '\u0301', '\u0308', '\u200d', '\ufe0f', '\u200b', '😀', '👍🏽', '🇫🇷', '𝐀', '𠀀',
  '0', '1', '23', '456', '7890', '½', '²', '١', 'Ⅳ', '①',
  ' ', ' ', ' ', '  ', '   ', '\t', '\n', '\n\n', '\r\n', '\r', '\u000b', '\u000c', '\u00a0', '\u3000',
  '\u2028', '\u2003', '\u202f',
  "'", "'s", "'t", "'re", "'ve", "'m", "'ll", "'d", "'S", "'LL", '\u2019', '\u2019s', '"', '`',
  '.', ',', '!', '?', '-', '_', '(', ')', '{', '}', '[', ']', '<', '>', '/', '\\', '#', '$', '%',
  '&', '*', '+', '=', '|', '~', '^', ':', ';', '@', '...', '--', '->', '::', '//', '"}', '",',
  '<|endoftext|>', '\u0000', '\u001f', '\u007f', '\u00ad', '\u0600',
];
for (let i = 0; i < 4000; i++) {
  const n = 1 + Math.floor(random() * 24);
  let s = '';
  for (let k = 0; k < n; k++) s += pick(fragments);
  add(`random[${i}]`, s);
}

// Long pieces (more than 64 bytes) take a different merge strategy in tessel.
const letters = 'abcdefghijklmnopqrstuvwxyzabcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZéüß';
const digits = '0123456789';
const symbols = '!"#$%&()*+,-./:;<=>?@[\\]^_`{|}~';
for (let i = 0; i < 60; i++) {
  const alphabet = [letters, digits, symbols][i % 3];
  const n = 65 + Math.floor(random() * (i < 6 ? 2000 : 600));
  let s = i % 2 ? ' ' : '';
  for (let k = 0; k < n; k++) s += pick(alphabet);
  add(`long[${i}]`, s);
}

if (textDir && fs.existsSync(textDir)) {
  for (const name of fs.readdirSync(textDir).sort()) {
    const file = path.join(textDir, name);
    if (!fs.lstatSync(file).isFile()) continue;
    add(`text:${name}`, fs.readFileSync(file, 'utf-8'));
  }
}

fs.writeFileSync(outPath, JSON.stringify({reference: `gpt-3-encoder ${version}`, cases}));
console.log(`recorded ${cases.length} cases with gpt-3-encoder ${version} in ${outPath}`);
