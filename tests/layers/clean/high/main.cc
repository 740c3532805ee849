// A source without a header: a module that nothing includes.
#include "high/c.h"
#include "high/d.h"
