// SPDX-License-Identifier: Apache-2.0
// prepare_token_dataset: documents cut as documented, prepare -> load -> decode gives the input
// text back, val split sizes, shard sizes, output independent of threads and chunking, and clear
// errors for bad options and inputs.
#include "tessel/io/token_dataset_prepare.h"

#include <numeric>

#include "common/token_dataset_test_util.h"
#include "tessel/io/token_dataset.h"

namespace tessel::io {
namespace {

namespace fs = std::filesystem;

const std::string kEot = "<|endoftext|>";

std::vector<std::string> views(std::string_view text, DocumentSplit s) {
  std::vector<std::string> out;
  for (auto v : split_documents(text, s)) out.emplace_back(v);
  return out;
}

// A fortune-format file of n documents of varied text (some long enough to be cut in pieces).
std::string fortunes(int n, int seed) {
  std::string text;
  for (int i = 0; i < n; ++i) {
    text += "Fortune " + std::to_string(seed) + "." + std::to_string(i) + ": the cat sat";
    for (int k = 0; k < (i * 7 + seed) % 13; ++k)
      text += "\nin the hat, again " + std::to_string(k);
    text += (i % 3 == 0) ? "\n\t-- someone\n" : "\n";
    text += "%\n";
  }
  return text;
}

std::vector<int64_t> all_tokens(const TokenDataset& d) {
  std::vector<int64_t> t(size_t(d.size()));
  d.read(0, d.size(), t.data());
  return t;
}

std::string decode(const Tokenizer& tok, const std::vector<int64_t>& ids) {
  std::vector<int32_t> ids32(ids.begin(), ids.end());
  return tok.decode_bytes(ids32);
}

std::string join(const std::vector<std::string>& docs, size_t begin, size_t end) {
  std::string s;
  for (size_t i = begin; i < end; ++i) s += (i > begin ? kEot : "") + docs[i];
  return s;
}

class Prepare : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = data_temp_dir(::testing::UnitTest::GetInstance()->current_test_info()->name());
    tokenizer_ = write_small_tokenizer(dir_ / "tok");
    a_ = write_file(dir_ / "a.txt", fortunes(23, 1));
    b_ = write_file(dir_ / "b.txt", fortunes(7, 2));
  }
  PrepareOptions options(const std::string& out) {
    PrepareOptions o;
    o.tokenizer = tokenizer_;
    o.inputs = {a_, b_};
    o.out_dir = (dir_ / out).string();
    o.threads = 2;
    return o;
  }
  std::vector<std::string> documents() {
    std::vector<std::string> docs = views(fortunes(23, 1), DocumentSplit::Percent);
    for (auto& d : views(fortunes(7, 2), DocumentSplit::Percent)) docs.push_back(d);
    return docs;
  }
  fs::path dir_;
  std::string tokenizer_, a_, b_;
};

TEST(SplitDocuments, Modes) {
  const std::string text = "one\n%\n\n%\ntwo\nlines\n%\r\nthree";
  EXPECT_EQ(views(text, DocumentSplit::Percent),
            (std::vector<std::string>{"one\n", "two\nlines\n", "three"}));
  EXPECT_EQ(views(text, DocumentSplit::Auto), views(text, DocumentSplit::Percent));
  EXPECT_EQ(views("a % b\n%%\n", DocumentSplit::Auto), (std::vector<std::string>{"a % b\n%%\n"}));
  EXPECT_EQ(views("p1\nl2\n\n  \n\np2\n", DocumentSplit::Blank),
            (std::vector<std::string>{"p1\nl2\n", "p2\n"}));
  EXPECT_EQ(views("x\n\ny", DocumentSplit::File), (std::vector<std::string>{"x\n\ny"}));
  EXPECT_TRUE(views(" \n\t", DocumentSplit::File).empty());
  EXPECT_EQ(parse_document_split("blank"), DocumentSplit::Blank);
  EXPECT_FALSE(parse_document_split("lines").has_value());
}

