// Scheme lookup by kind.
#include <nibble/checkpoint_scheme.hpp>
#include <nibble/error.hpp>

namespace nibble {

namespace schemes {
const Scheme& gptq_scheme(SchemeKind kind);
const Scheme& awq_gemm_scheme();
}  // namespace schemes

std::string_view scheme_name(SchemeKind kind) {
  switch (kind) {
    case SchemeKind::GptqV1:
      return "gptq_v1";
    case SchemeKind::GptqV2:
      return "gptq_v2";
    case SchemeKind::AwqGemm:
      return "awq_gemm";
  }
  return "unknown";
}

const Scheme& get_scheme(SchemeKind kind) {
  return kind == SchemeKind::AwqGemm ? schemes::awq_gemm_scheme() : schemes::gptq_scheme(kind);
}

}  // namespace nibble
