// Depends on the cycle p -> q -> r -> p and on the subfolder's modules, on no cycle itself.
#include "high/group/x.h"
#include "high/p.h"
