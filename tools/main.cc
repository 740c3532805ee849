// The `campo` executable: all logic lives in tools/lib (so tests can drive it in-process).
#include "tools/lib/cli.h"

int main(int argc, char** argv) { return campo::cli::main(argc, argv); }
