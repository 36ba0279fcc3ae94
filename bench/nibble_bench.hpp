// `nibble bench`: times cpu_amx's linear kernels against the machine's own limits (read bandwidth,
// AMX tile peaks) and oneDNN's bf16 matmul, all measured in the same run and interleaved.
#pragma once

/// Entry point of the `bench` command (argv[0] is the command name). Returns a process exit code.
int nibble_cmd_bench(int argc, char** argv);
