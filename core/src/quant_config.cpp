// Parsing quantization configs. Every key that changes the on-disk layout is either honoured or
// refused by name; informational keys are accepted and ignored on purpose.
#include <nibble/error.hpp>
#include <nibble/quant_config.hpp>

#include <fmt/format.h>
#include <re2/re2.h>

#include <nibble/untrusted_text.hpp>

#include <algorithm>

#include "io/regular_file.hpp"
#include "json/untrusted_json.hpp"

namespace nibble {

namespace {

using ojson = nlohmann::ordered_json;

constexpr size_t kMaxConfigBytes = 16u << 20;
constexpr size_t kMaxPatternLength = 256;
// Every module name is matched against every entry, so the lists are bounded (real checkpoints
// carry tens to hundreds).
constexpr size_t kMaxModulesToNotConvert = 4096;
constexpr size_t kMaxDynamicRules = 1024;

// A JSON value from the config as messages show it: its JSON spelling, escaped and cut short.
std::string shown(const ojson& v) { return escape_untrusted(v.dump(), 200); }
std::string shown(const std::string& s) {
  std::string out = "\"";
  out += escape_untrusted(s, 200);
  out += '"';
  return out;
}

std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(),
                 [](unsigned char c) { return char(std::tolower(c)); });
  return s;
}

// The value of the first present key among `keys`, looked up at the top level and then in
// GPTQModel's `meta` object; nullptr when none is present (or the value is null).
const ojson* lookup(const ojson& obj, std::initializer_list<const char*> keys,
                    bool meta_too = false) {
  for (const char* k : keys) {
    auto it = obj.find(k);
    if (it != obj.end() && !it->is_null()) return &*it;
  }
  if (meta_too) {
    auto meta = obj.find("meta");
    if (meta != obj.end() && meta->is_object()) return lookup(*meta, keys, false);
  }
  return nullptr;
}

int get_int(const ojson& v, const std::string& key, const std::string& source) {
  if (!v.is_number_integer()) {
    throw Error(
        fmt::format("{}: quantization_config {} = {} must be an integer", source, key, shown(v)));
  }
  if (v.is_number_unsigned() ? v.get<uint64_t>() > uint64_t(INT32_MAX)
                             : (v.get<int64_t>() < INT32_MIN || v.get<int64_t>() > INT32_MAX)) {
    throw Error(fmt::format("{}: quantization_config {} = {} is out of range [{}, {}]", source, key,
                            shown(v), INT32_MIN, INT32_MAX));
  }
  return int(v.get<int64_t>());
}

bool get_bool(const ojson& v, const std::string& key, const std::string& source) {
  if (!v.is_boolean()) {
    throw Error(fmt::format("{}: quantization_config {} = {} must be true or false", source, key,
                            shown(v)));
  }
  return v.get<bool>();
}

std::string get_string(const ojson& v, const std::string& key, const std::string& source) {
  if (!v.is_string()) {
    throw Error(
        fmt::format("{}: quantization_config {} = {} must be a string", source, key, shown(v)));
  }
  return v.get<std::string>();
}

void check_bits(int bits, QuantMethod method, const std::string& where, const std::string& source) {
  if (method == QuantMethod::Awq && bits != 4) {
    throw Error(
        fmt::format("{}: {} bits={} is not supported (AWQ GEMM supports 4)", source, where, bits));
  }
  if (bits != 4 && bits != 8) {
    throw Error(fmt::format("{}: {} bits={} is not supported (nibble supports 4 and 8)", source,
                            where, bits));
  }
}

void check_group_size(int gs, const std::string& where, const std::string& source) {
  if (gs != -1 && gs <= 0) {
    throw Error(fmt::format("{}: {} group_size={} is not valid (expected a positive size or -1)",
                            source, where, gs));
  }
}