TEST_F(Prepare, RoundTripDecodesToTheInputText) {
  PrepareOptions o = options("out");
  o.val_fraction = 0.2;
  const PrepareSummary sum = prepare_token_dataset(o);
  const auto docs = documents();
  ASSERT_EQ(docs.size(), 30u);
  EXPECT_EQ(sum.val.documents, 6);  // round(0.2 * 30), the last six
  EXPECT_EQ(sum.train.documents, 24);
  EXPECT_EQ(sum.token_bytes, 2);
  const Tokenizer tok = Tokenizer::load(tokenizer_);
  const TokenDataset train = TokenDataset::open(o.out_dir, "train");
  const TokenDataset val = TokenDataset::open(o.out_dir, "val");
  EXPECT_EQ(train.size(), sum.train.tokens);
  EXPECT_EQ(val.size(), sum.val.tokens);
  EXPECT_EQ(decode(tok, all_tokens(train)), join(docs, 0, 24));
  EXPECT_EQ(decode(tok, all_tokens(val)), join(docs, 24, 30));
  // Documents are separated by exactly one <|endoftext|>, which the text itself cannot produce.
  const auto ids = all_tokens(train);
  EXPECT_EQ(std::count(ids.begin(), ids.end(), *tok.special_token_id(kEot)), 23);

  // Through the loader, unshuffled: the rows are consecutive windows of the same stream.
  TokenLoader loader(std::make_shared<TokenDataset>(TokenDataset::open(o.out_dir, "val")),
                     {.batch = 3, .seq_len = 13, .shuffle = false});
  const auto x = loader.next().x.to_vector<int64_t>();
  const auto val_ids = all_tokens(val);
  EXPECT_EQ(decode(tok, x),
            decode(tok, std::vector<int64_t>(val_ids.begin(), val_ids.begin() + 39)));

  const auto manifest = nlohmann::json::parse(read_bytes(sum.manifest));
  EXPECT_EQ(manifest["dtype"], "uint16");
  EXPECT_EQ(manifest["splits"]["train"]["tokens"], sum.train.tokens);
  EXPECT_EQ(manifest["inputs"].size(), 2u);
  EXPECT_EQ(manifest["inputs"][1]["documents"], 7);
}

TEST_F(Prepare, AppendEotEndsEveryDocument) {
  PrepareOptions o = options("out");
  o.val_fraction = 0;
  o.append_eot = true;
  const PrepareSummary sum = prepare_token_dataset(o);
  EXPECT_EQ(sum.val.tokens, 0);
  EXPECT_TRUE(sum.val.shards.empty());
  const Tokenizer tok = Tokenizer::load(tokenizer_);
  const auto docs = documents();
  EXPECT_EQ(decode(tok, all_tokens(TokenDataset::open(o.out_dir, "train"))),
            join(docs, 0, docs.size()) + kEot);
  expect_error([&] { TokenDataset::open(o.out_dir, "val"); }, {"split 'val'", "no shards"});
}

TEST_F(Prepare, SmallShardsHoldTheSameStream) {
  PrepareOptions o = options("big");
  const PrepareSummary one = prepare_token_dataset(o);
  ASSERT_EQ(one.train.shards.size(), 1u);
  o.out_dir = (dir_ / "small").string();
  o.shard_tokens = 257;
  const PrepareSummary many = prepare_token_dataset(o);
  EXPECT_EQ(int64_t(many.train.shards.size()), (one.train.tokens + 256) / 257);
  EXPECT_EQ(many.train.shards[1], "train_000001.bin");
  EXPECT_EQ(all_tokens(TokenDataset::open(o.out_dir, "train")),
            all_tokens(TokenDataset::open((dir_ / "big").string(), "train")));
}

TEST_F(Prepare, OutputIndependentOfThreadsAndChunking) {
  // One long document cut in pieces of ~100 bytes must encode exactly as a whole.
  std::string long_doc;
  for (int i = 0; i < 200; ++i) long_doc += "The line " + std::to_string(i) + "\n  indented\n";
  const std::string c = write_file(dir_ / "c.txt", long_doc);
  PrepareOptions o = options("t1");
  o.inputs.push_back(c);
  o.threads = 1;
  o.chunk_bytes = 1u << 20;
  prepare_token_dataset(o);
  PrepareOptions p = o;
  p.out_dir = (dir_ / "t3").string();
  p.threads = 3;
  p.chunk_bytes = 97;
  prepare_token_dataset(p);
  for (const char* f : {"train_000000.bin", "val_000000.bin"}) {
    EXPECT_EQ(read_bytes(fs::path(o.out_dir) / f), read_bytes(fs::path(p.out_dir) / f)) << f;
  }
  const Tokenizer tok = Tokenizer::load(tokenizer_);
  const auto val = all_tokens(TokenDataset::open(p.out_dir, "val"));
  const std::vector<int32_t> whole = tok.encode(long_doc);
  ASSERT_GE(val.size(), whole.size());
  EXPECT_TRUE(std::equal(whole.begin(), whole.end(), val.end() - int64_t(whole.size())));
}

