#include "high/d.h"