DynamicRule parse_dynamic_rule(const std::string& key, const ojson& value, const QuantConfig& cfg,
                               const std::string& source) {
  DynamicRule rule;
  std::string pattern = key;
  if (pattern.starts_with("-:")) {
    rule.skip = true;
    pattern = pattern.substr(2);
  } else if (pattern.starts_with("+:")) {
    pattern = pattern.substr(2);
  }
  if (pattern.size() > kMaxPatternLength) {
    throw Error(
        fmt::format("{}: dynamic rule pattern of {} characters exceeds the {}-character "
                    "limit",
                    source, pattern.size(), kMaxPatternLength));
  }
  rule.pattern = pattern;
  // Patterns come from downloaded files: RE2 matches in linear time and bounded memory, where
  // a backtracking engine (std::regex) can be stalled or driven into deep recursion by a rule
  // such as "(a*)*b". RE2 reads Python's syntax except backreferences and lookaround.
  RE2::Options options;
  options.set_log_errors(false);
  auto compiled = std::make_shared<const RE2>(pattern, options);
  if (!compiled->ok()) {
    throw Error(
        fmt::format("{}: dynamic rule {} is not a regex nibble can compile ({}); "
                    "nibble reads Python re syntax without backreferences or lookaround, and "
                    "refuses the checkpoint rather than ignoring the rule",
                    source, shown(key), escape_untrusted(compiled->error(), 200)));
  }
  rule.regex = std::move(compiled);
  if (!value.is_object()) {
    throw Error(fmt::format("{}: dynamic rule {} must map to an object of overrides, found {}",
                            source, shown(key), value.type_name()));
  }
  if (rule.skip) return rule;
  for (const auto& [k, v] : value.items()) {
    std::string where = fmt::format("dynamic rule {}", shown(key));
    if (k == "bits") {
      rule.bits = get_int(v, where + " bits", source);
      check_bits(*rule.bits, cfg.method, where, source);
    } else if (k == "group_size") {
      rule.group_size = get_int(v, where + " group_size", source);
      check_group_size(*rule.group_size, where, source);
    } else if (k == "sym") {
      rule.sym = get_bool(v, where + " sym", source);
    } else if (k == "desc_act") {
      rule.desc_act = get_bool(v, where + " desc_act", source);
    } else if (k == "damp_percent" || k == "damp_auto_increment" || k == "static_groups" ||
               k == "true_sequential" || k == "mse" || k == "act_group_aware" || k == "v2" ||
               k == "v2_alpha" || k == "v2_memory_device") {
      // Quantizer settings: they shaped the values, not the layout nibble reads.
    } else {
      throw Error(
          fmt::format("{}: dynamic rule {} overrides {}, which nibble does not "
                      "implement (supported overrides: bits, group_size, sym, desc_act)",
                      source, shown(key), shown(k)));
    }
  }
  return rule;
}

}  // namespace

std::string_view quant_method_name(QuantMethod method) {
  return method == QuantMethod::Gptq ? "gptq" : "awq";
}

