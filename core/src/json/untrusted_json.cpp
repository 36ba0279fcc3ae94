#include "json/untrusted_json.hpp"

#include <nibble/error.hpp>
#include <nibble/untrusted_text.hpp>

#include <type_traits>
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
                     const char* const* reached)
      : root_(root), what_(what), max_values_(max_values), begin_(begin), reached_(reached) {}

  bool null() { return add(Json(nullptr)); }
  bool boolean(bool v) { return add(Json(v)); }
  bool number_integer(number_integer_t v) { return add(Json(v)); }
  bool number_unsigned(number_unsigned_t v) { return add(Json(v)); }
  bool number_float(number_float_t v, const string_t&) { return add(Json(v)); }
  bool string(string_t& v) { return add(Json(std::move(v))); }
  bool binary(binary_t&) { throw Error(what_ + ": binary values are not JSON"); }

  bool start_object(size_t) {
    open(add(Json::object()));
    keys_.emplace_back();
    return true;
  }
  bool key(string_t& k) {
    if (!keys_.back().insert(k).second) {
      throw Error(what_ + ": duplicate key " + quoted_untrusted(k) + " (ending at byte " +
                  std::to_string(offset()) + "); refusing to pick one");
    }
    auto& object = stack_.back()->template get_ref<typename Json::object_t&>();
    if constexpr (std::is_same_v<typename Json::object_t, nlohmann::ordered_map<string_t, Json>>) {
      using Container = typename Json::object_t::Container;
      static_cast<Container&>(object).emplace_back(k, Json());
      slot_ = &static_cast<Container&>(object).back().second;
    } else {
      slot_ = &object.emplace(k, Json()).first->second;
    }
    return true;
  }
  bool end_object() {
    keys_.pop_back();
    stack_.pop_back();
    return true;
  }
  bool start_array(size_t) {
    open(add(Json::array()));
    return true;
  }
  bool end_array() {
    stack_.pop_back();
    return true;
  }
  bool parse_error(size_t position, const std::string&, const nlohmann::detail::exception& e) {
    throw Error(what_ + ": not valid JSON at byte " + std::to_string(position) + " (" +
                json_error_text(e) + ")");
  }

 private:
  size_t offset() const { return size_t(*reached_ - begin_); }

  Json* add(Json value) {
    if (++values_ > max_values_) {
      throw Error(what_ + ": more than " + std::to_string(max_values_) + " JSON values (at byte " +
                  std::to_string(offset()) + "); refusing to parse it");
    }
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
  std::vector<std::unordered_set<string_t>> keys_;
  Json* slot_ = nullptr;
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
Json parse_json(std::string_view text, const std::string& what, size_t max_values) {
  refuse_nul(text, what);
  Json root;
  const char* reached = text.data();
  BudgetedDomBuilder<Json> builder(root, what, max_values, text.data(), &reached);
  Json::sax_parse(TrackedChars(text.data(), &reached),
                  TrackedChars(text.data() + text.size(), &reached), &builder);
  return root;
}

template nlohmann::json parse_json<nlohmann::json>(std::string_view, const std::string&, size_t);
template nlohmann::ordered_json parse_json<nlohmann::ordered_json>(std::string_view,
                                                                   const std::string&, size_t);

}  // namespace nibble::detail
