#include "high/group/y.h"
#include "high/group/x.h"
#include "high/group/z.h"
