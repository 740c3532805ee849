// Modules in one direction: a -> b inside low/. A module is its folder and base name:
// low/sub/b.h is not low/b.h's module, and a subfolder is a folder of its own, so
// a -> sub/b -> a is no cycle of either folder's modules.
#include "low/a.h"
#include "low/b.h"
#include "low/sub/b.h"
