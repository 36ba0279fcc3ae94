// The conformance kit built as an ABI 1.0 host (its plugin.h structs in the 1.0 layout, no
// thread_budget in the host table, no prepared_bytes in kernels): the version-skew test that an
// older host loads a newer-minor plugin and runs layers on it.
#include <nibble/conformance/conformance.hpp>

int main(int argc, char** argv) { return nibble::conformance::main_with_args(argc, argv); }
