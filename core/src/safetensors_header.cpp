#include "safetensors_header.hpp"
#include "text/name_text.hpp"

#include <nibble/error.hpp>
#include <nibble/untrusted_text.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <numeric>

#include "json/untrusted_json.hpp"

namespace nibble::detail {
namespace {

constexpr uint64_t kHeaderStart = 8;  // the header follows the 8-byte length

class HeaderReader {
 public:
  using number_integer_t = nlohmann::json::number_integer_t;
  using number_unsigned_t = nlohmann::json::number_unsigned_t;
  using number_float_t = nlohmann::json::number_float_t;
  using string_t = std::string;
  using binary_t = nlohmann::json::binary_t;

  HeaderReader(ParsedHeader& out, const std::string& label, const char* begin,
               const char* const* reached)
      : out_(out), label_(label), begin_(begin), reached_(reached) {}

  bool null() { return scalar("null", nullptr, nullptr); }
  bool boolean(bool) { return scalar("boolean", nullptr, nullptr); }
  bool number_integer(number_integer_t v) {
    if (v >= 0) {
      uint64_t u = uint64_t(v);
      return scalar("number", &u, nullptr);
    }
    return scalar("negative number", nullptr, nullptr);
  }
  bool number_unsigned(number_unsigned_t v) { return scalar("number", &v, nullptr); }
  bool number_float(number_float_t, const string_t&) {
    return scalar("non-integer number", nullptr, nullptr);
  }
  bool string(string_t& v) { return scalar("string", nullptr, &v); }
  bool binary(binary_t&) { throw fail("binary values are not JSON"); }

  bool start_object(size_t) {
    if (skip_ > 0) return nest();
    switch (state_) {
      case State::Start:
        state_ = State::Top;
        return true;
      case State::Top:
        if (top_key_is_metadata_) {
          state_ = State::Metadata;
        } else {
          state_ = State::Entry;
          fields_seen_.clear();
          has_dtype_ = has_shape_ = has_offsets_ = false;
        }
        return true;
      case State::Entry:
        return container_in_entry("object");
      default:
        return scalar("object", nullptr, nullptr);
    }
  }
  bool end_object() {
    if (skip_ > 0) return unnest();
    if (state_ == State::Metadata) {
      state_ = State::Top;
    } else if (state_ == State::Entry) {
      finish_entry();
      state_ = State::Top;
    } else {
      state_ = State::Done;
    }
    return true;
  }
  bool start_array(size_t) {
    if (skip_ > 0) return nest();
    if (state_ == State::Entry) return container_in_entry("array");
    return scalar("array", nullptr, nullptr);
  }
  bool end_array() {
    if (skip_ > 0) return unnest();
    state_ = State::Entry;
    return true;
  }
  bool key(string_t& k) {
    if (skip_ > 0) return true;
    if (state_ == State::Top) {
      top_key_is_metadata_ = k == "__metadata__";
      if (top_key_is_metadata_) {
        if (seen_metadata_) throw fail("__metadata__ appears twice");
        seen_metadata_ = true;
        return true;
      }
      if (out_.tensors.size() >= kMaxTensorsPerFile) {
        throw fail(
            fmt::format("more than {} tensors; refusing to read the header", kMaxTensorsPerFile));
      }
      entry_ = HeaderEntry{};
      entry_.name = std::move(k);
      entry_.key_at = offset();
    } else if (state_ == State::Metadata) {
      if (out_.metadata.count(k)) {
        throw fail(fmt::format("__metadata__ key {} appears twice", detail::name_text(k)));
      }
      if (out_.metadata.size() >= kMaxTensorsPerFile) {
        throw fail(fmt::format("__metadata__ holds more than {} keys", kMaxTensorsPerFile));
      }
      meta_key_ = std::move(k);
    } else if (state_ == State::Entry) {
      if (std::find(fields_seen_.begin(), fields_seen_.end(), k) != fields_seen_.end()) {
        throw fail_entry(fmt::format("key {} appears twice", detail::name_text(k)));
      }
      if (fields_seen_.size() < 16) fields_seen_.push_back(k);
      field_ = std::move(k);
    }
    return true;
  }
  bool parse_error(size_t position, const std::string&, const nlohmann::detail::exception& e) {
    throw Error(fmt::format("safetensors file {}: header is not valid JSON at byte {} ({})", label_,
                            kHeaderStart + position - 1, json_error_text(e)));
  }