TEST_F(Prepare, RepreparingReplacesTheOldShards) {
  PrepareOptions o = options("out");
  o.shard_tokens = 100;
  const PrepareSummary first = prepare_token_dataset(o);
  o.shard_tokens = 1000000;
  prepare_token_dataset(o);
  EXPECT_FALSE(fs::exists(fs::path(o.out_dir) / first.train.shards.back()));
  EXPECT_NO_THROW(TokenDataset::open(o.out_dir, "train"));
}

TEST_F(Prepare, LargeVocabularyUsesUint32) {
  PrepareOptions o = options("wide");
  o.tokenizer = write_small_tokenizer(dir_ / "wide_tok", 70000);
  const PrepareSummary sum = prepare_token_dataset(o);
  EXPECT_EQ(sum.token_bytes, 4);
  EXPECT_EQ(sum.vocab_size, 70263);
  const TokenDataset train = TokenDataset::open(o.out_dir, "train");
  EXPECT_EQ(train.shards()[0].info().token_bytes, 4);
  const auto ids = all_tokens(train);
  EXPECT_EQ(std::count(ids.begin(), ids.end(), 70262), sum.train.documents - 1);
}

TEST_F(Prepare, DirectoryInputsSkipBinaryAndDuplicateFiles) {
  const fs::path in = dir_ / "corpus";
  fs::create_directories(in);
  write_file(in / "b", fortunes(5, 3));
  write_file(in / "a", fortunes(4, 4));
  write_file(in / "a.dat", std::string("\0\0\0\2index", 10));
  fs::create_symlink(in / "a", in / "a.u8");
  PrepareOptions o = options("out");
  o.inputs = {in.string()};
  std::vector<std::string> notes;
  o.note = [&](const std::string& n) { notes.push_back(n); };
  const PrepareSummary sum = prepare_token_dataset(o);
  EXPECT_EQ(sum.inputs, (std::vector<std::string>{(in / "a").string(), (in / "b").string()}));
  EXPECT_EQ(sum.train.documents + sum.val.documents, 9);
  ASSERT_EQ(notes.size(), 1u);
  EXPECT_NE(notes[0].find("skipped 1 that are not text and 1 already read"), std::string::npos)
      << notes[0];
  // Named explicitly, a binary file is an error.
  o.inputs = {(in / "a.dat").string()};
  expect_error([&] { prepare_token_dataset(o); }, {"a.dat", "not text"});
}

TEST_F(Prepare, BadOptionsAreRefused) {
  PrepareOptions o = options("out");
  o.tokenizer = (dir_ / "missing").string();
  expect_error([&] { prepare_token_dataset(o); }, {"tokenizer", "missing", "does not exist"});
  o = options("out");
  o.inputs.clear();
  expect_error([&] { prepare_token_dataset(o); }, {"no input files"});
  o = options("out");
  o.inputs.push_back((dir_ / "nope.txt").string());
  expect_error([&] { prepare_token_dataset(o); }, {"nope.txt", "does not exist"});
  for (double f : {-0.1, 1.0, 1.5, std::nan("")}) {
    o = options("out");
    o.val_fraction = f;
    expect_error([&] { prepare_token_dataset(o); }, {"val fraction", "[0, 1)"});
  }
  o = options("out");
  o.shard_tokens = 0;
  expect_error([&] { prepare_token_dataset(o); }, {"shard size 0"});
  o = options("out");
  o.inputs = {write_file(dir_ / "one.txt", "just one document\n")};
  expect_error([&] { prepare_token_dataset(o); }, {"at least 2 documents"});
  o.inputs = {write_file(dir_ / "blank.txt", "\n \n")};
  expect_error([&] { prepare_token_dataset(o); }, {"no text"});
  EXPECT_FALSE(fs::exists(fs::path(o.out_dir) / "manifest.json"));
}

TEST_F(Prepare, MissingOrForeignManifestIsRefused) {
  expect_error([&] { TokenDataset::open((dir_ / "nowhere").string(), "train"); },
               {"no manifest", "nowhere"});
  PrepareOptions o = options("out");
  prepare_token_dataset(o);
  // A shard from another preparation under the listed name.
  write_token_shard((fs::path(o.out_dir) / "val_000000.bin").string(), std::vector<int32_t>{1, 2},
                    Tokenizer::load(tokenizer_).vocab_size());
  expect_error([&] { TokenDataset::open(o.out_dir, "val"); },
               {"val_000000.bin", "does not match the manifest"});
}

}  // namespace
}  // namespace tessel::io
