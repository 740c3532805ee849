// The `campo` executable: option parsing lives in tools/cli.cc (so tests can drive it in-process).
#include "tools/cli.h"

int main(int argc, char** argv) { return campo::cli::main(argc, argv); }