 private:
  enum class State { Start, Top, Metadata, Entry, Shape, Offsets, Done };

  uint64_t offset() const { return kHeaderStart + uint64_t(*reached_ - begin_); }

  Error fail(const std::string& what) const {
    return Error(fmt::format("safetensors file {}: {} (at byte {})", label_, what, offset()));
  }
  Error fail_entry(const std::string& what) const {
    return fail(fmt::format("tensor {}: {}", detail::name_text(entry_.name), what));
  }

  bool nest() {
    if (++skip_ > kMaxJsonDepth) throw fail("JSON nests too deep");
    return true;
  }
  bool unnest() {
    --skip_;
    return true;
  }

  bool container_in_entry(const char* type) {
    const bool array = std::string_view(type) == "array";
    if (field_ == "shape" && array) {
      state_ = State::Shape;
      has_shape_ = true;
      return true;
    }
    if (field_ == "data_offsets" && array) {
      state_ = State::Offsets;
      has_offsets_ = true;
      offsets_count_ = 0;
      return true;
    }
    if (field_ == "dtype" || field_ == "shape" || field_ == "data_offsets") {
      return scalar(type, nullptr, nullptr);
    }
    skip_ = 1;  // a key the format does not define: its value is read past, not kept
    return true;
  }

  bool scalar(const char* type, const uint64_t* number, std::string* text) {
    if (skip_ > 0) return true;
    switch (state_) {
      case State::Start:
        throw fail(fmt::format("header is JSON {} but must be an object", type));
      case State::Top:
        if (top_key_is_metadata_) {
          throw fail(fmt::format("__metadata__ must be an object of strings, found {}", type));
        }
        throw fail_entry(fmt::format("entry is {}, expected an object", type));
      case State::Metadata:
        if (!text) {
          throw fail(fmt::format("__metadata__[{}] must be a string, found {}",
                                 detail::name_text(meta_key_), type));
        }
        out_.metadata.emplace(std::move(meta_key_), std::move(*text));
        return true;
      case State::Entry:
        if (field_ == "dtype") {
          if (!text) throw fail_entry(fmt::format("\"dtype\" is {}, expected a string", type));
          auto dtype = parse_dtype(*text);
          if (!dtype) {
            throw fail_entry(
                fmt::format("unknown dtype \"{}\" (supported: F16, BF16, F32, F64, I8, U8, "
                            "I16, I32, I64, BOOL)",
                            detail::name_text(*text)));
          }
          entry_.dtype = *dtype;
          has_dtype_ = true;
        } else if (field_ == "shape" || field_ == "data_offsets") {
          throw fail_entry(fmt::format("\"{}\" is {}, expected an array", field_, type));
        }
        return true;
      case State::Shape:
        if (!number || *number > uint64_t(INT64_MAX)) {
          throw fail_entry(
              fmt::format("shape has a dimension that is not a non-negative "
                          "integer (found a {})",
                          type));
        }
        if (entry_.shape.size() >= kMaxRank) {
          throw fail_entry(fmt::format("rank {} exceeds {}", entry_.shape.size() + 1, kMaxRank));
        }
        entry_.shape.push_back(int64_t(*number));
        return true;
      case State::Offsets:
        if (!number) {
          throw fail_entry(
              fmt::format("a data_offsets value is {}, expected a non-negative integer", type));
        }
        if (offsets_count_ >= 2) throw fail_entry("data_offsets is not a [begin, end] pair");
        (offsets_count_++ == 0 ? entry_.begin : entry_.end) = *number;
        return true;
      case State::Done:
        return true;
    }
    return true;
  }

