// SPDX-License-Identifier: Apache-2.0
// prepare_token_dataset: reads the inputs, cuts documents, tokenizes them on several threads in
// batches (each document's ids depend only on its text, so the output does not depend on the
// thread count), streams ids into shards of a fixed size, and writes the manifest last.
#include "tessel/io/token_dataset_prepare.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <iomanip>
#include <nlohmann/json.hpp>
#include <regex>
#include <set>
#include <sstream>
#include <thread>

#include "tessel/core/error.h"
#include "tessel/core/threads.h"
#include "tessel/io/mapped_file.h"
#include "tessel/io/token_shards.h"
#include "tessel/io/tokenizer.h"

namespace tessel::io {

namespace {

namespace fs = std::filesystem;

// A file whose first 64 KiB hold a NUL byte is not text (e.g. the .dat index of a fortune file).
bool looks_binary(const MappedFile& f) {
  const size_t n = std::min<size_t>(f.size(), 1u << 16);
  return n > 0 && std::find(f.data(), f.data() + n, uint8_t{0}) != f.data() + n;
}

struct Input {
  std::string path;
  std::shared_ptr<MappedFile> file;
  std::vector<std::string_view> documents;
};

// Inputs in order; a directory contributes its regular files sorted by name, without the binary
// ones; a file named twice (also through a link) is read once.
std::vector<Input> collect_inputs(const PrepareOptions& o) {
  TESSEL_CHECK(!o.inputs.empty(), "data prepare: no input files given");
  std::vector<Input> inputs;
  std::set<fs::path> seen;
  int64_t skipped_binary = 0, skipped_twice = 0;
  auto add = [&](const fs::path& path, bool from_dir) {
    std::error_code ec;
    const fs::path canonical = fs::canonical(path, ec);
    TESSEL_CHECK(!ec, "data prepare: input '", path.string(), "': ", ec.message());
    if (!seen.insert(canonical).second) {
      if (!from_dir && o.note) o.note("skipping '" + path.string() + "': already read");
      ++skipped_twice;
      return;
    }
    Input in{path.string(), MappedFile::open(path.string()), {}};
    if (looks_binary(*in.file)) {
      TESSEL_CHECK(
          from_dir, "data prepare: input '", path.string(),
          "' is not text (it holds NUL bytes); name its directory instead to skip such files");
      ++skipped_binary;
      return;
    }
    inputs.push_back(std::move(in));
  };
  for (const std::string& name : o.inputs) {
    std::error_code ec;
    const fs::path path(name);
    TESSEL_CHECK(fs::exists(path, ec), "data prepare: input '", name, "' does not exist");
    if (!fs::is_directory(path, ec)) {
      add(path, false);
      continue;
    }
    std::vector<fs::path> files;
    for (const auto& e : fs::directory_iterator(path)) {
      if (e.is_regular_file()) files.push_back(e.path());
    }
    std::sort(files.begin(), files.end());
    TESSEL_CHECK(!files.empty(), "data prepare: input directory '", name, "' has no files");
    const size_t before = inputs.size();
    skipped_binary = skipped_twice = 0;
    for (const auto& f : files) add(f, true);
    if (o.note && (skipped_binary > 0 || skipped_twice > 0)) {
      std::ostringstream note;
      note << "'" << name << "': reading " << inputs.size() - before << " text files; skipped "
           << skipped_binary << " that are not text and " << skipped_twice
           << " already read under another name";
      o.note(note.str());
    }
  }
  return inputs;
}

// Encoding a long document in pieces gives the same ids as encoding it whole when every cut is a
// pre-tokenizer boundary: after "\n" and before a printable ASCII character, no pattern of the
// GPT-2 or Llama-3 kind joins the two sides. The probe rejects tokenizers where it does not hold
// (a prefix space, for instance).
bool can_cut_at_newlines(const Tokenizer& tok) {
  std::vector<int32_t> joined = tok.encode("x\n"), whole = tok.encode("x\nThe");
  tok.encode_append("The", joined);
  return joined == whole && tok.decode_bytes(tok.encode("The")) == "The";
}

std::vector<std::string_view> cut(std::string_view doc, size_t chunk) {
  std::vector<std::string_view> pieces;
  while (doc.size() > chunk) {
    size_t i = chunk;
    while (i < doc.size() && !(doc[i - 1] == '\n' && doc[i] > ' ' && doc[i] <= '~')) ++i;
    if (i == doc.size()) break;
    pieces.push_back(doc.substr(0, i));
    doc.remove_prefix(i);
  }
  pieces.push_back(doc);
  return pieces;
}

std::string hex(uint64_t v) {
  std::ostringstream out;
  out << std::hex << v;
  return out.str();
}

// Removes what an earlier preparation left in `dir`: the manifest first (so the directory is never
// complete-looking with mixed shards), then the shards by their names.
void clear_previous(const fs::path& dir) {
  std::error_code ec;
  fs::remove(dir / "manifest.json", ec);
  static const std::regex shard_name(R"((train|val)_\d{6}\.bin)");
  for (const auto& e : fs::directory_iterator(dir)) {
    if (std::regex_match(e.path().filename().string(), shard_name)) fs::remove(e.path(), ec);
  }
}

class SplitWriter {
 public:
  SplitWriter(std::string name, const fs::path& dir, int64_t vocab, int64_t shard_tokens,
              nlohmann::json& shards)
      : name_(std::move(name)),
        dir_(dir),
        vocab_(vocab),
        shard_tokens_(shard_tokens),
        shards_(shards) {}

