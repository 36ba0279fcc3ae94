// nibble: list backends, inspect and quantize checkpoints, run layers, benchmark, check plugins.
#include <nibble/error.hpp>
#include <nibble/untrusted_text.hpp>

#include <cstdio>
#include <cstring>
#include <exception>
#include <string>

#include "commands.hpp"

namespace {

struct Command {
  const char* name;
  int (*run)(int, char**);
  const char* summary;
};

const Command kCommands[] = {
    {"backends", nibble_cmd_backends, "list plugin files, backends, availability and kernels"},
    {"conformance", nibble_cmd_conformance,
     "check a plugin against the ABI and the numeric contract"},
    {"demo", nibble_cmd_demo, "quantize a small model and run it on every backend"},
    {"inspect", nibble_cmd_inspect, "show a checkpoint's quantization config, layers and warnings"},
    {"quantize", nibble_cmd_quantize, "quantize a checkpoint (or a synthetic one) to GPTQ or AWQ"},
    {"completion", nibble_cmd_completion, "print a bash completion script"},
#ifdef NIBBLE_HAVE_BENCH
    {"bench", nibble_cmd_bench, "benchmark cpu_amx against the machine's limits and oneDNN"},
#endif
    {"run", nibble_cmd_run, "run one linear layer or MoE block of a checkpoint on an input"},
};

void usage(FILE* out) {
  std::fprintf(out,
               "nibble — GPTQ/AWQ quantized layers on pluggable backends\n\n"
               "usage: nibble <command> [options]   (nibble <command> --help for details)\n\n"
               "commands:\n");
  for (const Command& c : kCommands) std::fprintf(out, "  %-12s %s\n", c.name, c.summary);
  std::fprintf(out, "\nexample: nibble backends --json\n");
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2 || !std::strcmp(argv[1], "-h") || !std::strcmp(argv[1], "--help")) {
    usage(argc < 2 ? stderr : stdout);
    return argc < 2 ? 2 : 0;
  }
  for (const Command& c : kCommands) {
    if (std::strcmp(argv[1], c.name) != 0) continue;
    try {
      return c.run(argc - 1, argv + 1);
    } catch (const nibble::Error& e) {
      std::fprintf(stderr, "nibble %s: error: %s\n", c.name, e.what());
      return 1;
    } catch (const std::exception& e) {
      std::fprintf(stderr, "nibble %s: internal error: %s\n", c.name, e.what());
      return 1;
    }
  }
  std::fprintf(stderr, "nibble: unknown command %s\n\n", nibble::quoted_untrusted(argv[1]).c_str());
  usage(stderr);
  return 2;
}
