// Header-only modules c and d include each other; c names d as the compiler finds it, next
// to the includer.
#pragma once
#include "d.h"