  void finish_entry() {
    if (!has_dtype_) throw fail_entry("missing \"dtype\"");
    if (!has_shape_) throw fail_entry("missing \"shape\"");
    if (!has_offsets_ || offsets_count_ != 2) {
      throw fail_entry("missing \"data_offsets\" or not a [begin, end] pair");
    }
    const std::string shape = fmt::format("[{}]", fmt::join(entry_.shape, ", "));
    // Every product of dimensions must fit in int64 (zeros aside), so no later size computation
    // can overflow even for an empty tensor.
    uint64_t numel = 1, nonzero = 1;
    bool empty = false;
    for (int64_t d : entry_.shape) {
      if (d == 0) {
        empty = true;
        continue;
      }
      if (__builtin_mul_overflow(nonzero, uint64_t(d), &nonzero) || nonzero > uint64_t(INT64_MAX))
        throw fail_entry(
            fmt::format("shape {} overflows (more elements than fit in 64 bits)", shape));
    }
    numel = empty ? 0 : nonzero;
    uint64_t nbytes = 0;
    if (__builtin_mul_overflow(numel, uint64_t(dtype_size(entry_.dtype)), &nbytes)) {
      throw fail_entry(fmt::format("shape {} overflows in bytes", shape));
    }
    if (entry_.begin > entry_.end) {
      throw fail_entry(
          fmt::format("data_offsets [{}, {}] are not two non-negative integers "
                      "begin <= end",
                      entry_.begin, entry_.end));
    }
    if (entry_.end - entry_.begin != nbytes) {
      throw fail_entry(
          fmt::format("data_offsets [{}, {}] span {} bytes but dtype {} x shape {} "
                      "needs {}",
                      entry_.begin, entry_.end, entry_.end - entry_.begin,
                      safetensors_dtype_name(entry_.dtype), shape, nbytes));
    }
    entry_.nbytes = nbytes;
    out_.tensors.push_back(std::move(entry_));
  }

  ParsedHeader& out_;
  const std::string& label_;
  const char* begin_;
  const char* const* reached_;
  State state_ = State::Start;
  int skip_ = 0;
  bool top_key_is_metadata_ = false;
  bool seen_metadata_ = false;
  std::string meta_key_;
  std::string field_;
  std::vector<std::string> fields_seen_;
  HeaderEntry entry_;
  bool has_dtype_ = false, has_shape_ = false, has_offsets_ = false;
  int offsets_count_ = 0;
};

}  // namespace

ParsedHeader parse_safetensors_header(std::string_view text, const std::string& label) {
  const size_t nul = text.find('\0');
  if (nul != std::string_view::npos) {
    throw Error(
        fmt::format("safetensors file {}: NUL byte in the header at byte {} (nothing "
                    "may follow the JSON object but spaces)",
                    label, kHeaderStart + nul));
  }
  check_json_depth(text, "safetensors file " + label + " header");
  ParsedHeader out;
  const char* reached = text.data();
  HeaderReader reader(out, label, text.data(), &reached);
  nlohmann::json::sax_parse(TrackedChars(text.data(), &reached),
                            TrackedChars(text.data() + text.size(), &reached), &reader);
  // Duplicate names: nlohmann would keep the last entry; the format (and the reference reader)
  // refuses the file.
  std::vector<size_t> order(out.tensors.size());
  std::iota(order.begin(), order.end(), size_t(0));
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    const auto& x = out.tensors[a];
    const auto& y = out.tensors[b];
    return x.name != y.name ? x.name < y.name : x.key_at < y.key_at;
  });
  for (size_t i = 1; i < order.size(); ++i) {
    const auto& prev = out.tensors[order[i - 1]];
    const auto& cur = out.tensors[order[i]];
    if (prev.name == cur.name) {
      throw Error(
          fmt::format("safetensors file {}: tensor {} appears twice in the header (at "
                      "bytes {} and {}); refusing to pick one",
                      label, detail::name_text(cur.name), prev.key_at, cur.key_at));
    }
  }
  return out;
}

}  // namespace nibble::detail
