// The nibble tool's subcommands. Each takes argc/argv with argv[0] = the subcommand's name and
// returns the process exit code (0 success, 1 failure, 2 bad usage).
#pragma once

int nibble_cmd_backends(int argc, char** argv);
int nibble_cmd_inspect(int argc, char** argv);
int nibble_cmd_quantize(int argc, char** argv);
int nibble_cmd_run(int argc, char** argv);
int nibble_cmd_demo(int argc, char** argv);
int nibble_cmd_completion(int argc, char** argv);
int nibble_cmd_conformance(int argc, char** argv);
int nibble_cmd_bench(int argc, char** argv);
