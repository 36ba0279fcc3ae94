// nibble conformance --plugin FILE.so [--backend NAME] [--quick] [--json] ...: the plugin
// conformance kit (sdk/conformance) as a subcommand of the nibble tool.
#include <nibble/conformance/conformance.hpp>

#include "commands.hpp"

int nibble_cmd_conformance(int argc, char** argv) {
  return nibble::conformance::main_with_args(argc, argv);
}
