// SPDX-License-Identifier: Apache-2.0
// StreamDecoder: ids in one at a time, complete text out. SentencePiece-style models decode as a
// stream natively (their whole-sequence decode is the same stream). Byte-level BPE holds back
// the bytes of a character that is still incomplete: the longest suffix that is a proper prefix
// of a well-formed UTF-8 sequence (Unicode Table 3-7). Everything before it is repaired as
// decode() would: a maximal ill-formed subpart never reaches across a lead byte, so repairing the
// text in two parts cut before a lead byte gives the same result as repairing it whole.
#include "tessel/core/error.h"
#include "tessel/io/byte_level.h"
#include "tessel/io/tokenizer.h"
#include "tessel/io/tokenizer_model.h"

namespace tessel::io {
namespace {

// Where the unfinished character at the end of `bytes` starts (bytes.size() when there is none).
size_t incomplete_tail(std::string_view bytes) {
  const size_t n = bytes.size();
  for (size_t k = 1; k <= 3 && k <= n; ++k) {
    const size_t p = n - k;
    const uint8_t lead = uint8_t(bytes[p]);
    if ((lead & 0xC0) == 0x80) continue;  // a continuation byte: look further back
    size_t need = 0;
    uint8_t lo = 0x80, hi = 0xBF;  // allowed range of the second byte
    if (lead >= 0xC2 && lead <= 0xDF) {
      need = 2;
    } else if (lead >= 0xE0 && lead <= 0xEF) {
      need = 3;
      if (lead == 0xE0) lo = 0xA0;
      if (lead == 0xED) hi = 0x9F;
    } else if (lead >= 0xF0 && lead <= 0xF4) {
      need = 4;
      if (lead == 0xF0) lo = 0x90;
      if (lead == 0xF4) hi = 0x8F;
    }
    if (need <= k) return n;  // complete, or not a lead byte at all
    for (size_t i = p + 1; i < n; ++i) {
      const uint8_t b = uint8_t(bytes[i]);
      const bool ok = i == p + 1 ? (b >= lo && b <= hi) : (b >= 0x80 && b <= 0xBF);
      if (!ok) return n;  // already ill-formed: nothing to wait for
    }
    return p;
  }
  return n;
}

class ByteLevelStream final : public detail::DecodeStream {
 public:
  explicit ByteLevelStream(const Tokenizer& tok) : tok_(tok) {}

  void push(int32_t id, std::string& out) override {
    pending_ += tok_.decode_bytes(std::span<const int32_t>(&id, 1));
    const size_t cut = incomplete_tail(pending_);
    out += repair_utf8(std::string_view(pending_).substr(0, cut));
    pending_.erase(0, cut);
  }
  void finish(std::string& out) override {
    out += repair_utf8(pending_);
    pending_.clear();
  }

 private:
  const Tokenizer tok_;  // a copy (shares the vocabulary), so moving a StreamDecoder is safe
  std::string pending_;
};

}  // namespace

StreamDecoder::StreamDecoder(const Tokenizer& tokenizer) : tokenizer_(tokenizer) {
  if (tokenizer_.impl_model()) {
    stream_ = tokenizer_.impl_model()->decoder(false);
  } else {
    stream_ = std::make_unique<ByteLevelStream>(tokenizer_);
  }
}

StreamDecoder::~StreamDecoder() = default;
StreamDecoder::StreamDecoder(StreamDecoder&&) noexcept = default;
StreamDecoder& StreamDecoder::operator=(StreamDecoder&&) noexcept = default;

std::string StreamDecoder::push(int32_t id) {
  const int64_t n = tokenizer_.vocab_size();
  TESSEL_CHECK(id >= 0 && id < n, "tokenizer stream decode: id ", id, " is out of range [0, ", n,
               ")");
  std::string out;
  stream_->push(id, out);
  return out;
}

std::string StreamDecoder::finish() {
  std::string out;
  stream_->finish(out);
  return out;
}

StreamDecoder Tokenizer::stream_decoder() const {
  return StreamDecoder(*this);
}

}  // namespace tessel::io
