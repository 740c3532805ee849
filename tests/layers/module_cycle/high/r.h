#pragma once
#include "high/p.h"
