#include <nibble/placement_text.hpp>
#include <nibble/untrusted_text.hpp>

namespace nibble {

std::string placement_text(const Placement& p) {
  std::string text = escape_untrusted(p.layer, 200) + " [" + escape_untrusted(p.part) +
                     "]: " + escape_untrusted(p.backend) + "/" + escape_untrusted(p.kernel) + "\n";
  auto section = [&](const char* title, const std::vector<std::string>& lines) {
    if (lines.empty()) return;
    text += std::string("  ") + title + ":\n";
    for (const auto& line : lines) text += "    " + escape_untrusted(line, 1000) + "\n";
  };
  section("passed over", p.passed_over);
  section("alternatives", p.alternatives);
  return text;
}

}  // namespace nibble
