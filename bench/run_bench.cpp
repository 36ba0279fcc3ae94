// A stand-alone runner of the bench (the `nibble` CLI links the same library as `nibble bench`).
#include "nibble_bench.hpp"

int main(int argc, char** argv) { return nibble_cmd_bench(argc, argv); }
