// a.cc includes b.h and b.cc includes a.h: a cycle between the modules a and b, though
// neither header includes the other.
#include "low/a.h"
#include "low/b.h"
