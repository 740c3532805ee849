// A source without a header: a module nothing can include, so on no cycle; it depends on
// modules of two cycles, which does not make it part of them.
#include "low/a.h"
#include "low/c.h"
