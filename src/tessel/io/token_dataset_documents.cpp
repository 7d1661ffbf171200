// SPDX-License-Identifier: Apache-2.0
// Cutting text files into documents: whole files, blank-line paragraphs, or the fortune format
// (documents separated by lines holding only "%").
#include <algorithm>

#include "tessel/io/token_dataset_prepare.h"

namespace tessel::io {

namespace {

bool is_blank(std::string_view s) {
  return std::all_of(s.begin(), s.end(), [](char c) {
    return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f';
  });
}

// The line starting at `pos` without its "\n" (and "\r"), and where the next line starts.
std::string_view line_at(std::string_view text, size_t pos, size_t& next) {
  size_t end = text.find('\n', pos);
  next = end == std::string_view::npos ? text.size() : end + 1;
  if (end == std::string_view::npos) end = text.size();
  std::string_view line = text.substr(pos, end - pos);
  if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
  return line;
}

bool has_percent_line(std::string_view text) {
  for (size_t pos = 0, next = 0; pos < text.size(); pos = next) {
    if (line_at(text, pos, next) == "%") return true;
  }
  return false;
}

// Documents are the text between separator lines (which are dropped).
template <typename IsSeparator>
std::vector<std::string_view> split_lines(std::string_view text, IsSeparator is_separator) {
  std::vector<std::string_view> docs;
  size_t start = 0;
  auto flush = [&](size_t end) {
    std::string_view doc = text.substr(start, end - start);
    if (!is_blank(doc)) docs.push_back(doc);
  };
  for (size_t pos = 0, next = 0; pos < text.size(); pos = next) {
    if (is_separator(line_at(text, pos, next))) {
      flush(pos);
      start = next;
    }
  }
  flush(text.size());
  return docs;
}

}  // namespace

std::optional<DocumentSplit> parse_document_split(std::string_view name) {
  for (DocumentSplit s :
       {DocumentSplit::Auto, DocumentSplit::File, DocumentSplit::Blank, DocumentSplit::Percent}) {
    if (name == document_split_name(s)) return s;
  }
  return std::nullopt;
}

const char* document_split_name(DocumentSplit split) {
  switch (split) {
    case DocumentSplit::Auto:
      return "auto";
    case DocumentSplit::File:
      return "file";
    case DocumentSplit::Blank:
      return "blank";
    case DocumentSplit::Percent:
      return "percent";
  }
  return "?";
}

std::vector<std::string_view> split_documents(std::string_view text, DocumentSplit split) {
  if (split == DocumentSplit::Auto) {
    split = has_percent_line(text) ? DocumentSplit::Percent : DocumentSplit::File;
  }
  switch (split) {
    case DocumentSplit::Percent:
      return split_lines(text, [](std::string_view line) { return line == "%"; });
    case DocumentSplit::Blank:
      return split_lines(text, [](std::string_view line) { return is_blank(line); });
    default:
      if (is_blank(text)) return {};
      return {text};
  }
}

}  // namespace tessel::io
