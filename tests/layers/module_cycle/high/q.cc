#include "high/q.h"
#include "high/r.h"
