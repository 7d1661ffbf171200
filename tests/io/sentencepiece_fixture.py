#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""CTest fixture for the SentencePiece tests: trains small models with Debian's
python3-sentencepiece (the reference implementation, written by others) on the fortunes package's
text, records the library's ids and decoded text for held-out and hard strings, and writes
Hugging Face tokenizer.json files converted from the trained models.

Usage: sentencepiece_fixture.py OUT_DIR

Writes into OUT_DIR:
  bpe.model          BPE, vocab 2000, identity normalization, byte fallback, no removal of extra
                     white space, split digits (Llama 2's trainer settings)
  unigram.model      unigram, vocab 2000, default nmt_nfkc rule (a precompiled charsmap),
                     a user-defined <mask> and a control <cls>
  unigram_bf.model   unigram, vocab 1000, identity normalization, byte fallback
  llama2_bpe/        tokenizer.json in the Llama 2 layout converted from bpe.model, with a
                     tokenizer_config.json
  unigram_json/      tokenizer.json (model Unigram) converted from unigram_bf.model
  sp_dir/            tokenizer.model (a copy of bpe.model) and a tokenizer_config.json
  expected.json      {"models": {name: {"cases": [{"text", "ids", "decoded"}],
                                        "decodes": [{"ids", "text"}]}}, ...}
Fails loudly (exit 1) when sentencepiece or the fortunes files are missing.
"""
import glob
import json
import os
import random
import shutil
import sys

FORTUNES = "/usr/share/games/fortunes"
METASPACE = "\u2581"


def fail(message):
    print(f"sentencepiece fixture: {message}", file=sys.stderr)
    sys.exit(1)


try:
    import sentencepiece as spm
except ImportError:
    fail("the Python module sentencepiece is missing (scripts/setup installs "
         "python3-sentencepiece)")


def fortunes():
    """Every fortune (entries separated by '%' lines) of the fortunes package, in file order."""
    files = sorted(f for f in glob.glob(os.path.join(FORTUNES, "*"))
                   if os.path.isfile(f) and not f.endswith((".dat", ".u8")))
    if not files:
        fail(f"no fortune files in {FORTUNES} (scripts/setup installs the fortunes package)")
    entries = []
    for f in files:
        with open(f, encoding="utf-8", errors="replace") as text:
            entries += [e.strip("\n") for e in text.read().split("\n%\n") if e.strip()]
    return entries


HARD = [
    "", " ", "  ", "   ", "\t", "\n", "\r\n", " \t \n ", "a", " a", "a ", "  a  b  ", "a\tb\nc",
    "Hello world", "Hello  world", " Hello", "Hello ", "Hello\n\nworld", "tabs\t\tand\ttabs",
    "trailing spaces   ", "   leading spaces", "line one\nline two\n", "\n\nstarts with newlines",
    "0", "1234567890", "3.14159265358979", "2024-01-31", "1,000,000", "x=42; y=-7",
    "\U0001F600", "\U0001F44D\U0001F3FD", "\U0001F1EB\U0001F1F7", "family \U0001F468\u200d\U0001F469\u200d\U0001F467",
    "\u4e2d\u6587\u5b57\u7b26", "\u65e5\u672c\u8a9e\u306e\u6587\u7ae0", "\ud55c\uad6d\uc5b4",
    "\u0627\u0644\u0639\u0631\u0628\u064a\u0629", "\u05e2\u05d1\u05e8\u05d9\u05ea",
    "\u0939\u093f\u0928\u094d\u0926\u0940", "\u0e20\u0e32\u0e29\u0e32\u0e44\u0e17\u0e22",
    "e\u0301 a\u0308 n\u0303", "caf\u00e9 na\u00efve r\u00e9sum\u00e9", "\u00df\u00e6\u00f8\u00e5",
    "\x00", "\x01\x02\x03", "bell\x07and\x1bescape", "del\x7f", "\u0085nel", "\u00a0nbsp\u00a0",
    "\u2003em\u2002en\u3000ideographic", "\u200b\u200c\u200d", "\ufeffbom", "\ue000private",
    "\uff21\uff22\uff23\uff11\uff12\uff13", "\ufb01nance", "\u2460\u2461\u2462", "\u337b",
    "\u2126 \u212b K", "x\u00b2 + y\u00b3", "\u00bd \u00bc", "\u2028\u2029",
    "<s>", "</s>", "<unk>", "<pad>", "<cls>", "<mask>", "a<mask>b", " <mask> ", "<0x41>",
    METASPACE, METASPACE * 3, f"a{METASPACE}b", f" {METASPACE} ", "\u2581Hello",
    "C'est la vie", "Don't stop", "I'LL BE BACK", "\u201cquoted\u201d \u2018single\u2019",
    "http://www.debian.org/", "user@example.com", "#include <stdio.h>", "if (a && b) { return; }",
    "\U00020000\U0002a6d6", "\U0001d400\U0001d401", "\U0010fffd", "~!@#$%^&*()_+`-=[]\\{}|;':\",./<>?",
]

FRAGMENTS = [
    "the", "The", "of", "and", "ing", "tion", "hello", "World", "x", "q", "\u00e9", "\u00df",
    "\u0436", "\u03c9", "\u4e2d", "\u6587", "\U0001F600", "\U0001F44D\U0001F3FD", "\u200d",
    "\u0301", "0", "1", "23", "456", "7890", " ", " ", " ", "  ", "   ", "\t", "\n", "\n\n",
    "\r\n", "\u00a0", "\u3000", "'", "'s", "\"", ".", ",", "!", "?", "-", "(", ")", "<", ">",
    "/", "\\", "#", "%", "&", "*", "\x00", "\x1f", "\x7f", "\uff21", "\ufb01", "\u2460",
    METASPACE, "<s>", "<0x41>", "\U0001d400",
]


def test_strings(held_out):
    rng = random.Random(20240516)
    cases = [("hard", s) for s in HARD]
    cases += [("held_out", s) for s in held_out]
    for _ in range(800):
        n = rng.randint(1, 16)
        cases.append(("random", "".join(rng.choice(FRAGMENTS) for _ in range(n))))
    # Random code points from the whole range (no surrogates), weighted towards the BMP.
    for _ in range(200):
        chars = []
        for _ in range(rng.randint(1, 12)):
            top = rng.choice([0x7F, 0x7FF, 0xFFFF, 0x10FFFF])
            cp = rng.randint(0, top)
            chars.append(chr(cp) if not 0xD800 <= cp <= 0xDFFF else "?")
        cases.append(("codepoints", "".join(chars)))
    return cases


def random_id_sequences(sp, count, rng):
    """Id sequences that stress decoding: byte pieces (ill-formed and partial UTF-8), control and
    unknown pieces, pieces that start with U+2581, in random order."""
    n = sp.get_piece_size()
    bytes_ = [i for i in range(n) if sp.is_byte(i)]
    special = [i for i in range(n) if sp.is_control(i) or sp.is_unknown(i)]
    spaced = [i for i in range(n) if sp.id_to_piece(i).startswith(METASPACE)]
    out = []
    for k in range(count):
        seq = []
        for _ in range(rng.randint(0, 24)):
            pool = rng.choice([bytes_ or special, special, spaced, range(n), range(n)])
            seq.append(rng.choice(list(pool)))
        if k % 5 == 0 and bytes_:  # valid multi-byte characters spelled as byte pieces
            for ch in "\u00e9\u4e2d\U0001F600":
                seq += [sp.piece_to_id(f"<0x{b:02X}>") for b in ch.encode("utf-8")]
        out.append(seq)
    return out


def train(text_path, out_dir, name, **options):
    spm.SentencePieceTrainer.train(
        input=text_path, model_prefix=os.path.join(out_dir, name), minloglevel=2,
        num_threads=2, seed_sentencepiece_size=20000, num_sub_iterations=1, **options)
    return spm.SentencePieceProcessor(model_file=os.path.join(out_dir, name + ".model"))


def added_tokens(sp):
    return [{"id": i, "content": sp.id_to_piece(i), "single_word": False, "lstrip": False,
             "rstrip": False, "normalized": False, "special": True}
            for i in range(sp.get_piece_size()) if sp.is_control(i) or sp.is_unknown(i)]


def llama2_layout(sp, model):
    """The layout Hugging Face's LlamaConverter writes (legacy=True)."""
    return {
        "version": "1.0", "truncation": None, "padding": None,
        "added_tokens": added_tokens(sp),
        "normalizer": {"type": "Sequence", "normalizers": [
            {"type": "Prepend", "prepend": METASPACE},
            {"type": "Replace", "pattern": {"String": " "}, "content": METASPACE}]},
        "pre_tokenizer": None,
        "post_processor": {
            "type": "TemplateProcessing",
            "single": [{"SpecialToken": {"id": "<s>", "type_id": 0}},
                       {"Sequence": {"id": "A", "type_id": 0}}],
            "pair": [{"SpecialToken": {"id": "<s>", "type_id": 0}},
                     {"Sequence": {"id": "A", "type_id": 0}},
                     {"SpecialToken": {"id": "<s>", "type_id": 1}},
                     {"Sequence": {"id": "B", "type_id": 1}}],
            "special_tokens": {"<s>": {"id": "<s>", "ids": [sp.piece_to_id("<s>")],
                                       "tokens": ["<s>"]}}},
        "decoder": {"type": "Sequence", "decoders": [
            {"type": "Replace", "pattern": {"String": METASPACE}, "content": " "},
            {"type": "ByteFallback"}, {"type": "Fuse"},
            {"type": "Strip", "content": " ", "start": 1, "stop": 0}]},
        "model": model,
    }


def bpe_json(sp):
    """tokenizer.json model section for a SentencePiece BPE model. The vocabulary is every piece
    by id. Merges, as transformers' SentencePieceExtractor makes them: for each piece, every split
    into two pieces, ordered by piece score (highest first; a BPE model's scores fall with the
    order its merges were learnt). Only normal pieces are merge results: SentencePiece never
    merges into control, unknown or byte pieces."""
    n = sp.get_piece_size()
    vocab = {sp.id_to_piece(i): i for i in range(n)}
    merges = []
    for i in range(n):
        if sp.is_control(i) or sp.is_unknown(i) or sp.is_byte(i) or sp.is_unused(i):
            continue
        piece = sp.id_to_piece(i)
        local = [(piece[:k], piece[k:]) for k in range(1, len(piece))
                 if piece[:k] in vocab and piece[k:] in vocab]
        local.sort(key=lambda p: (vocab[p[0]], vocab[p[1]]))
        merges += [(sp.get_score(i), a, b) for a, b in local]
    merges.sort(key=lambda m: m[0], reverse=True)  # stable: equal scores keep their order
    return {"type": "BPE", "dropout": None, "unk_token": "<unk>",
            "continuing_subword_prefix": None, "end_of_word_suffix": None, "fuse_unk": True,
            "byte_fallback": True, "ignore_merges": False, "vocab": vocab,
            "merges": [[a, b] for _, a, b in merges]}


def unigram_json(sp):
    n = sp.get_piece_size()
    return {"type": "Unigram", "unk_id": sp.unk_id(), "byte_fallback": True,
            "vocab": [[sp.id_to_piece(i), sp.get_score(i)] for i in range(n)]}


def write_json(path, value):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        json.dump(value, f, ensure_ascii=False)


def main():
    if len(sys.argv) != 2:
        fail("usage: sentencepiece_fixture.py OUT_DIR")
    out_dir = sys.argv[1]
    os.makedirs(out_dir, exist_ok=True)
    done = os.path.join(out_dir, "expected.json")
    if os.path.exists(done) and os.path.getmtime(done) > os.path.getmtime(__file__):
        print(f"SentencePiece models and expected ids up to date in {out_dir}")
        return
    entries = fortunes()
    rng = random.Random(7)
    rng.shuffle(entries)
    held_out, training = entries[:1400], entries[1400:]
    text_path = os.path.join(out_dir, "train.txt")
    with open(text_path, "w", encoding="utf-8") as f:
        size = 0
        for e in training:  # about 200 kB keeps training to a few seconds
            f.write(e.replace("\t", " ") + "\n")
            size += len(e)
            if size > 200_000:
                break

    models = {
        "bpe": train(text_path, out_dir, "bpe", model_type="bpe", vocab_size=2000,
                     byte_fallback=True, normalization_rule_name="identity",
                     remove_extra_whitespaces=False, split_digits=True,
                     allow_whitespace_only_pieces=True),
        "unigram": train(text_path, out_dir, "unigram", model_type="unigram", vocab_size=2000,
                         user_defined_symbols=["<mask>"], control_symbols=["<cls>"]),
        "unigram_bf": train(text_path, out_dir, "unigram_bf", model_type="unigram",
                            vocab_size=1000, byte_fallback=True,
                            normalization_rule_name="identity", remove_extra_whitespaces=False),
    }
    cases = test_strings(held_out)
    expected = {"reference": f"sentencepiece {spm.__version__}", "models": {}}
    id_rng = random.Random(99)
    for name, sp in models.items():
        recorded = []
        for kind, text in cases:
            ids = sp.encode(text)
            recorded.append({"kind": kind, "text": text, "ids": ids, "decoded": sp.decode(ids)})
        decodes = [{"ids": seq, "text": sp.decode(seq)}
                   for seq in random_id_sequences(sp, 400, id_rng)]
        expected["models"][name] = {"cases": recorded, "decodes": decodes,
                                    "vocab_size": sp.get_piece_size()}

    bpe = models["bpe"]
    config = {"add_bos_token": True, "add_eos_token": False,
              "bos_token": {"__type": "AddedToken", "content": "<s>", "lstrip": False,
                            "normalized": False, "rstrip": False, "single_word": False},
              "eos_token": "</s>", "pad_token": None, "unk_token": "<unk>",
              "model_max_length": 1000000000000000019884624838656,
              "chat_template": "{% for m in messages %}{{ m['content'] }}{% endfor %}"}
    write_json(os.path.join(out_dir, "llama2_bpe", "tokenizer.json"),
               llama2_layout(bpe, bpe_json(bpe)))
    write_json(os.path.join(out_dir, "llama2_bpe", "tokenizer_config.json"), config)
    write_json(os.path.join(out_dir, "unigram_json", "tokenizer.json"),
               llama2_layout(models["unigram_bf"], unigram_json(models["unigram_bf"])))
    os.makedirs(os.path.join(out_dir, "sp_dir"), exist_ok=True)
    shutil.copyfile(os.path.join(out_dir, "bpe.model"),
                    os.path.join(out_dir, "sp_dir", "tokenizer.model"))
    write_json(os.path.join(out_dir, "sp_dir", "tokenizer_config.json"),
               dict(config, model_max_length=4096))
    write_json(os.path.join(out_dir, "expected.json.tmp"), expected)
    os.replace(os.path.join(out_dir, "expected.json.tmp"), os.path.join(out_dir, "expected.json"))
    print(f"trained {', '.join(models)} and recorded {len(cases)} strings in {out_dir}")


if __name__ == "__main__":
    main()