  void append(const int32_t* ids, size_t n) {
    while (n > 0) {
      const size_t take = std::min(n, size_t(shard_tokens_) - buffer_.size());
      buffer_.insert(buffer_.end(), ids, ids + take);
      ids += take;
      n -= take;
      tokens_ += int64_t(take);
      if (buffer_.size() == size_t(shard_tokens_)) flush();
    }
  }
  void flush() {
    if (buffer_.empty()) return;
    std::ostringstream file;
    file << name_ << "_" << std::setw(6) << std::setfill('0') << count_ << ".bin";
    const TokenShardInfo info = write_token_shard((dir_ / file.str()).string(), buffer_, vocab_);
    shards_.push_back(
        {{"file", file.str()}, {"tokens", info.tokens}, {"checksum", hex(info.checksum)}});
    files_.push_back(file.str());
    ++count_;
    buffer_.clear();
  }
  int64_t tokens() const { return tokens_; }
  const std::vector<std::string>& files() const { return files_; }

 private:
  std::string name_;
  fs::path dir_;
  int64_t vocab_, shard_tokens_;
  nlohmann::json& shards_;
  std::vector<int32_t> buffer_;
  std::vector<std::string> files_;
  int64_t tokens_ = 0;
  int count_ = 0;
};

// Encodes every piece into out[i] on `threads` threads. Pieces are claimed one at a time, so a
// long one does not hold up a fixed share of the others.
void encode_parallel(const Tokenizer& tok, const std::vector<std::string_view>& pieces, int threads,
                     std::vector<std::vector<int32_t>>& out) {
  out.assign(pieces.size(), {});
  std::atomic<size_t> next{0};
  auto work = [&] {
    for (size_t i = next++; i < pieces.size(); i = next++) tok.encode_append(pieces[i], out[i]);
  };
  std::vector<std::thread> pool;
  for (int t = 1; t < threads; ++t) pool.emplace_back(work);
  work();
  for (auto& t : pool) t.join();
}

}  // namespace

PrepareSummary prepare_token_dataset(const PrepareOptions& o) {
  const auto t0 = std::chrono::steady_clock::now();
  TESSEL_CHECK(std::isfinite(o.val_fraction) && o.val_fraction >= 0 && o.val_fraction < 1,
               "data prepare: val fraction ", o.val_fraction, " expected in [0, 1)");
  TESSEL_CHECK(o.shard_tokens >= 1, "data prepare: shard size ", o.shard_tokens,
               " tokens, expected at least 1");
  TESSEL_CHECK(!o.out_dir.empty(), "data prepare: no output directory given");
  TESSEL_CHECK(o.chunk_bytes >= 1, "data prepare: chunk size must be at least 1 byte");
  std::error_code ec;
  TESSEL_CHECK(!o.tokenizer.empty() && fs::exists(o.tokenizer, ec), "data prepare: tokenizer '",
               o.tokenizer, "' does not exist");
  const Tokenizer tok = Tokenizer::load(o.tokenizer);
  std::vector<Input> inputs = collect_inputs(o);

  PrepareSummary sum;
  sum.vocab_size = tok.vocab_size();
  sum.token_bytes = token_bytes_for_vocab(sum.vocab_size);
  std::vector<std::string_view> docs;
  nlohmann::json input_list = nlohmann::json::array();
  for (Input& in : inputs) {
    const std::string_view text(reinterpret_cast<const char*>(in.file->data()), in.file->size());
    in.documents = split_documents(text, o.split);
    docs.insert(docs.end(), in.documents.begin(), in.documents.end());
    sum.input_bytes += text.size();
    sum.inputs.push_back(in.path);
    input_list.push_back(
        {{"path", in.path}, {"bytes", text.size()}, {"documents", in.documents.size()}});
  }
  const int64_t n_docs = int64_t(docs.size());
  TESSEL_CHECK(n_docs > 0, "data prepare: the inputs hold no text (", inputs.size(), " file(s))");
  int64_t n_val = std::llround(o.val_fraction * double(n_docs));
  if (o.val_fraction > 0) {
    TESSEL_CHECK(n_docs >= 2, "data prepare: val fraction ", o.val_fraction,
                 " needs at least 2 documents, the inputs hold 1 (use --split blank or percent, "
                 "or --val-fraction 0)");
    n_val = std::clamp<int64_t>(n_val, 1, n_docs - 1);
  }
  const std::optional<int32_t> eot = tok.special_token_id("<|endoftext|>");
  TESSEL_CHECK(eot.has_value() || (n_docs - n_val <= 1 && n_val <= 1 && !o.append_eot),
               "data prepare: tokenizer '", o.tokenizer,
               "' has no <|endoftext|> token to separate documents");

  const fs::path out(o.out_dir);
  fs::create_directories(out, ec);
  const std::string why = ec ? ec.message() : "it exists and is not a directory";
  TESSEL_CHECK(!ec && fs::is_directory(out, ec), "data prepare: cannot create output directory '",
               o.out_dir, "': ", why);
  clear_previous(out);

  const bool cuttable = can_cut_at_newlines(tok);
  const int threads = o.threads > 0 ? o.threads : num_threads();
  const size_t batch_bytes = size_t(threads) * std::max<size_t>(o.chunk_bytes, 1u << 18);
  nlohmann::json splits = nlohmann::json::object();
  PrepareProgress progress{0, sum.input_bytes, 0};
  std::vector<std::string_view> pieces;
  std::vector<int64_t> piece_doc;  // the document (relative to the batch) of each piece
  std::vector<std::vector<int32_t>> encoded;

  for (int s = 0; s < 2; ++s) {
    const bool train = s == 0;
    const int64_t doc_begin = train ? 0 : n_docs - n_val, doc_end = train ? n_docs - n_val : n_docs;
    PrepareSplitSummary& split = train ? sum.train : sum.val;
    splits[train ? "train" : "val"] = {{"documents", doc_end - doc_begin},
                                       {"shards", nlohmann::json::array()}};
    nlohmann::json& entry = splits[train ? "train" : "val"];
    SplitWriter writer(train ? "train" : "val", out, sum.vocab_size, o.shard_tokens,
                       entry["shards"]);
    for (int64_t d = doc_begin; d < doc_end;) {
      // One batch: whole documents until about batch_bytes of text.
      pieces.clear();
      piece_doc.clear();
      size_t bytes = 0;
      while (d < doc_end && (bytes < batch_bytes || pieces.empty())) {
        for (std::string_view p : cuttable ? cut(docs[size_t(d)], o.chunk_bytes)
                                           : std::vector<std::string_view>{docs[size_t(d)]}) {
          pieces.push_back(p);
          piece_doc.push_back(d);
        }
        bytes += docs[size_t(d)].size();
        ++d;
      }
      encode_parallel(tok, pieces, threads, encoded);
      for (size_t i = 0; i < pieces.size(); ++i) {
        const bool doc_start = i == 0 || piece_doc[i] != piece_doc[i - 1];
        if (doc_start && piece_doc[i] > doc_begin && !o.append_eot) writer.append(&*eot, 1);
        writer.append(encoded[i].data(), encoded[i].size());
        const bool doc_end_piece = i + 1 == pieces.size() || piece_doc[i + 1] != piece_doc[i];
        if (doc_end_piece && o.append_eot) writer.append(&*eot, 1);
      }
      progress.bytes_done += bytes;
      progress.tokens = sum.train.tokens + writer.tokens();
      if (o.progress) o.progress(progress);
    }
    writer.flush();
    split.documents = doc_end - doc_begin;
    split.tokens = writer.tokens();
    split.shards = writer.files();
    entry["tokens"] = split.tokens;
  }
  progress.bytes_done = progress.bytes_total;
  progress.tokens = sum.train.tokens + sum.val.tokens;
  if (o.progress) o.progress(progress);

  sum.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const nlohmann::json manifest = {
      {"format", "tessel-token-dataset"},
      {"version", 1},
      {"tokenizer",
       // Absolute, so a trainer started elsewhere finds the tokenizer for its samples.
       {{"path", fs::absolute(o.tokenizer).lexically_normal().string()},
        {"vocab_size", sum.vocab_size},
        {"eot_id", eot.has_value() ? nlohmann::json(*eot) : nlohmann::json(nullptr)}}},
      {"dtype", sum.token_bytes == 2 ? "uint16" : "uint32"},
      {"options",
       {{"val_fraction", o.val_fraction},
        {"shard_tokens", o.shard_tokens},
        {"append_eot", o.append_eot},
        {"split", document_split_name(o.split)}}},
      {"inputs", input_list},
      {"input_bytes", sum.input_bytes},
      {"splits", splits},
      {"seconds", sum.seconds}};
  const std::string text = manifest.dump(2) + "\n";
  sum.manifest = (out / "manifest.json").string();
  write_file_atomic(sum.manifest, text.data(), text.size());
  return sum;
}

}  // namespace tessel::io
