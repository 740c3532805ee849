#include "high/c.h"
#include "high/d.h"
// Not in this folder: a header found through the include path, not a module of ours.
#include "vendor.h"
