#pragma once
#include "low/b.h"
