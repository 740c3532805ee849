#include "low/b.h"
