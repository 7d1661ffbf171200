// SPDX-License-Identifier: Apache-2.0
// Preparation of a token dataset: text files -> documents -> token ids (several threads, output
// independent of their number) -> train and val shards plus a manifest.json that lists them.
// The manifest is written last, so a directory with a manifest is complete.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace tessel::io {

// How a text file is cut into documents.
enum class DocumentSplit {
  Auto,     // Percent when the file has a line that is exactly "%", else File
  File,     // the whole file is one document
  Blank,    // paragraphs: runs of lines separated by blank (whitespace-only) lines
  Percent,  // the fortune format: documents separated by lines holding only "%"
};
std::optional<DocumentSplit> parse_document_split(std::string_view name);
const char* document_split_name(DocumentSplit split);

// Cuts text into documents (views into `text`); documents holding only whitespace are dropped.
std::vector<std::string_view> split_documents(std::string_view text, DocumentSplit split);

struct PrepareProgress {
  uint64_t bytes_done = 0;
  uint64_t bytes_total = 0;
  int64_t tokens = 0;
};

struct PrepareOptions {
  std::string tokenizer;            // a tokenizer directory or tokenizer.json
  std::vector<std::string> inputs;  // files, or directories (their text files, sorted by name)
  std::string out_dir;
  double val_fraction = 0.05;  // the last fraction of the documents; in [0, 1)
  int64_t shard_tokens = 100'000'000;
  bool append_eot = false;  // also end the last document of each split with <|endoftext|>
  DocumentSplit split = DocumentSplit::Auto;
  int threads = 0;                // 0: tessel::num_threads()
  size_t chunk_bytes = 1u << 20;  // long documents are encoded in pieces of about this size
  std::function<void(const PrepareProgress&)> progress;  // after each batch of documents
  std::function<void(const std::string&)> note;          // skipped inputs and similar notes
};

struct PrepareSplitSummary {
  int64_t documents = 0;
  int64_t tokens = 0;
  std::vector<std::string> shards;  // file names inside out_dir
};

struct PrepareSummary {
  int64_t vocab_size = 0;
  int token_bytes = 0;
  uint64_t input_bytes = 0;
  std::vector<std::string> inputs;  // the files read, in order
  PrepareSplitSummary train, val;
  std::string manifest;  // path of manifest.json
  double seconds = 0;
};

PrepareSummary prepare_token_dataset(const PrepareOptions& options);

}  // namespace tessel::io
