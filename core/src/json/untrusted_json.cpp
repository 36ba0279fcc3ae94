#include "json/untrusted_json.hpp"

#include <nibble/error.hpp>
#include <nibble/untrusted_text.hpp>

#include <algorithm>
#include <unordered_set>
#include <vector>

namespace nibble::detail {
namespace {

// Builds the DOM from SAX events, as nlohmann's own builder does, plus the budget and the refusal
// of duplicate keys (nlohmann keeps the last). Objects of ordered_json are appended to directly:
// its operator[] searches linearly, which made a config with many keys take quadratic time.
template <class Json>
class BudgetedDomBuilder {
 public:
  using number_integer_t = typename Json::number_integer_t;
  using number_unsigned_t = typename Json::number_unsigned_t;
  using number_float_t = typename Json::number_float_t;
  using string_t = typename Json::string_t;
  using binary_t = typename Json::binary_t;

  BudgetedDomBuilder(Json& root, const std::string& what, size_t max_values, const char* begin,
                     const char* const* reached, const std::vector<std::string>* keep)
      : root_(root),
        what_(what),
        max_values_(max_values),
        begin_(begin),
        reached_(reached),
        keep_(keep) {}

  bool null() { return scalar(nullptr); }
  bool boolean(bool v) { return scalar(v); }
  bool number_integer(number_integer_t v) { return scalar(v); }
  bool number_unsigned(number_unsigned_t v) { return scalar(v); }
  bool number_float(number_float_t v, const string_t&) { return scalar(v); }
  bool string(string_t& v) { return scalar(std::move(v)); }
  bool binary(binary_t&) { throw Error(what_ + ": binary values are not JSON"); }

  bool start_object(size_t) {
    if (skipping()) return nest();
    open(add(Json::object()));
    if constexpr (kOrdered) keys_.emplace_back();
    return true;
  }
  bool key(string_t& k) {
    if (skip_depth_ > 0) return true;
    // A top-level value the caller does not want is read past without being built.
    skip_next_ =
        keep_ && stack_.size() == 1 && std::find(keep_->begin(), keep_->end(), k) == keep_->end();
    auto& object = stack_.back()->template get_ref<typename Json::object_t&>();
    bool inserted = true;
    if constexpr (kOrdered) {
      // ordered_map's own insertion searches linearly; a hash set finds duplicates instead.
      // Skipped keys are not kept: nothing reads them, so a repeat of one changes nothing.
      inserted = skip_next_ || keys_.back().insert(k).second;
      if (inserted && !skip_next_) {
        using Container = typename Json::object_t::Container;
        static_cast<Container&>(object).emplace_back(k, Json());
        slot_ = &static_cast<Container&>(object).back().second;
      }
    } else {
      auto [it, fresh] = object.emplace(k, Json());
      inserted = fresh;
      slot_ = &it->second;
    }
    if (!inserted) {
      throw Error(what_ + ": duplicate key " + quoted_untrusted(k) + " (ending at byte " +
                  std::to_string(offset()) + "); refusing to pick one");
    }
    return true;
  }
  bool end_object() {
    if (skip_depth_ > 0) return unnest();
    if constexpr (kOrdered) keys_.pop_back();
    stack_.pop_back();
    return true;
  }
  bool start_array(size_t) {
    if (skipping()) return nest();
    open(add(Json::array()));
    return true;
  }
  bool end_array() {
    if (skip_depth_ > 0) return unnest();
    stack_.pop_back();
    return true;
  }
  bool parse_error(size_t position, const std::string&, const nlohmann::detail::exception& e) {
    throw Error(what_ + ": not valid JSON at byte " + std::to_string(position) + " (" +
                json_error_text(e) + ")");
  }

 private:
  static constexpr bool kOrdered = requires { typename Json::object_t::Container; };

  size_t offset() const { return size_t(*reached_ - begin_); }

