#include "low/b.h"
#include "low/a.h"
