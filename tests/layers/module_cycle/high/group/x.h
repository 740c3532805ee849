// A subfolder is a folder of its own. x <-> y <-> z: two cycles in one knot of three
// modules.
#pragma once
#include "high/group/y.h"