  // Whether the value that starts now is inside (or is) a skipped top-level value.
  bool skipping() {
    if (skip_depth_ > 0) return true;
    if (!skip_next_) return false;
    skip_next_ = false;
    return true;
  }
  bool nest() {
    count();
    if (++skip_depth_ + int(stack_.size()) > kMaxJsonDepth) {
      throw Error(what_ + ": JSON nests deeper than " + std::to_string(kMaxJsonDepth) +
                  " levels (at byte " + std::to_string(offset()) + "); refusing to parse it");
    }
    return true;
  }
  bool unnest() {
    --skip_depth_;
    return true;
  }
  template <class V>
  bool scalar(V&& v) {
    if (skipping()) {
      count();
      return true;
    }
    add(Json(std::forward<V>(v)));
    return true;
  }
  void count() {
    if (++values_ > max_values_) {
      throw Error(what_ + ": more than " + std::to_string(max_values_) + " JSON values (at byte " +
                  std::to_string(offset()) + "); refusing to parse it");
    }
  }

  Json* add(Json value) {
    count();
    if (stack_.empty()) {
      root_ = std::move(value);
      return &root_;
    }
    Json* parent = stack_.back();
    if (parent->is_array()) {
      auto& array = parent->template get_ref<typename Json::array_t&>();
      array.push_back(std::move(value));
      return &array.back();
    }
    *slot_ = std::move(value);
    return slot_;
  }
  void open(Json* container) {
    if (stack_.size() >= size_t(kMaxJsonDepth)) {
      throw Error(what_ + ": JSON nests deeper than " + std::to_string(kMaxJsonDepth) +
                  " levels (at byte " + std::to_string(offset()) + "); refusing to parse it");
    }
    stack_.push_back(container);
  }

  Json& root_;
  const std::string& what_;
  size_t max_values_;
  size_t values_ = 0;
  const char* begin_;
  const char* const* reached_;
  std::vector<Json*> stack_;
  const std::vector<std::string>* keep_;
  std::vector<std::unordered_set<string_t>> keys_;  // ordered_json only
  Json* slot_ = nullptr;
  bool skip_next_ = false;
  int skip_depth_ = 0;
};

}  // namespace

void check_json_depth(std::string_view text, const std::string& what) {
  int depth = 0;
  bool in_string = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (c == '\\') {
        ++i;
      } else if (c == '"') {
        in_string = false;
      }
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > kMaxJsonDepth) {
        throw Error(what + ": JSON nests deeper than " + std::to_string(kMaxJsonDepth) +
                    " levels (at byte " + std::to_string(i) + "); refusing to parse it");
      }
    } else if (c == ']' || c == '}') {
      --depth;
    }
  }
}

void refuse_nul(std::string_view text, const std::string& what) {
  const size_t nul = text.find('\0');
  if (nul != std::string_view::npos) {
    throw Error(what + ": NUL byte at byte " + std::to_string(nul) +
                " (JSON text cannot contain one; nothing after it would be read)");
  }
}

std::string json_error_text(const std::exception& e) { return escape_untrusted(e.what(), 400); }

template <class Json>
Json parse_json(std::string_view text, const std::string& what, size_t max_values,
                const std::vector<std::string>* keep_top_level) {
  refuse_nul(text, what);
  Json root;
  const char* reached = text.data();
  BudgetedDomBuilder<Json> builder(root, what, max_values, text.data(), &reached, keep_top_level);
  Json::sax_parse(TrackedChars(text.data(), &reached),
                  TrackedChars(text.data() + text.size(), &reached), &builder);
  return root;
}

template nlohmann::json parse_json<nlohmann::json>(std::string_view, const std::string&, size_t,
                                                   const std::vector<std::string>*);
template nlohmann::ordered_json parse_json<nlohmann::ordered_json>(std::string_view,
                                                                   const std::string&, size_t,
                                                                   const std::vector<std::string>*);

}  // namespace nibble::detail