QuantConfig parse_quant_config(const ojson& obj, const std::string& source) {
  if (!obj.is_object()) {
    throw Error(fmt::format("{}: quantization config must be a JSON object, found {}", source,
                            obj.type_name()));
  }
  QuantConfig cfg;
  cfg.source = source;

  // Method: explicit, or inferred from the keys each writer uses.
  if (const ojson* m = lookup(obj, {"quant_method", "method"})) {
    std::string method = lower(get_string(*m, "quant_method", source));
    if (method == "gptq") {
      cfg.method = QuantMethod::Gptq;
    } else if (method == "awq") {
      cfg.method = QuantMethod::Awq;
    } else {
      throw Error(
          fmt::format("{}: quantization_config quant_method = {} is not supported "
                      "(nibble supports gptq and awq)",
                      source, shown(method)));
    }
  } else if (lookup(obj, {"w_bit", "version", "zero_point", "q_group_size"})) {
    cfg.method = QuantMethod::Awq;
  } else if (lookup(obj, {"bits", "desc_act", "sym"})) {
    cfg.method = QuantMethod::Gptq;
  } else {
    throw Error(
        fmt::format("{}: cannot tell the quantization method (no quant_method, and neither "
                    "GPTQ nor AWQ keys)",
                    source));
  }

  const ojson* bits = lookup(obj, {"bits", "w_bit"});
  if (!bits) throw Error(fmt::format("{}: quantization_config has no bits (or w_bit)", source));
  cfg.bits = get_int(*bits, "bits", source);
  check_bits(cfg.bits, cfg.method, "quantization_config", source);

  const ojson* gs = lookup(obj, {"group_size", "q_group_size"});
  if (!gs)
    throw Error(fmt::format("{}: quantization_config has no group_size (or q_group_size)", source));
  cfg.group_size = get_int(*gs, "group_size", source);
  check_group_size(cfg.group_size, "quantization_config", source);

  if (const ojson* v = lookup(obj, {"desc_act"})) cfg.desc_act = get_bool(*v, "desc_act", source);
  if (const ojson* v = lookup(obj, {"static_groups"}, true))
    cfg.static_groups = get_bool(*v, "static_groups", source);
  if (const ojson* v = lookup(obj, {"true_sequential"}, true))
    cfg.true_sequential = get_bool(*v, "true_sequential", source);
  if (const ojson* v = lookup(obj, {"lm_head"})) cfg.lm_head = get_bool(*v, "lm_head", source);
  if (const ojson* v = lookup(obj, {"pack_dtype"})) {
    std::string pack = get_string(*v, "pack_dtype", source);
    if (pack != "int32") {
      throw Error(
          fmt::format("{}: quantization_config pack_dtype = {} is not supported "
                      "(nibble reads int32 packing)",
                      source, shown(pack)));
    }
  }

  if (cfg.method == QuantMethod::Gptq) {
    if (const ojson* v = lookup(obj, {"sym"})) cfg.sym = get_bool(*v, "sym", source);
    if (const ojson* v = lookup(obj, {"is_marlin_format"});
        v && get_bool(*v, "is_marlin_format", source)) {
      throw Error(
          fmt::format("{}: quantization_config is_marlin_format = true is not supported "
                      "(nibble reads checkpoint_format gptq and gptq_v2)",
                      source));
    }
    const ojson* fmt_a = lookup(obj, {"checkpoint_format"});
    const ojson* fmt_b = lookup(obj, {"format"});
    std::string format = "gptq";
    if (fmt_a) format = lower(get_string(*fmt_a, "checkpoint_format", source));
    if (fmt_b) {
      std::string other = lower(get_string(*fmt_b, "format", source));
      if (fmt_a && other != format) {
        throw Error(
            fmt::format("{}: quantization_config checkpoint_format = {} contradicts "
                        "format = {}",
                        source, shown(format), shown(other)));
      }
      format = other;
    }
    if (format != "gptq" && format != "gptq_v2") {
      throw Error(
          fmt::format("{}: quantization_config checkpoint_format = {} is not supported "
                      "(nibble supports gptq and gptq_v2)",
                      source, shown(format)));
    }
    cfg.checkpoint_format = format;
  } else {
    cfg.sym = false;
    // AutoAWQ writes `version`; GPTQModel writes `format` / `checkpoint_format`: every one
    // present must name a layout nibble reads.
    std::string version = "gemm";
    for (const char* key : {"version", "format", "checkpoint_format"}) {
      const ojson* v = lookup(obj, {key});
      if (!v) continue;
      std::string value = lower(get_string(*v, key, source));
      if (value != "gemm") {
        throw Error(
            fmt::format("{}: quantization_config {} = {} is not supported (nibble "
                        "supports AWQ version gemm)",
                        source, key, shown(value)));
      }
    }
    cfg.checkpoint_format = version;
    if (const ojson* v = lookup(obj, {"zero_point"}); v && !get_bool(*v, "zero_point", source)) {
      throw Error(
          fmt::format("{}: quantization_config zero_point = false is not supported (AWQ "
                      "GEMM checkpoints carry zero points; expected true)",
                      source));
    }
  }

  if (const ojson* v = lookup(obj, {"modules_to_not_convert"})) {
    if (!v->is_array()) {
      throw Error(fmt::format("{}: modules_to_not_convert must be a list of strings", source));
    }
    if (v->size() > kMaxModulesToNotConvert) {
      throw Error(
          fmt::format("{}: modules_to_not_convert lists {} entries, more than the {} "
                      "nibble accepts",
                      source, v->size(), kMaxModulesToNotConvert));
    }
    for (const auto& m : *v)
      cfg.modules_to_not_convert.push_back(get_string(m, "modules_to_not_convert", source));
  }

  if (const ojson* v = lookup(obj, {"dynamic"})) {
    if (!v->is_object()) {
      throw Error(fmt::format("{}: dynamic must be an object of regex -> overrides, found {}",
                              source, v->type_name()));
    }
    if (cfg.method != QuantMethod::Gptq) {
      throw Error(
          fmt::format("{}: dynamic overrides are a GPTQModel feature; nibble does not "
                      "apply them to {}",
                      source, quant_method_name(cfg.method)));
    }
    for (const auto& [key, value] : v->items())
      cfg.dynamic.push_back(parse_dynamic_rule(key, value, cfg, source));
  }
  return cfg;
}

ModuleQuant QuantConfig::for_module(std::string_view prefix) const {
  ModuleQuant mq{true, bits, group_size, sym, desc_act, ""};
  for (const auto& m : modules_to_not_convert) {
    if (!m.empty() && prefix.find(m) != std::string_view::npos) {
      mq.quantized = false;
      mq.reason = fmt::format("modules_to_not_convert contains {}", shown(m));
      return mq;
    }
  }
  const re2::StringPiece name(prefix.data(), prefix.size());
  for (const auto& rule : dynamic) {
    // GPTQModel uses Python re.match: anchored at the start, not at the end.
    if (!rule.regex->Match(name, 0, name.size(), RE2::ANCHOR_START, nullptr, 0)) continue;
    if (rule.skip) {
      mq.quantized = false;
      mq.reason = fmt::format("dynamic rule {}", shown("-:" + rule.pattern));
      return mq;
    }
    mq.bits = rule.bits.value_or(mq.bits);
    mq.group_size = rule.group_size.value_or(mq.group_size);
    mq.sym = rule.sym.value_or(mq.sym);
    mq.desc_act = rule.desc_act.value_or(mq.desc_act);
    mq.reason = fmt::format("dynamic rule {}", shown(rule.pattern));
    return mq;  // the first matching rule wins, as in GPTQModel
  }
  return mq;
}

