#pragma once
#include "high/group/y.h"
