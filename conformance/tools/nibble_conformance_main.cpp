// nibble-conformance: the conformance kit on its own, installed with the SDK so a vendor's
// ctest can run it (nibble_add_conformance_test) without the nibble tool.
#include <nibble/conformance/conformance.hpp>

#include <cstdio>
#include <exception>

int main(int argc, char** argv) {
  try {
    return nibble::conformance::main_with_args(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "nibble-conformance: error: %s\n", e.what());
    return 1;
  }
}