nlohmann::ordered_json QuantConfig::to_json() const {
  ojson j;
  if (method == QuantMethod::Gptq) {
    j["quant_method"] = "gptq";
    j["bits"] = bits;
    j["group_size"] = group_size;
    j["desc_act"] = desc_act;
    j["sym"] = sym;
    j["static_groups"] = static_groups;
    j["true_sequential"] = true_sequential;
    j["lm_head"] = lm_head;
    j["checkpoint_format"] = checkpoint_format;
    if (!modules_to_not_convert.empty()) j["modules_to_not_convert"] = modules_to_not_convert;
    if (!dynamic.empty()) {
      ojson d = ojson::object();
      for (const auto& r : dynamic) {
        ojson o = ojson::object();
        if (r.bits) o["bits"] = *r.bits;
        if (r.group_size) o["group_size"] = *r.group_size;
        if (r.sym) o["sym"] = *r.sym;
        if (r.desc_act) o["desc_act"] = *r.desc_act;
        d[(r.skip ? "-:" : "") + r.pattern] = o;
      }
      j["dynamic"] = d;
    }
  } else {
    j["quant_method"] = "awq";
    j["zero_point"] = true;
    j["group_size"] = group_size;
    j["bits"] = bits;
    j["version"] = checkpoint_format;
    j["modules_to_not_convert"] =
        modules_to_not_convert.empty() ? ojson(nullptr) : ojson(modules_to_not_convert);
  }
  return j;
}

QuantConfig parse_quant_config_text(std::string_view text, const std::string& source) {
  if (text.size() > kMaxConfigBytes) {
    throw Error(fmt::format("{}: {} bytes exceeds the {}-byte limit for a config", source,
                            text.size(), kMaxConfigBytes));
  }
  ojson doc = detail::parse_json<ojson>(text, source);
  if (doc.is_object()) {
    auto qc = doc.find("quantization_config");
    if (qc != doc.end()) return parse_quant_config(*qc, source + " quantization_config");
  }
  return parse_quant_config(doc, source);
}

std::optional<QuantConfig> load_quant_config(const std::filesystem::path& dir) {
  namespace fs = std::filesystem;
  auto read = [](const fs::path& p) {
    return detail::read_regular_file(p, kMaxConfigBytes, "quantization config");
  };
  auto present = [](const fs::path& p) {
    std::error_code ec;
    return fs::exists(p, ec) || fs::is_symlink(p, ec);
  };
  std::vector<QuantConfig> found;
  auto config = dir / "config.json";
  if (present(config)) {
    const std::string source = escape_untrusted(config.string(), 400);
    static const std::vector<std::string> kWanted = {"quantization_config"};
    ojson doc = detail::parse_json<ojson>(read(config), source, detail::kMaxJsonValues, &kWanted);
    if (doc.is_object() && doc.contains("quantization_config") &&
        !doc["quantization_config"].is_null()) {
      found.push_back(parse_quant_config(doc["quantization_config"], source));
    }
  }
  for (const char* name : {"quantize_config.json", "quant_config.json"}) {
    auto p = dir / name;
    if (present(p)) {
      found.push_back(parse_quant_config_text(read(p), escape_untrusted(p.string(), 400)));
    }
  }
  if (found.empty()) return std::nullopt;
  const QuantConfig& first = found.front();
  for (size_t i = 1; i < found.size(); ++i) {
    const QuantConfig& other = found[i];
    auto field = [&](const char* key, auto a, auto b) {
      if (a != b) {
        throw Error(fmt::format("{} and {} disagree on {} ({} vs {})", first.source, other.source,
                                key, escape_untrusted(fmt::format("{}", a), 100),
                                escape_untrusted(fmt::format("{}", b), 100)));
      }
    };
    field("quant_method", quant_method_name(first.method), quant_method_name(other.method));
    field("bits", first.bits, other.bits);
    field("group_size", first.group_size, other.group_size);
    field("sym", first.sym, other.sym);
    field("checkpoint_format", first.checkpoint_format, other.checkpoint_format);
  }
  return first;
}

}  // namespace nibble
