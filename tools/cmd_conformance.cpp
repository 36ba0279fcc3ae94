// nibble conformance --plugin FILE.so [--backend NAME] [--quick] [--json] ...: the plugin
// conformance kit (conformance/) as a subcommand of the nibble tool.
#include <nibble/conformance/conformance.hpp>

#include <vector>

#include "commands.hpp"

int nibble_cmd_conformance(int argc, char** argv) {
  // The kit names itself by argv[0] in its messages and usage.
  std::vector<char*> args(argv, argv + argc);
  char self[] = "nibble conformance";
  if (!args.empty()) args[0] = self;
  return nibble::conformance::main_with_args(int(args.size()), args.data());
}
